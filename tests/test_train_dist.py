"""torchrun --nproc-per-node 2 (FSDP2 over gloo) gives one process's loss curve on the same global
batch."""

from __future__ import annotations

import json

import pytest
from test_train_helpers import tiny_data, tiny_target, torchrun, train_args


@pytest.mark.slow  # ~16 s: a training run here and one under torchrun with two ranks
def test_two_gloo_ranks_match_one_process(tmp_path, cli):
    data, target = tiny_data(), tiny_target()
    extra = ("--steps", "6", "--eval-every", "2", "--lr", "3e-3")
    one = tmp_path / "one"
    assert cli(*train_args(one, data, target, *extra)).code == 0
    two = tmp_path / "two"
    p = torchrun(2, *train_args(two, data, target, *extra), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout)
    assert summary["world_size"] == 2
    a = [json.loads(x) for x in (one / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (two / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in a] == [r["step"] for r in b] == [0, 2, 4, 6]
    for r1, r2 in zip(a, b, strict=True):
        assert r2["loss"] == pytest.approx(r1["loss"], rel=1e-5, abs=1e-6)
        assert r2["counted"] == r1["counted"]
    assert a[-1]["loss"][0] < a[0]["loss"][0]  # it trained
    from safetensors.torch import load_file

    w1 = load_file(str(one / "step-6" / "model.safetensors"))
    w2 = load_file(str(two / "step-6" / "model.safetensors"))
    for n in w1:
        assert (w1[n].float() - w2[n].float()).abs().max() < 1e-4, n
