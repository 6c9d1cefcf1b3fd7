"""Feature store: fp8 aux quantisation, capture == compute_features, resume, disk check, kill -9."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eagle3kit.core.errors import Eagle3Error


@pytest.fixture(scope="module")
def model_dir():
    from eagle3kit import zoo

    return str(zoo.get("llama-v1", size="tiny"))


@pytest.fixture(scope="module")
def target(model_dir):
    from eagle3kit.model.target import TargetModel

    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model, shared 2-core box
    yield TargetModel.from_pretrained(model_dir)
    torch.set_num_threads(n)


def make_data(folder: Path, vocab_size: int, n: int = 7, seed: int = 0) -> list[str]:
    """A prepared DATA dir of n random samples (lengths 5..24, loss on the second half)."""
    from eagle3kit.data.prepared import PreparedWriter

    g = torch.Generator().manual_seed(seed)
    w = PreparedWriter(folder)
    ids = []
    for i in range(n):
        t = int(torch.randint(5, 25, (1,), generator=g))
        toks = torch.randint(3, vocab_size, (t,), generator=g).tolist()
        w.add(f"q{i}", toks, [j >= t // 2 for j in range(t)])
        ids.append(f"q{i}")
    w.finish({"target": {"vocab_size": vocab_size}, "template_sha256": "test"})
    return ids


def make_vocab(path: Path, vocab_size: int, vd: int) -> torch.Tensor:
    from eagle3kit.core.vocab import save_vocab

    used = torch.arange(0, vocab_size, vocab_size // vd)[:vd]  # [Vd] every (V/Vd)-th id
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[used] = True
    d2t = used - torch.arange(vd)
    save_vocab(path, d2t, t2d)
    return d2t


def check_store(store: Path, data_ids: list[str], data_tokens: int) -> dict:
    """No duplicate, missing or corrupt shard: files == manifest, hashes, tokens, ids in order."""
    from eagle3kit.data.prepared import sha256_file
    from eagle3kit.data.store import FeatureStore

    man = json.loads((store / "manifest.json").read_text())
    assert man["complete"] is True
    names = [s["file"] for s in man["shards"]]
    assert names == [f"shard-{i:05d}.safetensors" for i in range(len(names))]
    assert sorted(p.name for p in store.iterdir()) == sorted(names + ["manifest.json"])
    for s in man["shards"]:
        assert sha256_file(store / s["file"]) == s["sha256"]
    assert sum(s["tokens"] for s in man["shards"]) == man["tokens"] == data_tokens
    assert sum(s["samples"] for s in man["shards"]) == man["samples"] == len(data_ids)
    fs = FeatureStore(store, verify=True)
    assert fs.ids == data_ids
    return man


def test_fp8_quantisation_error_bound():
    from eagle3kit.data.store import dequantise_aux, quantise_aux

    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 3 * 64, generator=g) * torch.logspace(-3, 3, 50)[:, None]  # [N, 3H]
    x[7, 64:128] = 0.0  # a zero layer row
    q, s = quantise_aux(x, 3)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (50, 3) and s.dtype == torch.float32
    y = dequantise_aux(q, s)
    # e4m3: 3 mantissa bits -> relative error <= 2^-4 for normals; subnormal step s * 2^-9
    bound = torch.maximum(x.abs() * 2**-4, s.repeat_interleave(64, dim=1) * 2**-10) * 1.0001
    assert ((x - y).abs() <= bound).all()
    assert (y[7, 64:128] == 0).all()
    # each row-layer's largest |x| maps to 448 and comes back to float32 precision
    xs = x.reshape(50, 3, 64)
    i = xs.abs().argmax(-1, keepdim=True)
    torch.testing.assert_close(
        y.reshape(50, 3, 64).gather(-1, i), xs.gather(-1, i), rtol=1e-6, atol=0
    )


def test_capture_matches_compute_features(tmp_path, target):
    from eagle3kit.data.features import compute_features
    from eagle3kit.data.prepared import collate, load_prepared
    from eagle3kit.data.store import FeatureStore, capture

    V = target.vocab_size
    ids = make_data(tmp_path / "D", V)
    d2t = make_vocab(tmp_path / "v.safetensors", V, 64)
    res = capture(
        tmp_path / "D",
        target,
        tmp_path / "S",
        vocab=tmp_path / "v.safetensors",
        topk=8,
        shard_tokens=30,
        batch_tokens=40,
    )
    data = load_prepared(tmp_path / "D")
    man = check_store(tmp_path / "S", ids, int(data.lengths().sum()))
    assert len(man["shards"]) >= 3 and res["bytes_per_token"] > 0
    assert man["aux_layers"] == list(target.aux_layers)
    fs = FeatureStore(tmp_path / "S")
    idx = [5, 0, 3]
    got = fs.get(idx)
    ref = compute_features(target, *collate([data[i] for i in idx]), d2t, topk=8)
    for name in ("input_ids", "attention_mask", "loss_mask", "target_argmax", "teacher_ids"):
        assert torch.equal(getattr(got, name), getattr(ref, name)), name
    am = ref.attention_mask
    scale = (
        ref.aux.abs().reshape(*am.shape, 3, -1).amax(-1).repeat_interleave(target.hidden_size, -1)
    )
    assert ((got.aux - ref.aux).abs() <= ref.aux.abs() * 2**-4 + scale / 448 * 2**-9 + 1e-6).all()
    torch.testing.assert_close(got.teacher_logp, ref.teacher_logp, atol=2e-2, rtol=1e-3)  # fp16
    assert fs.split(0.3, seed=1) == data.split(0.3, seed=1)


def test_full_vocab_teacher_and_rerun_is_a_noop(tmp_path, target):
    from eagle3kit.data.store import FeatureStore, capture

    ids = make_data(tmp_path / "D", target.vocab_size, n=3)
    r1 = capture(tmp_path / "D", target, tmp_path / "S", topk=None)
    assert (
        r1["quantisation"]["teacher_ids"] is None
        and r1["vocab"]["draft_vocab_size"] == target.vocab_size
    )
    f = FeatureStore(tmp_path / "S").get([1])
    assert f.teacher_ids.shape[-1] == target.vocab_size
    assert torch.equal(f.teacher_ids[0, 0], torch.arange(target.vocab_size))
    torch.testing.assert_close(
        f.teacher_logp[0].exp().sum(-1), torch.ones(f.input_ids.shape[1]), atol=2e-2, rtol=0
    )
    before = (tmp_path / "S" / "manifest.json").read_text()
    r2 = capture(tmp_path / "D", target, tmp_path / "S", topk=None)
    assert r2["resumed_from"] == 3 and r2["shards"] == r1["shards"]
    assert json.loads(before)["shards"] == r2["shards"] and ids == FeatureStore(tmp_path / "S").ids


def test_heldout_data_from_the_data_split_and_resume_checks_it(tmp_path, target):
    """DATA that says it is a held-out split marks the store `heldout_data`; capture's option
    wins over it; a rerun with another answer is not the same capture."""
    from eagle3kit.data.prepared import PreparedWriter
    from eagle3kit.data.store import capture, data_is_heldout

    assert data_is_heldout({"split": "test"}, None) and data_is_heldout({}, True)
    assert not data_is_heldout({"split": "train"}, None) and not data_is_heldout({}, None)
    assert not data_is_heldout({"split": "test"}, False)
    w = PreparedWriter(tmp_path / "D")
    for i in range(3):
        w.add(f"t{i}", [5, 6, 7, 8, 9 + i], [False, False, True, True, True])
    w.finish({"target": {"vocab_size": target.vocab_size}, "template_sha256": "t", "split": "test"})
    assert capture(tmp_path / "D", target, tmp_path / "S", topk=4)["heldout_data"] is True
    with pytest.raises(Eagle3Error, match=r"manifest\.json: heldout_data"):
        capture(tmp_path / "D", target, tmp_path / "S", topk=4, heldout_data=False)
    assert (
        capture(tmp_path / "D", target, tmp_path / "S2", topk=4, heldout_data=False)["heldout_data"]
        is False
    )


def test_refusals_leave_things_as_they_were(tmp_path, target, monkeypatch):
    import shutil

    from eagle3kit.data.store import capture

    make_data(tmp_path / "D", target.vocab_size, n=3)
    capture(tmp_path / "D", target, tmp_path / "S", topk=4)
    before = {p.name: p.read_bytes() for p in (tmp_path / "S").iterdir()}
    with pytest.raises(Eagle3Error, match=r"manifest\.json: quantisation"):
        capture(tmp_path / "D", target, tmp_path / "S", topk=8)  # not the same capture
    assert {p.name: p.read_bytes() for p in (tmp_path / "S").iterdir()} == before

    from eagle3kit.data.store import FeatureStore

    man = json.loads((tmp_path / "S" / "manifest.json").read_text())
    (tmp_path / "S" / "manifest.json").write_text(json.dumps({**man, "complete": False}))
    with pytest.raises(Eagle3Error, match=r"complete: expected true"):
        FeatureStore(tmp_path / "S")  # an unfinished capture is not silently a smaller one
    assert len(FeatureStore(tmp_path / "S", partial=True)) == 3

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=1000))
    with pytest.raises(
        Eagle3Error, match=r"S2: capture needs about [\d.]+ MB of disk, found 1 KB free"
    ):
        capture(tmp_path / "D", target, tmp_path / "S2", topk=4)
    assert not (tmp_path / "S2").exists()


def test_cli_capture_json_and_disk_refusal_exit_2(tmp_path, model_dir, cli, monkeypatch):
    import shutil

    make_data(tmp_path / "D", 512, n=3)
    r = cli(
        "data",
        "capture",
        tmp_path / "D",
        "--target",
        model_dir,
        "-o",
        tmp_path / "S",
        "--topk",
        "4",
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert {"target", "aux_layers", "tokens", "shards", "bytes_per_token"} <= set(doc)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=10))
    r = cli("data", "capture", tmp_path / "D", "--target", model_dir, "-o", tmp_path / "S3")
    last = r.err.strip().splitlines()[-1]
    assert r.code == 2 and r.err.count("error") == 1
    assert last.startswith("eagle3kit: error: ") and last.endswith("of disk, found 10 B free")
    assert not (tmp_path / "S3").exists()


@pytest.mark.slow
@pytest.mark.kill
@pytest.mark.parametrize(("moment", "listed"), [("before", 2), ("after", 3)])
def test_kill9_during_capture_then_rerun(tmp_path, model_dir, moment, listed):
    """Killed as the manifest lists the third shard (before: the shard file written, not yet
    listed; after: listed): the store reads as the shards listed; the rerun keeps them and
    finishes with nothing duplicated, missing or corrupt."""
    from kill_helpers import kill_at

    from eagle3kit.data.prepared import load_prepared

    ids = make_data(tmp_path / "D", 512, n=90)
    cmd = [
        sys.executable,
        "-c",
        "from eagle3kit.cli import main; main()",
        "data",
        "capture",
        str(tmp_path / "D"),
        "--target",
        model_dir,
        "-o",
        str(tmp_path / "S"),
        "--shard-tokens",
        "40",
        "--batch-tokens",
        "48",
        "--topk",
        "8",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    man = tmp_path / "S" / "manifest.json"
    kill_at(cmd, f"{moment}:{man}#4", tmp_path, env)  # the 4th write: the 3rd shard's listing
    part = json.loads(man.read_text())
    assert not part["complete"] and len(part["shards"]) == listed
    r = subprocess.run(cmd + ["--json"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert 0 < doc["resumed_from"] < 90
    check_store(tmp_path / "S", ids, int(load_prepared(tmp_path / "D").lengths().sum()))
    assert doc["shards"][: len(part["shards"])] == part["shards"]  # what was there was kept
