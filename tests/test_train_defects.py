"""Training defects of issue 21, each pinned by a test that failed before its fix:
t2d missing from a warm-start checkpoint, the step count on rank > 0, a float64 loss, host
syncs on every step, and numeric options that gave a traceback."""

from __future__ import annotations

import json

import pytest
import torch
from test_train_helpers import tiny_data, tiny_target, train_args


@pytest.fixture(scope="module")
def best_dir(tmp_path_factory):
    """A servable drafter with a 96-token draft vocab (one short run's RUN/best)."""
    from conftest import run_cli

    out = tmp_path_factory.mktemp("defects") / "run"
    r = run_cli(*train_args(out, tiny_data(), tiny_target(), "--steps", "1", "--json"))
    assert r.code == 0, r.err
    return out / "best"


def _without_t2d(src, dst):
    from safetensors.torch import load_file, save_file

    dst.mkdir()
    (dst / "config.json").write_text((src / "config.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    assert "t2d" in tensors and int(tensors["t2d"].sum()) == tensors["d2t"].numel()
    del tensors["t2d"]
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


@pytest.mark.slow  # trains or decodes: a second or more (fast-subset budget)
def test_warm_start_without_t2d_derives_it(best_dir, tmp_path, cli):
    """(a) d2t but no t2d: t2d is derived from d2t, so the loss counts positions (was 0)."""
    from safetensors.torch import load_file

    from eagle3kit.train.warmstart import warm_drafter

    init = _without_t2d(best_dir, tmp_path / "no-t2d")
    m = warm_drafter(str(init))
    d2t = load_file(str(best_dir / "model.safetensors"))["d2t"]
    want = torch.zeros(m.spec.vocab_size, dtype=torch.bool)
    want[torch.arange(d2t.numel()) + d2t] = True  # target id of draft id j: j + d2t[j]
    assert torch.equal(m.t2d.cpu(), want)
    out = tmp_path / "warm"
    args = train_args(out, tiny_data(), tiny_target(), "--init-from", init, "--steps", "1")
    i = args.index("--draft-vocab-size")  # a warm start keeps the checkpoint's vocab
    r = cli(*(args[:i] + args[i + 2 :]))
    assert r.code == 0, r.err
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["loss"][0] > 0  # positions in the draft vocab are counted


def test_steps_reported_on_every_rank(tmp_path, monkeypatch):
    """(b) a rank other than 0 returns the steps it ran, not the last saved count (0)."""
    from eagle3kit.train import distributed as dist_
    from eagle3kit.train.loop import TrainConfig, train

    monkeypatch.setattr(dist_, "setup", lambda device: dist_.Dist(rank=1, world=1, device="cpu"))
    cfg = _cfg(tmp_path / "r1", steps=3, eval_every=3)
    assert train(cfg)["steps"] == 3
    assert isinstance(cfg, TrainConfig)


def _cfg(out, **kw):
    from eagle3kit.train.loop import TrainConfig

    base = dict(
        out=str(out),
        target=str(tiny_target()),
        data=str(tiny_data()),
        draft_vocab_size=96,
        ttt_steps=3,
        batch_size=4,
        max_len=64,
        heldout=0.125,
        eval_samples=6,
        eval_batch=6,
    )
    return TrainConfig(**{**base, **kw})


def test_loss_is_float32():
    """(c) the training loss (data-parallel normalisation included) stays in float32."""
    from test_train_ttt import _drafter, _feats

    from eagle3kit.train.ttt import loss_positions, ttt_loss

    m, k = _drafter(), 3
    f = _feats(m, b=2, t=12)
    norm = loss_positions(m.t2d, f, k)
    assert norm.dtype == torch.float32
    loss, _ = ttt_loss(m, f, k, norm=norm.clamp(min=1), counts=False)
    assert loss.dtype == torch.float32


class _SyncCounter:
    """Counts host reads of tensors (.item/.tolist/.cpu/float/int/bool) while `on`."""

    NAMES = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")

    def __init__(self, monkeypatch):
        self.on, self.calls = False, []
        for name in self.NAMES:
            orig = getattr(torch.Tensor, name)
            monkeypatch.setattr(torch.Tensor, name, self._wrap(name, orig))

    def _wrap(self, name, orig):
        def f(t, *a, **kw):
            if self.on:
                self.calls.append(name)
            return orig(t, *a, **kw)

        return f

    def off_during(self, monkeypatch, owner, name):
        """Do not count inside owner.name (host-side work by design: data, AdamW's step)."""
        orig = getattr(owner, name)

        def g(*a, **kw):
            was, self.on = self.on, False
            try:
                return orig(*a, **kw)
            finally:
                self.on = was

        monkeypatch.setattr(owner, name, g)


@pytest.mark.slow  # trains or decodes: a second or more (fast-subset budget)
def test_no_host_sync_on_steps_without_a_metric(tmp_path, monkeypatch):
    """(d) between evaluations a step never waits on the device: no .item()/.cpu()/...

    Counted from the progress event of step 1 to that of step n-1 (no evaluation or save
    falls between them); data loading (the online target) and AdamW.step (its step counters
    live on the host by design) are not counted."""
    from eagle3kit.train.loop import train
    from eagle3kit.train.sources import OnlineSource

    n = 5
    c = _SyncCounter(monkeypatch)
    c.off_during(monkeypatch, OnlineSource, "batch")
    c.off_during(monkeypatch, torch.optim.AdamW, "step")

    def progress(e):
        if e.stage == "train" and e.done == 1:
            c.on = True
        if e.stage == "train" and e.done == n - 1:
            c.on = False

    train(_cfg(tmp_path / "s", steps=n, eval_every=n), progress=progress)
    assert c.calls == [], f"host syncs in {n - 2} steps: {c.calls}"


BAD_OPTIONS = [
    ("--lr", "-1"),
    ("--lr", "0"),
    ("--steps", "0"),
    ("--batch-size", "0"),
    ("--ttt-steps", "0"),
    ("--warmup", "-1"),
    ("--epochs", "0"),
    ("--max-len", "1"),
    ("--eval-every", "0"),
    ("--eval-samples", "0"),
    ("--eval-batch", "0"),
    ("--save-every", "0"),
    ("--heldout", "1.5"),
    ("--heldout", "0"),
    ("--grad-clip", "-1"),
    ("--weight-decay", "-0.1"),
    ("--l2sp", "-1"),
    ("--time-limit", "-5"),
    ("--topk", "0"),
    ("--draft-vocab-size", "0"),
    ("--max-samples", "0"),
    ("--lr", "nan"),
]


@pytest.mark.parametrize("opt,value", BAD_OPTIONS)
def test_bad_numeric_option_is_one_line_exit_2(opt, value, tmp_path, cli):
    """(e) every numeric option out of range: one line naming it, exit 2, nothing written."""
    out = tmp_path / "run"
    args = train_args(out, tiny_data(), tiny_target(), "--steps", "2")
    if opt in args:  # replace the helper's own value
        i = args.index(opt)
        args[i + 1] = value
    else:
        args += [opt, value]
    r = cli(*args)
    assert r.code == 2, (r.code, r.err[-2000:])
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err, r.err
    assert opt in r.err
    assert not out.exists()
