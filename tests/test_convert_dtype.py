"""`convert --dtype`: a z-lab DFlash drafter (bfloat16, written by z-lab's own
`DFlashDraftModel.save_pretrained`, tests/fixtures/peers) to speculators' layout with a target
stored in float32 (the tiny zoo members): the borrowed embedding/lm_head are cast to the
drafter's dtype, said in a note; the drafter's own tensors keep their bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import run_cli
from safetensors import safe_open

ZLAB = Path(__file__).parent / "fixtures/peers/dflash-0.1.0/dflash-b4"


def _target() -> Path:
    from eagle3kit import zoo

    return zoo.get("llama-v1", size="tiny")


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), "pt") as fh:
            out |= {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118
    return out


def test_another_dtype_is_refused_without_dtype(tmp_path):
    args = ("convert", ZLAB, "--to", "speculators", "-o", tmp_path / "s")
    r = run_cli(*args, "--embed-from", _target())
    assert r.code == 2 and "found F32" in r.err and "--dtype auto" in r.err, r.err
    assert not (tmp_path / "s").exists()


def test_dtype_auto_casts_the_borrowed_tensors_only(tmp_path):
    t = _target()
    args = ("convert", ZLAB, "--to", "speculators", "-o", tmp_path / "s", "--embed-from", t)
    r = run_cli(*args, "--dtype", "auto", "--json")
    assert r.code == 0, r.err
    notes = json.loads(r.out)["notes"]
    want = "embed_tokens.weight cast from the target's F32 to the drafter's BF16"
    assert any(want in n for n in notes), notes
    src, out, tgt = _tensors(ZLAB), _tensors(tmp_path / "s"), _tensors(t)
    for name, x in src.items():  # the drafter's own: byte for byte
        same = torch.equal(out[name].view(torch.uint8), x.view(torch.uint8))
        assert out[name].dtype == x.dtype and same, name
    emb = tgt["model.embed_tokens.weight"]
    head = tgt.get("lm_head.weight", emb)
    assert out["embed_tokens.weight"].dtype == torch.bfloat16
    assert torch.equal(out["embed_tokens.weight"], emb.to(torch.bfloat16))  # torch's rounding
    assert torch.equal(out["lm_head.weight"], head.to(torch.bfloat16))
    doc = json.loads(run_cli("inspect", tmp_path / "s", "--json").out)
    assert (doc["method"], doc["format"], doc["missing"]) == ("dflash", "speculators", [])
    back = run_cli("convert", tmp_path / "s", "--to", "zlab", "-o", tmp_path / "z", "--json")
    assert back.code == 0, back.err  # the cast bytes are the recorded ones: dropped again
    again = _tensors(tmp_path / "z")
    assert sorted(again) == sorted(src)
    assert all(torch.equal(again[k].view(torch.uint8), src[k].view(torch.uint8)) for k in src)


@pytest.mark.parametrize("dtype", ["float32", "F16"])
def test_dtype_must_be_the_drafters(tmp_path, dtype):
    args = ("convert", ZLAB, "--to", "speculators", "-o", tmp_path / "s")
    r = run_cli(*args, "--embed-from", _target(), "--dtype", dtype)
    assert r.code == 2 and "--dtype" in r.err and "bfloat16" in r.err, r.err
    assert not (tmp_path / "s").exists()
