"""`train --method dflash` (methods/dflash/train/step.py): the block mask and position weights by
hand, the
one-pass training logits equal to the decoding pass, acceptance counting, and the CLI run:
z-lab checkpoint out, warm start, exact resume."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from test_train_helpers import dflash_args, tiny_target

from eagle3kit.methods.dflash.model import DFlashDrafter
from eagle3kit.methods.dflash.train.step import (
    acceptance,
    block_logits,
    block_mask,
    dpace_weights,
    make_blocks,
    position_weights,
)


def test_block_mask_by_hand():
    """Two blocks of 2 at anchors 1 and 3 over 4 context positions (the last one padding):
    block j sees context t < a_j that is real, and its own slots."""
    m = block_mask(torch.tensor([[1, 3]]), torch.tensor([[True, True, True, False]]), 2)
    want = torch.tensor(
        [
            [1, 0, 0, 0, 1, 1, 0, 0],
            [1, 0, 0, 0, 1, 1, 0, 0],
            [1, 1, 1, 0, 0, 0, 1, 1],
            [1, 1, 1, 0, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(m[0, 0], want)


def test_position_weights_by_hand():
    w = position_weights(4, 2.0)
    assert w.tolist() == pytest.approx([0.0, 1.0, math.exp(-0.5), math.exp(-1.0)])


def test_dpace_weights_by_hand():
    """B=4, slot 0 never counts, slot 3 outside the loss mask; CE ln 2 at slots 1, 2 (q=1/2),
    α=1/2: q̃ = 3/4, prefix products 3/4, 9/16, suffix sums 21/16, 9/16."""
    ce = torch.tensor([[[9.0, math.log(2), math.log(2), 9.0]]])
    valid = torch.tensor([[[False, True, True, False]]])
    w = dpace_weights(ce, valid, 0.5)
    assert w[0, 0].tolist() == pytest.approx([0.0, 21 / 16, 9 / 16, 0.0])


def test_acceptance_by_hand():
    a = acceptance(torch.tensor([0, 1, 3, 3]), 3)
    assert a["per_position_acceptance"] == [0.75, 0.5, 0.5]
    assert a["tau_every_position"] == pytest.approx(2.75)
    assert a["conditional_acceptance"] == pytest.approx([0.75, 2 / 3, 1.0])


@pytest.fixture(scope="module")
def target():
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    return TargetModel.from_pretrained(tiny_target("llama-v1"), aux_layers=[2, 4])


def test_training_pass_equals_the_decoding_pass(target):
    """Each block of the one-pass training forward (block mask) gives the logits that the
    decoding call gives for that anchor (context t < a, no mask)."""
    torch.manual_seed(0)
    d = DFlashDrafter.for_target(target, num_hidden_layers=2, block_size=4, target_layer_ids=(1, 3))
    ids = torch.tensor([target.tokenizer("def f(x):\n    return x + 1\n")["input_ids"]])
    out = target.forward(ids)
    t = ids.shape[1]
    feats = SimpleNamespace(
        input_ids=ids,
        attention_mask=torch.ones_like(ids, dtype=torch.bool),
        loss_mask=torch.ones_like(ids, dtype=torch.bool),
        aux=out.aux,
    )
    blocks = make_blocks(feats, 3, 4, d.spec.mask_token_id, torch.Generator().manual_seed(1))
    got = block_logits(d, feats, blocks)[0]  # [N, B, V]
    for j, a in enumerate(blocks.anchors[0].tolist()):
        assert a < t - 4
        block = torch.tensor([[int(ids[0, a])] + [d.spec.mask_token_id] * 3])
        want = d.logits(d(block, out.aux[:, :a], torch.arange(a + 4)[None]))[0]
        torch.testing.assert_close(got[j], want, rtol=1e-4, atol=1e-4)


def _train(cli, out, *extra):
    args = dflash_args(out, 2, "--json", *extra)
    r = cli(*args)
    assert r.code == 0, r.err
    return json.loads(r.out)


@pytest.mark.slow  # ~6 s: four short CLI runs
def test_cli_run_resume_and_warm_start(cli, tmp_path):
    """4 steps straight vs 1 step (time limit 0) then --resume: the same weights; RUN/best
    is a z-lab checkpoint that decoding loads; a warm start from it keeps its weights."""
    a = _train(cli, tmp_path / "a", "--steps", "4", "--eval-every", "2")
    assert a["method"] == "dflash" and a["steps"] == 4
    assert len(a["per_position_acceptance"]) == 3
    cfg = json.loads((tmp_path / "a" / "best" / "config.json").read_text())
    assert cfg["dflash_config"]["target_layer_ids"] == [4] and cfg["block_size"] == 4
    b = _train(cli, tmp_path / "b", "--steps", "4", "--eval-every", "2", "--time-limit", "0")
    assert b["steps"] == 1
    b = _train(cli, tmp_path / "b", "--resume")
    assert b["steps"] == 4
    from safetensors.torch import load_file

    sa = load_file(tmp_path / "a" / "state" / "model.safetensors")
    sb = load_file(tmp_path / "b" / "state" / "model.safetensors")
    for n in sa:
        torch.testing.assert_close(sa[n], sb[n], rtol=0, atol=0)
    c = _train(
        cli,
        tmp_path / "c",
        "--steps",
        "1",
        "--init-from",
        str(tmp_path / "a" / "best"),
        "--dflash-loss",
        "ce",
        "--position-weights",
        "dpace",
    )
    assert c["best_step"] in (0, 1)
    r = cli(*["train", "--method", "dflash", "--target", "x", "-o", str(tmp_path / "a")])
    assert r.code != 0
    r = cli(*["train", "--method", "dflash", "--position-weights", "dpace", "-o", str(tmp_path)])
    assert r.code == 2 and "dpace with --dflash-loss ce" in r.err
