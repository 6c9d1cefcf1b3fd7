"""A short measured step for `train --dry-run`: the run's drafter (its shape, random weights)
trains for a few steps on synthetic features of the run's shapes on the run's device (its
method's loss, backward, clipping, AdamW: the loop's own code), and the target, when it is
small enough to load, runs its forward on a synthetic batch; the held-out evaluation of one
batch is timed too. Medians of `repeats` after one warm-up. Nothing is written."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from eagle3kit.core import registry
from eagle3kit.model.protocols import Embedding, JsonConfig
from eagle3kit.train import distributed as dist_
from eagle3kit.train.dry_run_inputs import Inputs
from eagle3kit.train.setup import FeaturesTarget


def _sync(device: str) -> None:
    dev = torch.device(device)
    if dev.type != "cpu" and torch.accelerator.is_available():
        torch.accelerator.synchronize(dev)


def _timed(fn: Any, repeats: int, device: str) -> float:
    """Median seconds of `fn()` over `repeats` calls, after one warm-up call."""
    fn()
    out = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def drafter(inp: Inputs, cfg: Any, device: str) -> Any:
    """The run's drafter: its spec with random weights (seeded), the method's own module."""
    from eagle3kit.model.drafter import Eagle3Drafter

    spec = inp.spec
    torch.manual_seed(cfg.seed)
    m = Eagle3Drafter(spec, device="cpu", dtype=torch.float32)
    m.set_embedding(torch.randn(spec.vocab_size, spec.hidden_size) * 0.02)
    with torch.no_grad():
        m.d2t.zero_()
        m.t2d.zero_()
        m.t2d[: spec.draft_vocab_size] = True  # draft id j is target id j
    target = FeaturesTarget(
        config=JsonConfig(dict(inp.target_config)),
        embed_tokens=Embedding(m.embed_tokens.weight),
        vocab_size=spec.vocab_size,
        num_layers=int(inp.target_config.get("num_hidden_layers") or 0),
        aux_layers=tuple(spec.aux_layers),
    )
    m = registry.part(inp.method, "train").prepare(m, cfg, target, None)
    return m.to(device)


def features(inp: Inputs, rows: int, t: int, device: str, gen: torch.Generator) -> Any:
    """Synthetic features [rows, t]: token ids, loss mask at DATA's loss fraction, aux
    states, the teacher's K log-probs over draft ids (its argmax inside the draft vocab)."""
    from eagle3kit.data.features import Features

    spec, k = inp.spec, inp.teacher_cols
    vd = spec.draft_vocab_size
    logp = torch.randn(rows, t, k, generator=gen).log_softmax(-1)
    full = k >= vd
    ids = (
        torch.arange(vd).expand(rows, t, vd)
        if full
        else torch.randint(0, vd, (rows, t, k), generator=gen)
    )
    return Features(
        input_ids=torch.randint(0, spec.vocab_size, (rows, t), generator=gen),
        attention_mask=torch.ones(rows, t, dtype=torch.bool),
        loss_mask=torch.rand(rows, t, generator=gen) < inp.loss_fraction,
        aux=torch.randn(rows, t, spec.fc_in_features, generator=gen),
        target_argmax=torch.randint(0, vd, (rows, t), generator=gen),
        teacher_ids=ids,
        teacher_logp=logp,
    ).to(device)


def measure(
    inp: Inputs, cfg: Any, shapes: dict[str, int], *, repeats: int = 3, with_target: bool = True
) -> dict[str, Any]:
    """{"drafter_step_s", "target_forward_s" (None: not run), "eval_batch_s", "repeats"}:
    `shapes` holds rows and length of a training batch and of an evaluation batch."""
    from eagle3kit.train.acceptance import acceptance

    device = cfg.device
    gen = torch.Generator().manual_seed(cfg.seed)
    m = drafter(inp, cfg, device)
    feats = features(inp, shapes["rows"], shapes["length"], device, gen)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    part = registry.part(inp.method, "train")
    d = dist_.Dist(0, 1, device)  # one rank's step (the plan divides by the ranks)
    step = [0]

    def train_step() -> None:
        loss = part.loss(m, feats, cfg.ttt_steps, cfg, d, step[0])
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step[0] += 1

    out = {"drafter_step_s": _timed(train_step, repeats, device), "repeats": repeats}
    held = features(inp, shapes["eval_rows"], shapes["eval_length"], device, gen)
    out["eval_batch_s"] = _timed(
        lambda: acceptance(m, [held], cfg.ttt_steps), max(1, repeats - 1), device
    )
    out["target_forward_s"] = None
    if with_target and inp.source == "online":
        out["target_forward_s"] = _target_forward(inp, cfg, shapes, repeats, gen)
    return out


def _target_forward(inp: Inputs, cfg: Any, shapes: dict[str, int], repeats: int, gen) -> float:
    """The target's forward with the feature computation on a synthetic batch (online)."""
    from eagle3kit.data.features import compute_features
    from eagle3kit.model.target import TargetModel

    tm = TargetModel.from_pretrained(
        inp.target,
        device=cfg.device,
        dtype=cfg.target_dtype,
        aux_layers=tuple(inp.spec.aux_layers),
        trust_remote_code=cfg.trust_remote_code,
    )
    rows, t, v = shapes["rows"], shapes["length"], inp.spec.vocab_size
    ids = torch.randint(0, v, (rows, t), generator=gen)
    attn = torch.ones(rows, t, dtype=torch.bool)
    d2t = torch.zeros(inp.spec.draft_vocab_size, dtype=torch.long)
    topk = cfg.topk if inp.teacher_cols < inp.spec.draft_vocab_size else None
    try:
        with torch.no_grad():
            return _timed(
                lambda: compute_features(tm, ids, attn, attn, d2t, topk), repeats, cfg.device
            )
    finally:
        tm.close()
