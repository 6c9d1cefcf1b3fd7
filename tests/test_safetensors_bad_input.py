"""Bad checkpoints: exit 2, one stderr line naming the file, no traceback, nothing written."""

from __future__ import annotations

import json

import pytest
from ckpt_helpers import raw_safetensors, tiny_spec
from conftest import run_cli

from eagle3kit.checkpoint.eagle3.synthetic import write_sparse_drafter


def _assert_bad(r, needle: str, *also: str):
    assert r.code == 2, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert "Traceback" not in r.err
    assert needle in lines[0], lines[0]
    for a in also:
        assert a in lines[0], lines[0]


@pytest.fixture
def good(tmp_path):
    return write_sparse_drafter(tmp_path / "good", tiny_spec())


def test_good_checkpoint_inspects(good):
    r = run_cli("inspect", good)
    assert r.code == 0, r.err


def test_missing_path(tmp_path):
    _assert_bad(run_cli("inspect", tmp_path / "nope"), "nope", "no such file")


def test_config_not_json(good):
    (good / "config.json").write_text("{not json")
    _assert_bad(run_cli("inspect", good), "config.json", "not valid JSON")


def test_config_missing_hidden_size(good):
    cfg = json.loads((good / "config.json").read_text())
    del cfg["hidden_size"]
    (good / "config.json").write_text(json.dumps(cfg))
    _assert_bad(run_cli("inspect", good), "config.json", "hidden_size", "missing")


def test_config_wrong_type(good):
    cfg = json.loads((good / "config.json").read_text())
    cfg["intermediate_size"] = "big"
    (good / "config.json").write_text(json.dumps(cfg))
    _assert_bad(run_cli("inspect", good), "config.json", "intermediate_size", "'big'")


def test_truncated_file(good):
    (good / "model.safetensors").write_bytes(b"\x10\x00")
    _assert_bad(run_cli("inspect", good), "model.safetensors", "truncated")


def test_truncated_data(good):
    f = good / "model.safetensors"
    raw = f.read_bytes()
    f.write_bytes(raw[: len(raw) - 100])
    _assert_bad(run_cli("inspect", good), "model.safetensors", "outside the file")


def test_header_length_beyond_file(good):
    raw_safetensors(
        good / "model.safetensors",
        {"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}},
        b"\0" * 4,
        header_len=10_000,
    )
    _assert_bad(run_cli("inspect", good), "model.safetensors", "header length 10000")


def test_offsets_overlap(good):
    hdr = {
        "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
        "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]},
    }
    raw_safetensors(good / "model.safetensors", hdr, b"\0" * 24)
    _assert_bad(run_cli("inspect", good), "model.safetensors", "overlap")


def test_offsets_outside_file(good):
    hdr = {"a": {"dtype": "F32", "shape": [4], "data_offsets": [100, 116]}}
    raw_safetensors(good / "model.safetensors", hdr, b"\0" * 16)
    _assert_bad(run_cli("inspect", good), "model.safetensors", "outside the file")


def test_dtype_times_shape_mismatch(good):
    hdr = {"a": {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 16]}}
    raw_safetensors(good / "model.safetensors", hdr, b"\0" * 16)
    _assert_bad(run_cli("inspect", good), "model.safetensors", "needs 32 bytes", "span 16")


def test_unknown_dtype(good):
    hdr = {"a": {"dtype": "Q4_K", "shape": [4], "data_offsets": [0, 4]}}
    raw_safetensors(good / "model.safetensors", hdr, b"\0" * 4)
    _assert_bad(run_cli("inspect", good), "model.safetensors", "unknown dtype 'Q4_K'")


def test_index_points_outside_directory(good):
    (good / "model.safetensors").rename(good / "model-00001-of-00001.safetensors")
    index = {"metadata": {}, "weight_map": {"fc.weight": "../x.safetensors"}}
    (good / "model.safetensors.index.json").write_text(json.dumps(index))
    _assert_bad(
        run_cli("inspect", good), "model.safetensors.index.json", "outside the checkpoint directory"
    )


def test_only_pickle_refused(tmp_path):
    d = tmp_path / "pickled"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 8})
    )
    (d / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    _assert_bad(run_cli("inspect", d), "pytorch_model.bin", "pickle")


def test_debug_shows_traceback(tmp_path):
    with pytest.raises(Exception, match="no such file"):
        run_cli("inspect", tmp_path / "nope", "--debug")


def test_sharded_checkpoint_reads(tmp_path):
    """A sharded checkpoint (index + two shards) is read through its weight_map."""
    import torch

    from eagle3kit.checkpoint.io.safetensors_io import load_local
    from eagle3kit.checkpoint.io.safetensors_write import write_safetensors

    d = tmp_path / "sharded"
    d.mkdir()
    write_safetensors(d / "a.safetensors", {"x": torch.zeros(2, 3)})
    write_safetensors(d / "b.safetensors", {"y": torch.zeros(5, dtype=torch.int64)})
    (d / "config.json").write_text("{}")
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})
    )
    ck = load_local(d)
    assert ck.tensors["x"].shape == (2, 3) and ck.tensors["x"].dtype == "F32"
    assert ck.tensors["y"].nbytes == 40 and ck.tensors["y"].file.endswith("b.safetensors")


def test_header_matches_safetensors_library(tmp_path):
    """Our header parser agrees with the safetensors library on names, dtypes, shapes and bytes."""
    import torch
    from safetensors import safe_open

    from eagle3kit.checkpoint.io.safetensors_io import read_header_file
    from eagle3kit.checkpoint.io.safetensors_write import write_safetensors

    tensors = {
        "a": torch.randn(3, 5),
        "b": torch.zeros(7, dtype=torch.bfloat16),
        "c": torch.ones(2, 2, dtype=torch.bool),
    }
    write_safetensors(tmp_path / "m.safetensors", tensors)
    ours = read_header_file(tmp_path / "m.safetensors")
    raw = (tmp_path / "m.safetensors").read_bytes()
    with safe_open(tmp_path / "m.safetensors", framework="pt") as f:
        for name in f.keys():
            t = f.get_tensor(name)
            info = ours[name]
            assert info.shape == tuple(t.shape)
            assert raw[info.start : info.end] == t.contiguous().view(torch.uint8).numpy().tobytes()


def test_sparse_writer_round_trips_through_the_safetensors_library(tmp_path):
    """write_safetensors_sparse: holes for zero runs, bytes the safetensors library reads back."""
    import os

    import torch
    from safetensors.torch import load_file

    from eagle3kit.checkpoint.io.safetensors_io import read_header_file
    from eagle3kit.checkpoint.io.safetensors_write import SPARSE_CHUNK, write_safetensors_sparse

    g = torch.Generator().manual_seed(0)
    tensors = {
        "zeros": torch.zeros(3 * SPARSE_CHUNK // 2, dtype=torch.bfloat16),  # 3 MiB of zeros
        "half": torch.cat(
            [torch.zeros(SPARSE_CHUNK // 4), torch.randn(SPARSE_CHUNK // 4, generator=g)]
        ),
        "ids": torch.arange(7, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 4),
    }
    old = os.umask(0o077)
    try:
        written = write_safetensors_sparse(tmp_path / "m.safetensors", tensors, {"format": "pt"})
    finally:
        os.umask(old)
    f = tmp_path / "m.safetensors"
    assert f.stat().st_mode & 0o777 == 0o600  # the umask decides (here a strict one)
    back = load_file(f)
    assert back.keys() == tensors.keys()
    assert all(back[k].dtype == v.dtype and torch.equal(back[k], v) for k, v in tensors.items())
    read_header_file(f)  # our own checks accept it too
    assert written < 2 * SPARSE_CHUNK + 1024  # the 3 MiB zero tensor and the zero half: not written
    assert f.stat().st_blocks * 512 < f.stat().st_size // 2


def test_writers_follow_the_umask(tmp_path):
    import os

    import torch

    from eagle3kit.checkpoint.io.safetensors_write import write_json, write_safetensors

    old = os.umask(0o022)
    try:
        write_json(tmp_path / "c.json", {"a": 1})
        write_safetensors(tmp_path / "w.safetensors", {"x": torch.zeros(2)})
    finally:
        os.umask(old)
    for name in ("c.json", "w.safetensors"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644, name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "w.safetensors"]


def test_large_d2t_is_checked_not_skipped(tmp_path):
    """A 34 MB d2t (over the old 4M-entry threshold) is still read and checked: inspect fails."""
    import numpy as np

    d = write_sparse_drafter(tmp_path / "big", tiny_spec(), d2t=np.zeros(4_200_000, dtype=np.int64))
    r = run_cli("inspect", d, "--json")
    assert r.code == 1
    problems = json.loads(r.out)["vocab_map"]["problems"]
    assert (
        problems[0]["code"] == "d2t-range" and "expected target ids < 512" in problems[0]["message"]
    )
