"""Warm start begins where its checkpoint is: same held-out loss and accuracy at step 0 (no
re-initialisation, no re-mapped lm_head rows); --rebuild-vocab moves rows with their ids; L2-SP."""

from __future__ import annotations

import json

import pytest
import torch
from ckpt_helpers import tiny_spec
from test_train_helpers import SMALL_RUN, tiny_data, tiny_target, train_args


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    """A drafter trained a few steps on the tiny target (its own held-out metrics recorded)."""
    from conftest import run_cli

    out = tmp_path_factory.mktemp("warm") / "start"
    r = run_cli(
        *train_args(
            out,
            tiny_data(),
            tiny_target(),
            "--steps",
            "8",
            "--lr",
            "3e-3",
            "--eval-every",
            "8",
            "--json",
        )
    )
    assert r.code == 0, r.err
    return out, json.loads(r.out)


def _rows(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_warm_start_step0_equals_the_starting_drafter(start, tmp_path, cli):
    src, _ = start
    own = next(r for r in _rows(src) if r["step"] == 8)  # the start's own held-out metrics
    assert own["acc"][0] > 0  # a trained drafter, so a re-init would show
    data, target = tiny_data(), tiny_target()
    args = [
        "train",
        "--target",
        str(target),
        "--data",
        str(data),
        "-o",
        str(tmp_path / "warm"),
        "--init-from",
        str(src / "step-8"),
        *SMALL_RUN,
        "--steps",
        "2",
        "--l2sp",
        "0.01",
        "--json",
    ]
    r = cli(*args)
    assert r.code == 0, r.err
    step0 = _rows(tmp_path / "warm")[0]
    assert step0["step"] == 0
    assert step0["acc"] == own["acc"] and step0["cond_acc"] == own["cond_acc"]
    assert step0["loss"] == pytest.approx(own["loss"], rel=1e-6)
    summary = json.loads(r.out)
    assert summary["init_from"] == str(src / "step-8")
    # the vocabulary map is the checkpoint's, byte for byte
    from safetensors.torch import load_file

    a, b = (
        load_file(str(src / "step-8" / "model.safetensors")),
        load_file(str(tmp_path / "warm" / "step-2" / "model.safetensors")),
    )
    assert torch.equal(a["d2t"], b["d2t"]) and torch.equal(a["t2d"], b["t2d"])
    # asking for another vocab without --rebuild-vocab is refused
    r = cli(*args[:-1], "--draft-vocab-size", "64", "-o", str(tmp_path / "w2"))
    assert r.code == 2 and "--rebuild-vocab" in r.err


def test_rebuild_vocab_moves_rows_with_their_ids():
    from eagle3kit.model.drafter import Eagle3Drafter
    from eagle3kit.train.warmstart import rebuild_vocab

    spec = tiny_spec(
        vocab_size=64,
        draft_vocab_size=8,
        hidden_size=16,
        head_dim=8,
        num_attention_heads=2,
        num_key_value_heads=2,
        target_hidden_size=16,
        intermediate_size=32,
    )
    torch.manual_seed(0)
    m = Eagle3Drafter(spec)
    m.set_embedding(torch.randn(64, 16))
    old_ids = torch.tensor([1, 3, 5, 7, 9, 11, 13, 15])
    m.d2t.copy_(old_ids - torch.arange(8))
    m.t2d.zero_()
    m.t2d[old_ids] = True
    new_ids = torch.tensor([0, 3, 4, 9, 15, 20])  # 3, 9, 15 survive
    t2d = torch.zeros(64, dtype=torch.bool)
    t2d[new_ids] = True
    n = rebuild_vocab(m, new_ids - torch.arange(6), t2d)
    assert n.spec.draft_vocab_size == 6 and n.rows_kept == 3
    w_old, w_new = m.lm_head.weight, n.lm_head.weight
    for j, tid in enumerate(new_ids.tolist()):
        if tid in old_ids.tolist():
            assert torch.equal(w_new[j], w_old[old_ids.tolist().index(tid)])
        else:
            assert torch.allclose(w_new[j], w_old.mean(0))
    assert torch.equal(n.fc.weight, m.fc.weight)
    # the surviving tokens get the same logits as before
    ids, aux = torch.randint(0, 64, (1, 5)), torch.randn(1, 5, 48)
    lo, ln = m(ids, aux).logits, n(ids, aux).logits
    for j, tid in enumerate(new_ids.tolist()):
        if tid in old_ids.tolist():
            torch.testing.assert_close(ln[..., j], lo[..., old_ids.tolist().index(tid)])


def test_l2sp_gradient_is_weight_times_distance():
    from eagle3kit.train.warmstart import add_l2sp_grad, anchor_of

    lin = torch.nn.Linear(3, 2, bias=False)
    w0 = anchor_of(lin)
    with torch.no_grad():
        lin.weight.add_(1.5)
    lin.weight.grad = torch.zeros_like(lin.weight)
    add_l2sp_grad(lin, w0, 0.2)
    torch.testing.assert_close(lin.weight.grad, torch.full((2, 3), 0.3))


@pytest.mark.slow
def test_reference_target_reports_before_and_after(start, tmp_path, cli):
    """v1 drafter warm-started on v2: 'before' on the old target is the drafter's own score."""
    src, _ = start
    own = next(r for r in _rows(src) if r["step"] == 8)
    v1, v2 = tiny_target("dsv3-v1"), tiny_target("dsv3-v2")
    args = [
        "train",
        "--target",
        str(v2),
        "--reference-target",
        str(v1),
        "--data",
        str(tiny_data()),
        "-o",
        str(tmp_path / "ref"),
        "--init-from",
        str(src / "step-8"),
        *SMALL_RUN,
        "--steps",
        "2",
        "--json",
    ]
    r = cli(*args)
    assert r.code == 0, r.err
    ref = json.loads(r.out)["reference"]
    assert ref["before"]["old"] == pytest.approx(own["tau_every_position"])
    step0 = _rows(tmp_path / "ref")[0]
    assert ref["before"]["new"] == pytest.approx(step0["tau_every_position"])
    assert set(ref["after"]) == {"old", "new"}


@pytest.mark.slow  # seconds; the full suite runs it (fast subset under 3 min)
def test_a_drafter_checkpoint_is_its_own_vocab_for_capture_and_warm_start(start, tmp_path, cli):
    """The engine-capture story's warm start: a store captured over the drafter's draft vocab
    (`data capture --vocab DRAFTER`, the checkpoint directory itself) trains it; a store over
    the full vocab is refused in one line that says how to fix it, and --rebuild-vocab adopts
    the store's vocab instead."""
    from safetensors.torch import load_file

    from eagle3kit.core.vocab import load_vocab

    src, _ = start
    drafter = src / "step-8"
    own = load_file(str(drafter / "model.safetensors"))
    d2t, t2d = load_vocab(drafter)  # the directory: its weights file's d2t/t2d
    assert torch.equal(d2t, own["d2t"]) and torch.equal(t2d, own["t2d"]) and d2t.numel() == 96
    data, target = tiny_data(), tiny_target()
    cap = ("data", "capture", str(data), "--target", str(target), "--json")
    r = cli(*cap, "-o", str(tmp_path / "full"))
    assert r.code == 0, r.err
    r = cli(*cap, "--vocab", str(drafter), "-o", str(tmp_path / "own"))
    assert r.code == 0, r.err
    manifest = json.loads((tmp_path / "own" / "manifest.json").read_text())
    assert manifest["vocab"]["file"] == str((drafter / "model.safetensors").resolve())
    assert manifest["vocab"]["draft_vocab_size"] == 96

    def train(store: str, *extra: str):
        return cli(
            "train",
            "--target",
            str(target),
            "--features",
            str(tmp_path / store),
            "-o",
            str(tmp_path / f"run-{store}{len(extra)}"),
            "--init-from",
            str(drafter),
            *SMALL_RUN,
            "--steps",
            "1",
            "--json",
            *extra,
        )

    r = train("full")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert "another draft vocab (512 ids) than the drafter's (96 ids)" in r.err
    assert "data capture ... --vocab DRAFTER" in r.err and "--rebuild-vocab" in r.err
    r = train("own")
    assert r.code == 0, r.err
    r = train("full", "--rebuild-vocab")
    assert r.code == 0, r.err
