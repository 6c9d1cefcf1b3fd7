"""The training loop: TTT loss, AdamW, warm-up + cosine LR, held-out selection by accept length.

One optimizer step (the loop reads top to bottom in `train`):

    batch  = samples order[step*B : (step+1)*B]          (order: a seeded permutation per epoch)
    feats  = source.batch(batch[rank::world])             (online target, or the feature store)
    loss   = sum_i 0.8^i * sum_{t in C_i} CE_i(t) / |C_i|_global  (ttt.ttt_loss, float32;
                                                          --loss: that loss for CE)
    grad  += l2sp * (w - w_0)                             (warm start, optional)
    clip to grad_clip; AdamW at lr(step)                  (config.lr_at)

A step never waits on the device: the loss and the token count stay on it until a metric is
due. Every `eval_every` steps (and at step 0 and N) the held-out split (the validation
split: it chooses, so its figure for RUN/best reads high; report another set, `eval`) is scored
(`acceptance.acceptance`); the checkpoint with the highest walked accept length `tau_walk`
(not the lowest loss) is kept in RUN/best. Step 0, the starting weights, is scored for the
curve but is a candidate only with `best_includes_start` (else a warm start would report at
least its starting point). Everything a step depends on (weights, AdamW
moments, step, data position, RNG) is in RUN/state, so `--resume` after kill -9 gives the same
final weights. The helpers take the one `Run` that holds a run's state between steps.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from eagle3kit.core import registry
from eagle3kit.core.artifacts import stamp
from eagle3kit.core.atomic import atomic_write_json
from eagle3kit.core.errors import bad
from eagle3kit.core.progress import Progress, emit
from eagle3kit.core.retired import current_row
from eagle3kit.train import distributed as dist_
from eagle3kit.train import outputs, setup, state
from eagle3kit.train.acceptance import Acceptance, acceptance, metrics_row
from eagle3kit.train.config import TrainConfig, lr_at, total_steps
from eagle3kit.train.flags import spec_flags
from eagle3kit.train.warmstart import add_l2sp_grad, anchor_of

__all__ = [
    "Run",
    "TrainConfig",
    "batch_indices",
    "lr_at",
    "total_steps",
    "train",
]


@dataclass
class Run:
    """One training run between steps: what it trains and how far it got."""

    cfg: TrainConfig
    d: dist_.Dist
    ctx: setup.Context
    dir: Path
    model: torch.nn.Module
    opt: torch.optim.Optimizer
    params: list[torch.nn.Parameter]
    anchor: dict[str, torch.Tensor] | None
    n_steps: int
    eval_every: int
    progress: Progress | None = None
    step: int = 0  # optimizer steps done (kept on every rank)
    best_step: int | None = None
    best_tau_walk: float = -1.0
    best_tau_every_position: float = -1.0  # of the best step
    tokens: torch.Tensor | None = None  # real tokens trained on by this rank (on its device)
    busy: float = 0.0  # seconds of training steps
    busy_cpu: float = 0.0  # their CPU seconds (this process: the work, whatever the host runs)
    t_mark: float = 0.0  # start of the current stretch of steps
    c_mark: float = 0.0  # its process time
    t_start: float = 0.0

    @property
    def part(self) -> Any:
        """The trained method's train part (its loss and writer, core/registry.py)."""
        return registry.part(self.ctx.drafter.method, "train")


def train(
    cfg: TrainConfig, *, resume: bool = False, progress: Progress | None = None
) -> dict[str, Any]:
    """Run (or continue) a training run into cfg.out; returns the summary (RUN/summary.json)."""
    cfg.validate()
    _check_out(Path(cfg.out), resume)
    saved = state.load_state(Path(cfg.out) / "state") if resume else None
    if saved is not None:
        cfg = _saved_config(saved, cfg)
    d = dist_.setup(cfg.device)
    try:
        r = _start(cfg, d, saved, progress)
        for step in range(r.step, r.n_steps):
            for g in r.opt.param_groups:
                g["lr"] = lr_at(step, r.n_steps, cfg)
            glob = batch_indices(step, r.ctx.train_idx, cfg.batch_size, cfg.seed)
            feats = r.ctx.source.batch(glob[d.rank :: d.world]).to(d.device)
            loss = _train_step(r, feats)
            r.step = step + 1
            emit(progress, "train", r.step, r.n_steps, "steps")
            last = r.step == r.n_steps or _out_of_time(r)
            step_dir = bool(cfg.save_every and r.step % cfg.save_every == 0) or last
            if r.step % r.eval_every == 0 or last:  # a metric is due: the step's one host wait
                _evaluate(r, loss, step_dir)
            elif step_dir:
                _stop_clock(r)
                _save_point(r, step_dir=True)
                r.t_mark, r.c_mark = time.perf_counter(), time.process_time()
            if last:
                break
        result = _finish(r)
        dist_.barrier(d)
        return result
    finally:
        dist_.teardown(d)


def _train_step(r: Run, feats: Any) -> torch.Tensor:
    """Forward, backward and update on this rank's slice; the loss (detached, on the device)."""
    m, k = r.model, r.cfg.ttt_steps
    loss = r.part.loss(m, feats, k, r.cfg, r.d, r.step)  # the method's (methods/<package>/train)
    (loss * r.d.world).backward()
    dist_.sync_replicated(m, r.d)  # P-EAGLE's mask_hidden (FSDP2 averages the rest)
    if r.anchor is not None:
        add_l2sp_grad(m, r.anchor, r.cfg.l2sp)
    if r.cfg.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(r.params, r.cfg.grad_clip)
    r.opt.step()
    r.opt.zero_grad(set_to_none=True)
    r.tokens += feats.attention_mask.sum()
    return loss.detach()


@functools.lru_cache(maxsize=4)
def _epoch_order(seed: int, epoch: int, n: int) -> tuple[int, ...]:
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)  # host-side: the data order
    return tuple(torch.randperm(n, generator=g).tolist())  # the same on every rank


def batch_indices(step: int, train_idx: list[int], batch: int, seed: int) -> list[int]:
    """The global batch of `step`: positions step*B .. step*B+B-1 of the epoch-wise shuffled
    order."""
    n = len(train_idx)
    out = []
    for pos in range(step * batch, (step + 1) * batch):
        epoch, j = divmod(pos, n)
        out.append(train_idx[_epoch_order(seed, epoch, n)[j]])
    return out


def _start(cfg: TrainConfig, d: dist_.Dist, saved: dict | None, progress: Progress | None) -> Run:
    """Everything before the first step: drafter, data, optimizer; a restored state or the
    step-0 evaluation."""
    ctx = setup.prepare(cfg, d, progress)
    n_steps = total_steps(cfg, len(ctx.train_idx))
    m = dist_.shard(ctx.drafter, d)
    anchor = anchor_of(m) if cfg.l2sp > 0 else None  # sharded like the weights
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    every = cfg.eval_every or max(1, n_steps // 10)
    r = Run(cfg, d, ctx, Path(cfg.out), m, opt, params, anchor, n_steps, every, progress)
    r.tokens = torch.zeros((), dtype=torch.long, device=d.device)
    if saved is not None:
        _restore(r, saved)
    else:
        r.dir.mkdir(parents=True, exist_ok=True)
        _after_eval(r, acceptance(m, ctx.eval_batches, cfg.ttt_steps), step_dir=False)
    m.train()
    r.t_start = r.t_mark = time.perf_counter()
    r.c_mark = time.process_time()
    return r


def _saved_config(saved: dict, given: TrainConfig) -> TrainConfig:
    """--resume: the run's own settings, with this invocation's output dir and device."""
    cfg = TrainConfig.from_json(saved["meta"]["config"])
    cfg.out, cfg.device = given.out, given.device
    return cfg


def _restore(r: Run, saved: dict) -> None:
    """Weights, AdamW moments, anchor, RNG and progress from RUN/state."""
    dist_.load_model_state(r.model, saved["model"])
    dist_.load_optim_state(r.model, r.opt, saved["optim"])
    if r.anchor is not None and saved["anchor"] is not None:
        r.anchor = {n: dist_.like(saved["anchor"][n], a) for n, a in r.anchor.items()}
    torch.set_rng_state(saved["rng"]["torch_cpu"])
    meta = current_row(saved["meta"])
    r.step, r.best_step = meta["step"], meta["best_step"]
    r.best_tau_every_position = meta["best_tau_every_position"]
    r.ctx.init_info = meta["init"]
    path = r.dir / "metrics.jsonl"
    rows = outputs.read_metrics(path, r.step)
    if "best_tau_walk" in meta:
        r.best_tau_walk = meta["best_tau_walk"]
    else:  # a state saved before best was chosen by tau_walk: its best row's walked value
        best = [x for x in rows if x["step"] == r.best_step]
        r.best_tau_walk = best[0].get("tau_walk", -1.0) if best else -1.0
    if r.d.main:
        outputs.write_metrics(path, rows)


def _stop_clock(r: Run) -> None:
    """Add the stretch of steps since t_mark to `busy`, once the device has finished it."""
    dev = torch.device(r.d.device)
    if dev.type != "cpu" and torch.accelerator.is_available():
        torch.accelerator.synchronize(dev)
    r.busy += time.perf_counter() - r.t_mark
    r.busy_cpu += time.process_time() - r.c_mark


def _out_of_time(r: Run) -> bool:
    """--time-limit passed (summed over ranks, so every rank stops at the same step)."""
    if r.cfg.time_limit is None:
        return False
    over = float(time.perf_counter() - r.t_start > r.cfg.time_limit)
    if not r.d.enabled:
        return over > 0
    return bool(dist_.all_sum(torch.tensor([over], device=r.d.device), r.d) > 0)


def _evaluate(r: Run, loss: torch.Tensor, step_dir: bool) -> None:
    """Report the last step's loss, score the held-out split, keep the best, save."""
    _stop_clock(r)
    emit(r.progress, "train", r.step, r.n_steps, "steps", loss=float(dist_.all_sum(loss, r.d)))
    _after_eval(r, acceptance(r.model, r.ctx.eval_batches, r.cfg.ttt_steps), step_dir)
    r.model.train()
    r.t_mark, r.c_mark = time.perf_counter(), time.process_time()


def _after_eval(r: Run, met: Acceptance, step_dir: bool) -> None:
    """Log one evaluation; keep RUN/best by tau_walk; save the state."""
    tensors = dist_.model_state(r.model)  # collective
    candidate = r.step > 0 or r.cfg.best_includes_start
    if candidate and met.tau_walk > r.best_tau_walk:
        r.best_step, r.best_tau_walk = r.step, met.tau_walk
        r.best_tau_every_position = met.tau_every_position
        if r.d.main:
            r.part.save(r.dir / "best", r.ctx.spec, tensors, r.cfg.target, r.ctx.drafter)
    if r.d.main:
        outputs.append_metrics(r.dir / "metrics.jsonl", metrics_row(r.step, met))
        rows = outputs.read_metrics(r.dir / "metrics.jsonl")
        outputs.plot_curves(r.dir / "curves.png", rows, r.cfg.ttt_steps)
    _save_point(r, step_dir=step_dir, tensors=tensors)


def _save_point(r: Run, *, step_dir: bool, tensors: dict | None = None) -> None:
    """RUN/state (and RUN/step-N when `step_dir`); collectives on every rank, writes on 0."""
    tensors = tensors if tensors is not None else dist_.model_state(r.model)
    optim = dist_.optim_state(r.model, r.opt)  # collective
    anchor = {n: dist_.full(a).cpu() for n, a in r.anchor.items()} if r.anchor is not None else None
    if not r.d.main:
        return
    if step_dir:
        r.part.save(r.dir / f"step-{r.step}", r.ctx.spec, tensors, r.cfg.target, r.ctx.drafter)
    groups = [{k: v for k, v in g.items() if k != "params"} for g in r.opt.param_groups]
    meta = {
        "step": r.step,
        "best_step": r.best_step,
        "best_tau_walk": r.best_tau_walk,
        "best_tau_every_position": r.best_tau_every_position,
        "init": r.ctx.init_info,
        "data_position": r.step * r.cfg.batch_size,
        "param_groups": groups,
        "config": asdict(r.cfg),
    }
    state.save_state(r.dir / "state", model=tensors, optim=optim, anchor=anchor, meta=meta)


def _peak_memory_mb(device: str) -> float:
    """The run's peak memory: on a GPU what torch allocated; on the CPU this process's peak
    RSS, VmHWM where Linux has it (ru_maxrss starts from the parent's RSS when the parent
    spawned this process by vfork, as Python's subprocess does)."""
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
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


def _finish(r: Run) -> dict[str, Any]:
    """RUN/summary.json (rank 0 writes it; every rank returns it)."""
    tokens = int(dist_.all_sum(r.tokens, r.d))
    ctx = r.ctx
    summary = {
        "steps": r.step,
        "planned_steps": r.n_steps,
        "best_step": r.best_step,
        "tau_walk": r.best_tau_walk,
        "tau_every_position": r.best_tau_every_position,
        "tokens_per_s": tokens / r.busy if r.busy > 0 else None,
        "train_seconds": r.busy,  # the training steps' time (evaluations and saves left out)
        "train_cpu_seconds": r.busy_cpu,  # their CPU time (this rank's process)
        "peak_memory_mb": _peak_memory_mb(r.d.device),
        "init_from": r.cfg.init_from,
        "attention": getattr(ctx.spec, "attention", "mha"),
        "method": ctx.drafter.method,
        "position_loss": r.cfg.loss,  # --loss (train/losses.py)
        "flags": spec_flags(ctx.spec),
        "source": ctx.source.kind,
        "train_samples": len(ctx.train_idx),
        "heldout_samples": ctx.heldout_n,
        "draft_vocab_size": ctx.spec.draft_vocab_size,
        "world_size": r.d.world,
        "init": ctx.init_info,
        "warnings": list(ctx.warnings),
    }
    if ctx.vocab_coverage is not None:
        summary["vocab_coverage"] = ctx.vocab_coverage
    rows = outputs.read_metrics(r.dir / "metrics.jsonl")
    best = next((x for x in rows if x["step"] == r.best_step), None)
    if best is not None:
        summary["tau_every_position_by_depth"] = best.get("tau_every_position_by_depth")
        summary["best_acc"] = best["acc"]
    if ctx.reference is not None:
        summary["reference"] = setup.reference_after(ctx, r.dir / "best")
    if r.d.main:
        summary = stamp(summary, "train")
        atomic_write_json(r.dir / "summary.json", summary)
    return json.loads(json.dumps(summary))
