"""A short measured step for `train --dry-run`: the run's drafter (its shape, random weights)
trains for a few steps on synthetic features of the run's shapes on the run's device (its
method's loss, backward, clipping, AdamW: the loop's own code), and the target, when it is
small enough to load, runs its forward on a synthetic batch; the held-out evaluation of one
batch is timed too. Medians of `repeats` after one warm-up, in wall and in CPU seconds
(process time: the work, whatever else the host runs). Nothing is written.

A step's cost grows faster than its padded length T (the unroll's attention sees k*T keys),
so the step is measured at two lengths, T1 (a short batch of the run) and T2 (its longest),
cost(T) = a*T + c*T^2 is solved from the two, and the run's step is the mean of cost(T) over
its own batches' lengths (with one length, or a fit that bends down, cost scales with T)."""

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


def _timed(fn: Any, repeats: int, device: str) -> tuple[float, float]:
    """Median (wall, CPU) seconds of `fn()` over `repeats` calls, after one warm-up call."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        _sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        _sync(device)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def over_lengths(points: dict[int, float], lengths: list[int]) -> float:
    """The mean over `lengths` of cost(T) = a*T + c*T^2 through the measured `points`
    {T: seconds} (module docstring)."""
    (t1, y1), *rest = sorted(points.items())
    a, c = y1 / t1, 0.0
    if rest:
        t2, y2 = rest[-1]
        c = (y2 / t2 - y1 / t1) / (t2 - t1)
        a = y1 / t1 - c * t1
        if c < 0 or a < 0:
            a, c = (y1 + y2) / (t1 + t2), 0.0
    return statistics.fmean(a * t + c * t * t for t in lengths)


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
    inp: Inputs, cfg: Any, shapes: dict[str, Any], *, repeats: int = 3, with_target: bool = True
) -> dict[str, Any]:
    """{"drafter_step_s", "drafter_step_cpu_s", "target_forward_s", "target_forward_cpu_s"
    (None: not run), "eval_batch_s", "eval_batch_cpu_s", "at_lengths", "repeats"}: `shapes`
    holds the rows and the run's batch lengths ("lengths"), and an evaluation batch's."""
    from eagle3kit.train.acceptance import acceptance

    device, lengths = cfg.device, shapes["lengths"]
    at = sorted({min(lengths), max(lengths)})
    gen = torch.Generator().manual_seed(cfg.seed)
    m = drafter(inp, cfg, device)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    part = registry.part(inp.method, "train")
    d = dist_.Dist(0, 1, device)  # one rank's step (the plan divides by the ranks)

    def train_step(feats: Any) -> None:
        loss = part.loss(m, feats, cfg.ttt_steps, cfg, d, 0)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)

    steps = {}
    for t in at:
        feats = features(inp, shapes["rows"], t, device, gen)
        steps[t] = _timed(lambda f=feats: train_step(f), repeats, device)
        del feats
    out = _fit("drafter_step", steps, lengths)
    held = features(inp, shapes["eval_rows"], shapes["eval_length"], device, gen)
    ev = _timed(lambda: acceptance(m, [held], cfg.ttt_steps), max(1, repeats - 1), device)
    out.update(eval_batch_s=ev[0], eval_batch_cpu_s=ev[1], at_lengths=at, repeats=repeats)
    out.update(target_forward_s=None, target_forward_cpu_s=None)
    if with_target and inp.source == "online":
        fwd = _target_forward(inp, cfg, shapes["rows"], at, repeats, gen)
        out.update(_fit("target_forward", fwd, lengths))
    return out


def _fit(name: str, points: dict[int, tuple[float, float]], lengths: list[int]) -> dict:
    """{name_s, name_cpu_s}: wall and CPU seconds over the run's lengths (`over_lengths`)."""
    wall = over_lengths({t: w for t, (w, _) in points.items()}, lengths)
    cpu = over_lengths({t: c for t, (_, c) in points.items()}, lengths)
    return {f"{name}_s": wall, f"{name}_cpu_s": cpu}


def _target_forward(inp: Inputs, cfg: Any, rows: int, at: list[int], repeats: int, gen) -> dict:
    """{T: (wall, CPU) seconds} of the target's forward with the feature computation on a
    synthetic batch of `rows` x T (online)."""
    from eagle3kit.data.features import compute_features
    from eagle3kit.model.target import TargetModel

    tm = TargetModel.from_pretrained(
        inp.target,
        device=cfg.device,
        dtype=cfg.target_dtype,
        aux_layers=tuple(inp.spec.aux_layers),
        trust_remote_code=cfg.trust_remote_code,
    )
    v = inp.spec.vocab_size
    d2t = torch.zeros(inp.spec.draft_vocab_size, dtype=torch.long)
    topk = cfg.topk if inp.teacher_cols < inp.spec.draft_vocab_size else None
    out = {}
    try:
        with torch.no_grad():
            for t in at:
                ids = torch.randint(0, v, (rows, t), generator=gen)
                attn = torch.ones(rows, t, dtype=torch.bool)
                out[t] = _timed(
                    lambda i=ids, a=attn: compute_features(tm, i, a, a, d2t, topk),
                    repeats,
                    cfg.device,
                )
        return out
    finally:
        tm.close()
