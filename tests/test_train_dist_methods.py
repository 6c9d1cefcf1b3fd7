"""torchrun --nproc-per-node 2 (FSDP2 over gloo) for P-EAGLE and DFlash training: the held-out
curve and the weights of one process on the same global batch (as tests/test_train_dist.py
checks EAGLE-3)."""

from __future__ import annotations

import json

import pytest
from test_train_helpers import dflash_args, tiny_data, tiny_target, torchrun, train_args


def _rows(run) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def _same_weights(a, b, tol: float = 1e-4) -> None:
    from safetensors.torch import load_file

    w1, w2 = load_file(str(a)), load_file(str(b))
    assert sorted(w1) == sorted(w2)
    for n in w1:
        assert (w1[n].float() - w2[n].float()).abs().max() < tol, n


@pytest.mark.slow  # ~20 s of CPU: a run here and one under torchrun with two ranks
def test_peagle_two_gloo_ranks_match_one_process(tmp_path, cli):
    """COD subsets drawn per sample (not per rank), mask_hidden replicated and its gradient
    averaged: loss curve to 1e-5, every weight (mask_hidden included) to 1e-4; L2-SP on."""
    data, target = tiny_data(), tiny_target()
    extra = (
        "--method",
        "peagle",
        "--ttt-steps",
        "3",
        "--steps",
        "4",
        "--eval-every",
        "4",
        "--lr",
        "3e-3",
        "--l2sp",
        "0.01",
    )
    one, two = tmp_path / "one", tmp_path / "two"
    r = cli(*train_args(one, data, target, *extra))
    assert r.code == 0, r.err
    p = torchrun(2, *train_args(two, data, target, *extra), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(p.stdout)
    assert s["world_size"] == 2 and s["method"] == "peagle"
    a, b = _rows(one), _rows(two)
    assert [x["step"] for x in a] == [x["step"] for x in b] == [0, 4]
    for r1, r2 in zip(a, b, strict=True):
        assert r2["loss"] == pytest.approx(r1["loss"], rel=1e-5, abs=1e-6)
    assert a[-1]["loss"] != a[0]["loss"]  # it trained
    _same_weights(one / "step-4" / "model.safetensors", two / "step-4" / "model.safetensors")
    cfg = json.loads((two / "step-4" / "config.json").read_text())
    assert cfg["speculators_model_type"] == "peagle"


def _dflash_args(out, *extra: str) -> list[str]:
    return dflash_args(out, 4, "--steps", "4", "--eval-every", "4", "--lr", "3e-3", *extra)


@pytest.mark.slow  # ~20 s of CPU: a run here and one under torchrun with two ranks
def test_dflash_two_gloo_ranks_match_one_process(tmp_path, cli):
    """Anchors drawn per sample, the loss divided by the global weight sum: the held-out
    curve (loss to 1e-5, tau exactly) and the final weights (1e-4) of one process."""
    one, two = tmp_path / "one", tmp_path / "two"
    r = cli(*_dflash_args(one))
    assert r.code == 0, r.err
    p = torchrun(2, *_dflash_args(two), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(p.stdout)
    assert s["world_size"] == 2 and s["method"] == "dflash" and s["steps"] == 4
    a, b = _rows(one), _rows(two)
    assert [x["step"] for x in a] == [x["step"] for x in b] == [0, 4]
    for r1, r2 in zip(a, b, strict=True):
        assert r2["loss"] == pytest.approx(r1["loss"], rel=1e-5, abs=1e-6)
        assert r2["tau_every_position"] == pytest.approx(r1["tau_every_position"], abs=1e-9)
    assert a[-1]["loss"] < a[0]["loss"]  # it trained
    _same_weights(one / "state" / "model.safetensors", two / "state" / "model.safetensors")
    cfg = json.loads((two / "best" / "config.json").read_text())
    assert cfg["dflash_config"]["target_layer_ids"]  # a z-lab checkpoint, written by rank 0
