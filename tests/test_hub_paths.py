"""The Hub code path, exercised against local folders (no network): a fake HTTP session serves a
folder as `org/repo` (model info, files, range requests), so local and Hub reads of the same
bytes can be compared, fuzzed."""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from ckpt_helpers import tiny_spec
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from eagle3kit.checkpoint.eagle3.synthetic import write_sparse_drafter
from eagle3kit.checkpoint.io import safetensors_io as sio
from eagle3kit.core.errors import Eagle3Error

REPO = "org/drafter"


class _Resp:
    def __init__(self, content: bytes, status: int = 200, headers: dict | None = None):
        self.content, self.status_code, self.headers = content, status, headers or {}


class FakeHub:
    """Serves the folder `root` as Hub repo REPO; counts requests."""

    def __init__(self, root: Path):
        self.root, self.calls = root, []

    def get(self, url, headers=None, timeout=None, **kw):
        from huggingface_hub import constants

        self.calls.append(url)
        assert timeout is not None and timeout <= 30
        if url == f"{constants.ENDPOINT}/api/models/{REPO}":
            files = [
                str(p.relative_to(self.root)) for p in sorted(self.root.rglob("*")) if p.is_file()
            ]
            return _Resp(json.dumps({"siblings": [{"rfilename": f} for f in files]}).encode())
        prefix = f"{constants.ENDPOINT}/{REPO}/resolve/main/"
        assert url.startswith(prefix), url
        f = self.root / url[len(prefix) :]
        if not f.is_file():
            return _Resp(b"", 404)
        raw = f.read_bytes()
        rng = (headers or {}).get("Range")
        if rng is None:
            return _Resp(raw)
        a, b = (int(x) for x in rng.removeprefix("bytes=").split("-"))
        return _Resp(
            raw[a : b + 1], 206, {"Content-Range": f"bytes {a}-{min(b, len(raw) - 1)}/{len(raw)}"}
        )


@pytest.fixture
def hub(monkeypatch):
    """hub(folder) -> FakeHub serving it as REPO."""
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    state = {}
    monkeypatch.setattr("huggingface_hub.utils.get_session", lambda: state["hub"])
    monkeypatch.setattr(
        huggingface_hub,
        "hf_hub_download",
        lambda repo, fname, revision=None: str(state["hub"].root / fname),
    )

    def serve(root: Path) -> FakeHub:
        state["hub"] = FakeHub(Path(root))
        return state["hub"]

    return serve


def _summary(ckpt: sio.Checkpoint) -> dict:
    return {
        k: (t.dtype, t.shape, t.start, t.end, Path(t.file).name) for k, t in ckpt.tensors.items()
    }


def test_load_hub_matches_local(tmp_path, hub):
    d = write_sparse_drafter(tmp_path / "d", tiny_spec())
    (d / "tokenizer.json").write_text("{}")
    local = sio.load_local(d)
    fake = hub(d)
    remote = sio.load_checkpoint(REPO)
    assert remote.repo_id == REPO and remote.config == local.config
    assert _summary(remote) == _summary(local)  # absolute offsets on both paths
    assert remote.has_tokenizer and remote.tokenizer_file == str(d / "tokenizer.json")
    n_header_reads = len(fake.calls)
    for name in ("d2t", "t2d"):
        assert np.array_equal(remote.read_small_tensor(name), local.read_small_tensor(name))
    assert len(fake.calls) == n_header_reads + 2  # one range request per tensor, no length re-read


def test_hub_checks_overlap_and_inside_file(tmp_path, hub):
    from ckpt_helpers import raw_safetensors

    d = tmp_path / "r"
    d.mkdir()
    (d / "config.json").write_text("{}")
    hdr = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
    }
    raw_safetensors(d / "model.safetensors", hdr, b"\0" * 12)
    hub(d)
    with pytest.raises(
        Eagle3Error, match=r"hf://org/drafter/model.safetensors: tensors 'a' and 'b' overlap"
    ):
        sio.load_hub(REPO)
    hdr["b"]["data_offsets"] = [8, 16]
    raw_safetensors(d / "model.safetensors", hdr, b"\0" * 12)
    with pytest.raises(
        Eagle3Error,
        match=r"hf://org/drafter/model.safetensors: tensor 'b': data_offsets \[8, 16\] end outside",
    ):
        sio.load_hub(REPO)


# ---------------------------------------------------------------- fuzzed: same findings


_entry = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["F32", "BF16", "I64", "BOOL", "X9"]),
        "shape": st.lists(st.integers(-1, 5), max_size=2),
        "data_offsets": st.lists(st.integers(-2, 48), min_size=2, max_size=2),
    }
)


def _normalise(msg: str, root: Path) -> str:
    return msg.replace(str(root), "ROOT").replace(f"hf://{REPO}", "ROOT")


def _findings(load, root: Path):
    try:
        return ("ok", _summary(load()))
    except Eagle3Error as e:
        return ("error", _normalise(str(e), root))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    headers=st.lists(
        st.dictionaries(st.sampled_from("abcd"), _entry, max_size=3), min_size=1, max_size=2
    ),
    data_len=st.integers(0, 48),
    lie=st.one_of(st.just(0), st.integers(-4, 4)),
    cut=st.one_of(st.just(0), st.integers(0, 6)),
    sharded=st.booleans(),
    escape=st.booleans(),
)
def test_hub_and_local_give_the_same_findings(hub, headers, data_len, lie, cut, sharded, escape):
    with tempfile.TemporaryDirectory() as td:
        root = Path(td)
        (root / "config.json").write_text("{}")
        wmap = {}
        for i, h in enumerate(headers):
            fname = f"model-{i:05d}.safetensors"
            hb = json.dumps(h).encode()
            raw = struct.pack("<Q", max(0, len(hb) + lie)) + hb + b"\1" * data_len
            (root / fname).write_bytes(raw[: len(raw) - cut] if cut < len(raw) else raw)
            wmap.update(dict.fromkeys(h, fname))
        if sharded and wmap:
            if escape:
                wmap[next(iter(wmap))] = "../elsewhere.safetensors"
            (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
        hub(root)
        local = _findings(lambda: sio.load_local(root), root)
        remote = _findings(lambda: sio.load_hub(REPO), root)
        event(local[0] if local[0] == "ok" else local[1].split(":")[1][:30])
        assert local == remote


# ---------------------------------------------------------------- a mistyped local path


@pytest.mark.timeout
def test_mistyped_path_offline_fails_fast(tmp_path, monkeypatch, network_attempts):
    from conftest import run_cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = run_cli("inspect", "drafters/mine")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert (
        "drafters/mine: no such local path" in r.err
        and "Hub repo id" in r.err
        and "offline" in r.err
    )
    (tmp_path / "drafters").mkdir()
    monkeypatch.delenv("HF_HUB_OFFLINE")  # the folder exists: never tried on the Hub at all
    r = run_cli("inspect", "drafters/mine")
    assert r.code == 2 and "no such local path (folder drafters/ exists here" in r.err
    assert network_attempts == []


def test_unreachable_hub_one_request_one_line(tmp_path, monkeypatch):
    from conftest import run_cli

    calls = []

    class Down:
        def get(self, url, **kw):
            calls.append(url)
            raise ConnectionError("[Errno -2] Name or service not known")

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.utils.get_session", lambda: Down())
    r = run_cli("inspect", "org/nothing")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert (
        "org/nothing: no such local path, and as a Hub repo id: hf://org/nothing: cannot read from "
        "the Hub: ConnectionError" in r.err
    )
    assert len(calls) == 1  # no retries
    with pytest.raises(Eagle3Error) as ei:  # --debug shows the cause: it is chained, not hidden
        sio.load_checkpoint("org/nothing")
    assert isinstance(ei.value.__cause__.__cause__, ConnectionError)
