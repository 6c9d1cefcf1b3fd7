"""The one offline-acceptance aggregator (train.acceptance) and how training picks RUN/best."""

from __future__ import annotations

import json

import pytest
import torch
from test_train_helpers import tiny_data, tiny_target

from eagle3kit.train.acceptance import Acceptance, from_counts
from eagle3kit.train.ttt import Counts


def test_from_counts_names_each_value():
    c = Counts(2)
    c.hits[:] = torch.tensor([6.0, 3.0])
    c.counted[:] = torch.tensor([10.0, 10.0])
    c.chain[:] = torch.tensor([6.0, 3.0])
    c.chain_prev[:] = torch.tensor([10.0, 6.0])
    c.loss_sum[:] = torch.tensor([5.0, 8.0])
    c.loss_n[:] = torch.tensor([10.0, 10.0])
    c.walk_ge[:] = torch.tensor([4.0, 1.0])  # 8 cycles: 4 accepted >= 1, 1 accepted 2
    c.walk_n[:] = torch.tensor([8.0, 8.0])
    a = from_counts(c)
    assert a.tau_every_position == pytest.approx(1 + 0.6 + 0.6 * 0.5)  # cond_acc 0.6, 0.5
    assert a.tau_every_position_by_depth == pytest.approx([1.6, 1.9])
    assert a.tau_walk == pytest.approx(1 + 4 / 8 + 1 / 8)
    assert a.walk_acc == pytest.approx([0.5, 0.125])
    assert a.cycles == 8 and a.counted == [10, 10]
    assert a.loss == pytest.approx([0.5, 0.8])


def _acc(walk: float, every: float) -> Acceptance:
    return Acceptance(
        3, [0.5] * 3, [0.5] * 3, [1.0] * 3, [1] * 3, [0.1] * 3, 4, walk, every, [every] * 3
    )


def _scripted_run(tmp_path, monkeypatch, evals: list[Acceptance], **kw) -> dict:
    """A 4-step run on the tiny target whose evaluations (steps 0, 2, 4) return ``evals``."""
    from eagle3kit.train import loop
    from eagle3kit.train.loop import TrainConfig, train

    script = iter(evals)
    monkeypatch.setattr(loop, "acceptance", lambda *a, **k: next(script))
    cfg = TrainConfig(
        out=str(tmp_path / "run"),
        target=str(tiny_target()),
        data=str(tiny_data()),
        draft_vocab_size=96,
        ttt_steps=3,
        batch_size=4,
        max_len=64,
        heldout=0.125,
        eval_samples=6,
        eval_batch=6,
        steps=4,
        eval_every=2,
        **kw,
    )
    return train(cfg)


@pytest.mark.slow  # trains or decodes: a second or more (fast-subset budget)
def test_best_is_chosen_by_tau_walk(tmp_path, monkeypatch):
    """Evaluations whose walked and every-position values disagree: best follows tau_walk."""
    s = _scripted_run(tmp_path, monkeypatch, [_acc(1.5, 2.0), _acc(1.8, 1.9), _acc(1.2, 2.5)])
    assert s["best_step"] == 2
    assert s["tau_walk"] == 1.8 and s["tau_every_position"] == 1.9
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["tau_walk"] for r in rows] == [1.5, 1.8, 1.2]
    assert [r["tau_every_position"] for r in rows] == [2.0, 1.9, 2.5]
    st = json.loads((tmp_path / "run" / "state" / "state.json").read_text())
    assert st["best_step"] == 2 and st["best_tau_walk"] == 1.8


@pytest.mark.parametrize("includes_start, best", [(False, 4), (True, 0)])
@pytest.mark.slow
def test_the_starting_weights_are_a_candidate_only_when_asked(
    tmp_path, monkeypatch, includes_start, best
):
    """A warm start whose starting point scores highest: by default RUN/best is the best
    trained step (step 4 here), so a run never reports its starting point as its result;
    --best-includes-start lets step 0 win."""
    evals = [_acc(2.5, 2.6), _acc(1.8, 1.9), _acc(2.0, 2.1)]
    s = _scripted_run(tmp_path, monkeypatch, evals, best_includes_start=includes_start)
    assert s["best_step"] == best
    assert s["tau_walk"] == {0: 2.5, 4: 2.0}[best]
    st = json.loads((tmp_path / "run" / "state" / "state.json").read_text())
    assert st["best_step"] == best  # what --resume continues from
