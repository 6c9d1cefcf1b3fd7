"""The training loop: TTT loss, AdamW, warm-up + cosine LR, held-out selection by accept length.

One optimizer step (the loop reads top to bottom in `train`):

    batch  = samples order[step*B : (step+1)*B]          (order: a seeded permutation per epoch)
    feats  = source.batch(batch[rank::world])             (online target, or the feature store)
    loss   = sum_i 0.8^i * sum_{t in C_i} CE_i(t) / |C_i|_global  (ttt.ttt_loss)
    grad  += l2sp * (w - w_0)                             (warm start, optional)
    clip to grad_clip; AdamW at lr(step)

    lr(s) = lr * (s+1)/warmup                              for s < warmup
          = lr * (r + (1-r) * (1 + cos(pi * p)) / 2),      p = (s-warmup)/(N-warmup), r = min_lr_ratio

Every `eval_every` steps (and at step 0 and N) the held-out split is scored with
`ttt.ttt_counts`; the checkpoint with the highest simulated accept length (not the lowest
loss) is kept in RUN/best. Everything a step depends on (weights, AdamW moments, step, data
position, RNG) is in RUN/state, so `--resume` after kill -9 gives the same final weights.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.progress import Progress, emit
from eagle3kit.train import distributed as dist_
from eagle3kit.train import outputs, setup, state
from eagle3kit.train.acceptance import acceptance, metrics_row
from eagle3kit.train.ttt import loss_positions, ttt_loss
from eagle3kit.train.warmstart import add_l2sp_grad, anchor_of


@dataclass
class TrainConfig:
    """Every setting of a run (saved in RUN/state; `--resume` reuses them)."""

    out: str
    target: str | None = None
    data: str | None = None
    features: str | None = None
    init_from: str | None = None
    attention: str = "mha"
    vocab: str | None = None
    draft_vocab_size: int | None = None
    rebuild_vocab: bool = False
    l2sp: float = 0.0
    reference_target: str | None = None
    ttt_steps: int = 7
    steps: int | None = None
    epochs: float | None = None
    batch_size: int = 8
    max_len: int = 512
    max_samples: int | None = None  # train on the first n training samples only
    lr: float = 1e-3
    warmup: int | None = None  # default: 5% of the steps
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    heldout: float = 0.05
    eval_every: int | None = None  # default: steps // 10
    eval_samples: int = 64
    eval_batch: int = 8
    save_every: int | None = None
    seed: int = 0
    device: str = "cpu"
    target_dtype: str = "float32"
    topk: int | None = None
    trust_remote_code: bool = False
    time_limit: float | None = (
        None  # seconds of training: stop (evaluate, save) after the step that passes it
    )

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to lr * min_lr_ratio (module docstring)."""
    warm = cfg.warmup if cfg.warmup is not None else max(1, total // 20)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    p = (step - warm) / max(1, total - warm)
    r = cfg.min_lr_ratio
    return cfg.lr * (r + (1 - r) * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def batch_indices(step: int, train_idx: list[int], batch: int, seed: int) -> list[int]:
    """The global batch of `step`: positions step*B .. step*B+B-1 of the epoch-wise shuffled order."""
    n = len(train_idx)
    out = []
    for pos in range(step * batch, (step + 1) * batch):
        epoch, j = divmod(pos, n)
        g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        perm = torch.randperm(n, generator=g)  # same on every rank
        out.append(train_idx[int(perm[j])])
    return out


def _peak_memory_mb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _check_out(run: Path, resume: bool) -> None:
    has_state = (run / "state" / "state.json").is_file()
    if resume and not has_state:
        raise bad(str(run), "--resume: expected a run directory with state/state.json, found none")
    if not resume and run.exists() and any(run.iterdir()):
        raise bad(
            str(run), "already exists and is not empty; use --resume to continue it, or another -o"
        )


def total_steps(cfg: TrainConfig, n_train: int) -> int:
    if cfg.steps is not None:
        if cfg.steps < 1:
            raise Eagle3Error(f"--steps: expected a positive int, found {cfg.steps}")
        return cfg.steps
    epochs = cfg.epochs if cfg.epochs is not None else 1.0
    return max(1, math.ceil(epochs * n_train / cfg.batch_size))


def train(
    cfg: TrainConfig, *, resume: bool = False, progress: Progress | None = None
) -> dict[str, Any]:
    """Run (or continue) a training run into cfg.out; returns the summary (RUN/summary.json)."""
    run = Path(cfg.out)
    _check_out(run, resume)
    saved = None
    if resume:
        saved = state.load_state(run / "state")
        out, device = cfg.out, cfg.device
        cfg = TrainConfig.from_json(saved["meta"]["config"])
        cfg.out, cfg.device = out, device
    d = dist_.setup(cfg.device)
    try:
        return _run(cfg, d, saved, progress)
    finally:
        dist_.teardown(d)


def _run(
    cfg: TrainConfig, d: dist_.Dist, saved: dict | None, progress: Progress | None
) -> dict[str, Any]:
    run = Path(cfg.out)
    ctx = setup.prepare(cfg, d, progress)
    m, src, k = ctx.drafter, ctx.source, cfg.ttt_steps
    n_steps = total_steps(cfg, len(ctx.train_idx))
    eval_every = cfg.eval_every or max(1, n_steps // 10)
    anchor = anchor_of(m) if cfg.l2sp > 0 else None
    m = dist_.shard(m, d)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    meta = {
        "step": 0,
        "best_step": None,
        "best_tau_walk": -1.0,
        "best_sim_accept_len": -1.0,
        "init": ctx.init_info,
    }
    metrics_path = run / "metrics.jsonl"
    if saved is not None:
        dist_.load_model_state(m, saved["model"])
        dist_.load_optim_state(m, opt, saved["optim"])
        if anchor is not None and saved["anchor"] is not None:
            anchor = {n: dist_.like(saved["anchor"][n], a) for n, a in anchor.items()}
        torch.set_rng_state(saved["rng"]["torch_cpu"])
        meta.update(
            {x: saved["meta"][x] for x in ("step", "best_step", "best_sim_accept_len", "init")}
        )
        meta["best_tau_walk"] = saved["meta"].get("best_tau_walk", -1.0)
        if d.main:
            outputs.write_metrics(metrics_path, outputs.read_metrics(metrics_path, meta["step"]))
    else:
        run.mkdir(parents=True, exist_ok=True)
        met = acceptance(m, ctx.eval_batches, k)
        _after_eval(run, cfg, m, opt, anchor, meta, 0, met, d, ctx, step_dir=False)
    m.train()
    tokens, busy, t_start = 0, 0.0, time.perf_counter()
    for step in range(meta["step"], n_steps):
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, n_steps, cfg)
        glob = batch_indices(step, ctx.train_idx, cfg.batch_size, cfg.seed)
        feats = src.batch(glob[d.rank :: d.world]).to(d.device)
        norm = dist_.all_sum(loss_positions(m.t2d, feats, k), d)
        loss, _ = ttt_loss(m, feats, k, norm=norm.clamp(min=1).to(d.device), counts=False)
        (loss * d.world).backward()
        if anchor is not None:
            add_l2sp_grad(m, anchor, cfg.l2sp)
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        tokens += int(dist_.all_sum(feats.attention_mask.sum().cpu().double(), d))
        busy += time.perf_counter() - t0
        done = step + 1
        emit(
            progress,
            "train",
            done,
            n_steps,
            "steps",
            loss=float(dist_.all_sum(loss.detach().double().cpu(), d)),
        )
        last = done == n_steps or _out_of_time(cfg, t_start, d)
        step_dir = bool(cfg.save_every and done % cfg.save_every == 0) or last
        if done % eval_every == 0 or last:  # evaluates, then saves the state (and RUN/step-N)
            met = acceptance(m, ctx.eval_batches, k)
            _after_eval(run, cfg, m, opt, anchor, meta, done, met, d, ctx, step_dir)
        elif step_dir:
            _save_point(run, cfg, m, opt, anchor, meta, done, d, ctx, step_dir=True)
        if last:
            break
    return _finish(run, cfg, meta, n_steps, tokens, busy, d, ctx)


def _out_of_time(cfg: TrainConfig, t_start: float, d: dist_.Dist) -> bool:
    """--time-limit passed (summed over ranks, so every rank stops at the same step)."""
    if cfg.time_limit is None:
        return False
    over = float(time.perf_counter() - t_start > cfg.time_limit)
    return bool(dist_.all_sum(torch.tensor([over], dtype=torch.float64), d) > 0)


def _after_eval(run, cfg, m, opt, anchor, meta, step, met, d, ctx, step_dir: bool) -> None:
    """Log one evaluation; keep RUN/best by simulated accept length; save the state."""
    row = metrics_row(step, met)
    tensors = dist_.model_state(m)  # collective
    if met.tau_walk > meta["best_tau_walk"]:
        meta["best_step"], meta["best_tau_walk"] = step, met.tau_walk
        meta["best_sim_accept_len"] = met.tau_every_position
        if d.main:
            outputs.save_servable(run / "best", ctx.spec, tensors, cfg.target)
    if d.main:
        outputs.append_metrics(run / "metrics.jsonl", row)
        outputs.plot_curves(
            run / "curves.png", outputs.read_metrics(run / "metrics.jsonl"), cfg.ttt_steps
        )
    _save_point(run, cfg, m, opt, anchor, meta, step, d, ctx, step_dir=step_dir, tensors=tensors)


def _save_point(
    run, cfg, m, opt, anchor, meta, step, d, ctx, *, step_dir: bool, tensors=None
) -> None:
    tensors = tensors if tensors is not None else dist_.model_state(m)
    optim = dist_.optim_state(m, opt)  # collective
    anchor_full = (
        {n: dist_.full(a).cpu() for n, a in anchor.items()} if anchor is not None else None
    )
    if not d.main:
        return
    if step_dir:
        outputs.save_servable(run / f"step-{step}", ctx.spec, tensors, cfg.target)
    meta["step"] = step
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    state.save_state(
        run / "state",
        model=tensors,
        optim=optim,
        anchor=anchor_full,
        meta={
            **meta,
            "data_position": step * cfg.batch_size,
            "param_groups": groups,
            "config": asdict(cfg),
        },
    )


def _finish(run, cfg, meta, n_steps, tokens, busy, d, ctx) -> dict[str, Any]:
    summary = {
        "steps": meta["step"],
        "planned_steps": n_steps,
        "best_step": meta["best_step"],
        "sim_accept_len": meta["best_sim_accept_len"],
        "tau_walk": meta["best_tau_walk"],
        "tau_every_position": meta["best_sim_accept_len"],
        "tokens_per_s": tokens / busy if busy > 0 else None,
        "peak_memory_mb": _peak_memory_mb(d.device),
        "init_from": cfg.init_from,
        "attention": ctx.spec.attention if hasattr(ctx.spec, "attention") else "mha",
        "source": ctx.source.kind,
        "train_samples": len(ctx.train_idx),
        "heldout_samples": ctx.heldout_n,
        "draft_vocab_size": ctx.spec.draft_vocab_size,
        "world_size": d.world,
        "init": meta["init"],
    }
    rows = outputs.read_metrics(run / "metrics.jsonl")
    best = next((r for r in rows if r["step"] == meta["best_step"]), None)
    if best is not None:
        summary["sim_accept_len_by_depth"] = best.get("sim_accept_len_by_depth")
        summary["best_acc"] = best["acc"]
    if ctx.reference is not None:
        summary["reference"] = setup.reference_after(ctx, run / "best")
    if d.main:
        from eagle3kit.core.atomic import atomic_write_json

        atomic_write_json(run / "summary.json", summary)
    return json.loads(json.dumps(summary))
