"""The Hub code paths, exercised against local files (no network): header metadata and range reads."""

from __future__ import annotations

import struct

import numpy as np
from ckpt_helpers import tiny_spec

from eagle3kit.formats import safetensors_io as sio
from eagle3kit.formats.synthetic import write_sparse_drafter


class _Resp:
    def __init__(self, content: bytes):
        self.content = content

    def raise_for_status(self):
        pass


def test_load_hub_matches_local(tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub.utils import _safetensors as hs

    d = write_sparse_drafter(tmp_path / "d", tiny_spec())
    local = sio.load_local(d)
    raw = (d / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    base = 8 + n

    def fake_meta(repo_id, revision=None, **kw):
        tensors = {
            k: hs.TensorInfo(
                dtype=t.dtype, shape=list(t.shape), data_offsets=(t.start - base, t.end - base)
            )
            for k, t in local.tensors.items()
        }
        fm = hs.SafetensorsFileMetadata(metadata={}, tensors=tensors)
        return hs.SafetensorsRepoMetadata(
            metadata=None,
            sharded=False,
            weight_map=dict.fromkeys(tensors, "model.safetensors"),
            files_metadata={"model.safetensors": fm},
        )

    class FakeSession:
        def get(self, url, headers, timeout, **kw):
            assert url.endswith("/org/drafter/resolve/main/model.safetensors")
            a, b = (int(x) for x in headers["Range"].removeprefix("bytes=").split("-"))
            return _Resp(raw[a : b + 1])

    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", fake_meta)
    monkeypatch.setattr(
        huggingface_hub, "hf_hub_download", lambda repo, fname, revision=None: str(d / fname)
    )
    monkeypatch.setattr("huggingface_hub.utils.get_session", lambda: FakeSession())
    hub = sio.load_checkpoint("org/drafter")
    assert hub.repo_id == "org/drafter" and hub.config == local.config
    assert {k: (t.dtype, t.shape, t.nbytes) for k, t in hub.tensors.items()} == {
        k: (t.dtype, t.shape, t.nbytes) for k, t in local.tensors.items()
    }
    for name in ("d2t", "t2d"):
        assert np.array_equal(hub.read_small_tensor(name), local.read_small_tensor(name))
