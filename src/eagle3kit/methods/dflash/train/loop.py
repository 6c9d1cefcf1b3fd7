"""The `train --method dflash` run: one process or torchrun (FSDP2), resumable, atomic writes.

Per step (the objective is methods/dflash/train/step.py's):

    batch   = the global batch of the step (loop.batch_indices: the same order as EAGLE-3)
    rows    = batch[rank::world]                       (one process: rank 0 of 1)
    anchors = drawn per row from a generator seeded by (seed, step, the row's place in the
              global batch) (distributed.row_generators): a rank draws for its rows what one
              process draws for them, a resumed run what the uninterrupted one drew
    loss    = Σ_rank Σ w ℓ / Σ_global w                (all_sum of Σ w; each rank's backward
              scaled by world, as FSDP2 averages the gradients over ranks)

so the update equals one process on the whole batch. Under torchrun every DFlash layer, `fc`,
`hidden_norm` and `norm` is a `fully_shard` unit (the target's embedding and lm_head are not
the drafter's parameters; a speculators-layout start's own are frozen and stay whole), the
backend follows the device (gloo on the CPU, nccl on CUDA), evaluation runs on every rank over
the whole held-out set, and rank 0 writes RUN/best, RUN/metrics.jsonl and RUN/state (each
atomically; a resume drops metrics rows after the saved step).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.progress import Progress, emit
from eagle3kit.methods.dflash.train.step import (
    DFlashOptions,
    block_loss_terms,
    block_outputs,
    evaluate_blocks,
    layer_ids,
    make_blocks,
    new_drafter,
)
from eagle3kit.train import distributed as dist_
from eagle3kit.train import outputs
from eagle3kit.train.loss_names import check_loss

if TYPE_CHECKING:
    from eagle3kit.methods.dflash.model import DFlashDrafter
    from eagle3kit.model.target import TargetModel

UNIT_CARRIERS = ("",)  # the units: the drafter's children (each layer of `layers` its own)


@dataclass
class DFlashRun:
    """What the loop carries: settings, target, data split, drafter, optimizer, progress."""

    cfg: Any  # TrainConfig
    opts: DFlashOptions
    d: dist_.Dist
    target: TargetModel
    source: Any  # OnlineSource / OfflineSource: Features per list of sample indices
    train_idx: list[int]
    eval_batches: list[Any]
    drafter: DFlashDrafter  # sharded under torchrun
    opt: torch.optim.Optimizer
    n_steps: int
    step: int = 0
    best_step: int = -1
    best_tau_every_position: float = -1.0
    busy_s: float = 0.0
    tokens: int = 0  # real tokens trained on, all ranks


def _source(cfg: Any, target: TargetModel) -> Any:
    """Online features (the target runs on each batch) or a feature store with the layers."""
    from eagle3kit.train.setup import open_data, open_store
    from eagle3kit.train.sources import OfflineSource, OnlineSource

    d2t = torch.zeros(target.vocab_size, dtype=torch.long)  # the full vocabulary
    data = open_data(cfg, target)
    if cfg.features:
        return OfflineSource(
            open_store(cfg.features, d2t), max_len=cfg.max_len, layers=target.aux_layers
        )
    return OnlineSource(data, target, d2t, max_len=cfg.max_len, topk=None)


def start(
    cfg: Any, opts: DFlashOptions, d: dist_.Dist, progress: Progress | None, make=new_drafter
) -> DFlashRun:
    """Target (capturing the drafter's layers), data, split, drafter (sharded), AdamW.
    `make(target, opts, init_from, device)`: the drafter (a block-drafter variant's own)."""
    from eagle3kit.model.loading import load_target, resolve_target
    from eagle3kit.train.config import total_steps

    opts.validate()
    check_loss(cfg.loss, token="--dflash-loss ce" if opts.loss == "ce" else None)
    if cfg.target is None:
        raise Eagle3Error("train --method dflash: expected --target")
    if cfg.batch_size < d.world:
        raise Eagle3Error(
            f"--batch-size: expected at least one sample per rank ({d.world}), "
            f"found {cfg.batch_size}"
        )
    n_layers = _num_layers(resolve_target(cfg.target))
    aux = [i + 1 for i in layer_ids(cfg, opts, n_layers)]
    target = load_target(cfg.target, device=d.device, dtype=cfg.target_dtype, aux_layers=aux)
    from eagle3kit.train.setup import check_max_len

    check_max_len(cfg.max_len, target.config)
    src = _source(cfg, target)
    train_idx, held = src.split(cfg.heldout, 0)
    if cfg.max_samples:
        train_idx = train_idx[: cfg.max_samples]
    if not train_idx or not held:
        raise Eagle3Error(
            f"train: expected training and held-out samples, found {len(train_idx)} and {len(held)}"
        )
    held = held[: cfg.eval_samples]
    evals = [src.batch(held[i : i + cfg.eval_batch]) for i in range(0, len(held), cfg.eval_batch)]
    evals = [b.to(d.device) for b in evals]
    torch.manual_seed(cfg.seed)
    m = dist_.shard(make(target, opts, cfg.init_from, d.device), d, UNIT_CARRIERS)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    n_steps = total_steps(cfg, len(train_idx))
    emit(progress, "setup", 1, 1, train=len(train_idx), heldout=len(held))
    return DFlashRun(cfg, opts, d, target, src, train_idx, evals, m, opt, n_steps)


def _num_layers(path: str) -> int:
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(path)
    return int(getattr(cfg, "num_hidden_layers", 0) or cfg.get_text_config().num_hidden_layers)


def train_step(r: DFlashRun) -> float:
    """One step on this rank's rows of the next global batch; returns the global loss."""
    from eagle3kit.train.config import lr_at
    from eagle3kit.train.loop import batch_indices

    cfg, m, d, o = r.cfg, r.drafter, r.d, r.opts
    idx = batch_indices(r.step, r.train_idx, cfg.batch_size, cfg.seed)
    feats = r.source.batch(idx[d.rank :: d.world]).to(d.device)
    gens = dist_.row_generators(cfg.seed, r.step, range(d.rank, cfg.batch_size, d.world))
    blocks = make_blocks(feats, o.anchors, m.spec.block_size, m.spec.mask_token_id, gens)
    logits, hidden, prev = block_outputs(m, feats, blocks)
    s, w = block_loss_terms(
        logits, feats, blocks, o.gamma, o.loss, o.weights, o.dpace_alpha, loss=cfg.loss
    )
    loss = s / dist_.all_sum(w.detach(), d).clamp(min=1e-9)
    extra = m.aux_loss_terms(hidden, prev, logits, feats, blocks)  # a variant's own head
    if extra is not None:
        loss = loss + extra[0] / dist_.all_sum(extra[1].detach(), d).clamp(min=1e-9)
    for g in r.opt.param_groups:
        g["lr"] = lr_at(r.step, r.n_steps, cfg)
    r.opt.zero_grad(set_to_none=True)
    (loss * d.world).backward()
    dist_.sync_replicated(m, d)
    torch.nn.utils.clip_grad_norm_([p for p in m.parameters() if p.requires_grad], cfg.grad_clip)
    r.opt.step()
    r.tokens += int(dist_.all_sum(feats.attention_mask.sum(), d))
    r.step += 1
    return float(dist_.all_sum(loss.detach(), d))


def evaluate_and_keep(r: DFlashRun, progress: Progress | None) -> dict[str, Any]:
    """Held-out acceptance (every rank, the whole set); RUN/best <- the drafter when τ
    improves (gathered on every rank, written by rank 0). A metrics row."""
    m = r.drafter
    m.eval()
    row = {"step": r.step, **evaluate_blocks(m, r.eval_batches, r.opts, seed=r.cfg.seed)}
    m.train()
    tau = row["tau_every_position"] if row["tau_every_position"] is not None else -1.0
    tensors = dist_.model_state(m)  # collective
    if tau > r.best_tau_every_position:
        r.best_tau_every_position, r.best_step = tau, r.step
        if r.d.main:
            m.save_tensors(Path(r.cfg.out) / "best", tensors)
    if r.d.main:
        outputs.append_metrics(Path(r.cfg.out) / "metrics.jsonl", row)
    tau_row = row["tau_every_position"]
    emit(progress, "eval", r.step, r.n_steps, tau_every_position=tau_row, loss=row["loss"])
    save_state(r, tensors)
    return row


def save_state(r: DFlashRun, tensors: dict[str, torch.Tensor]) -> None:
    """RUN/state: weights, AdamW moments, RNG, counters (train/state.py), atomically; the
    moments are gathered on every rank, rank 0 writes."""
    from eagle3kit.train import state

    optim = dist_.optim_state(r.drafter, r.opt)  # collective
    if not r.d.main:
        return
    meta = {
        "method": r.drafter.method,
        "step": r.step,
        "best_step": r.best_step,
        "best_tau_every_position": r.best_tau_every_position,
        "tokens": r.tokens,
        "busy_s": r.busy_s,
        "config": asdict(r.cfg),
        "dflash": {**asdict(r.opts), "spec": r.drafter.spec.to_json()},
    }
    state.save_state(Path(r.cfg.out) / "state", model=tensors, optim=optim, meta=meta)


def restore(r: DFlashRun, saved: dict[str, Any]) -> None:
    """Weights, moments, RNG and counters from RUN/state; metrics rows after it dropped."""
    dist_.load_model_state(r.drafter, saved["model"])
    dist_.load_optim_state(r.drafter, r.opt, saved["optim"])
    torch.set_rng_state(saved["rng"]["torch_cpu"])
    m = saved["meta"]
    r.step, r.best_step, r.best_tau_every_position = (
        m["step"],
        m["best_step"],
        m["best_tau_every_position"],
    )
    r.tokens, r.busy_s = m["tokens"], m["busy_s"]
    path = Path(r.cfg.out) / "metrics.jsonl"
    if r.d.main:
        outputs.write_metrics(path, outputs.read_metrics(path, r.step))


def train_dflash(
    cfg: Any,
    opts: DFlashOptions,
    *,
    resume: bool = False,
    progress: Progress | None = None,
    make=new_drafter,
) -> dict[str, Any]:
    """The run (module docstring): RUN/best (z-lab layout) by held-out τ, RUN/state for
    --resume (the saved settings win over the given ones but the output dir, device and time
    limit). `make`: the drafter to train (`new_drafter`'s arguments; a block-drafter variant
    gives its own, trained by the same loop)."""
    from eagle3kit.train import state

    out = Path(cfg.out)
    saved = state.load_state(out / "state") if resume else None
    if saved is not None:
        cfg, opts = _saved(saved, cfg), _saved_opts(saved)
    elif (out / "state").exists():
        raise Eagle3Error(f"{out}: holds a run (state/); pass --resume or choose another --out")
    d = dist_.setup(cfg.device)
    try:
        r = start(cfg, opts, d, progress, make)
        out.mkdir(parents=True, exist_ok=True)
        if saved is not None:
            restore(r, saved)
        else:
            evaluate_and_keep(r, progress)
        _steps(r, progress)
        result = summary(r)
        dist_.barrier(d)
        return result
    finally:
        dist_.teardown(d)


def _steps(r: DFlashRun, progress: Progress | None) -> None:
    """Steps until the plan or the time limit (agreed over ranks), evaluating and saving every
    `eval_every` steps and at the end."""
    cfg = r.cfg
    every = cfg.eval_every or max(1, r.n_steps // 10)
    r.drafter.train()
    t_call = t0 = time.perf_counter()
    while r.step < r.n_steps:
        loss = train_step(r)
        emit(progress, "train", r.step, r.n_steps, loss=loss)
        late = cfg.time_limit is not None and time.perf_counter() - t_call > cfg.time_limit
        late = bool(dist_.all_sum(torch.tensor([float(late)], device=r.d.device), r.d) > 0)
        if r.step % every == 0 or r.step == r.n_steps or late:
            r.busy_s += time.perf_counter() - t0
            evaluate_and_keep(r, progress)
            t0 = time.perf_counter()
        if late:
            break


def _saved(saved: dict[str, Any], given: Any) -> Any:
    """--resume: the run's own settings, with this invocation's output dir, device and time
    limit (a budget per invocation)."""
    from eagle3kit.train.config import TrainConfig

    cfg = TrainConfig.from_json(saved["meta"]["config"])
    cfg.out, cfg.device, cfg.time_limit = given.out, given.device, given.time_limit
    return cfg


def _saved_opts(saved: dict[str, Any]) -> DFlashOptions:
    o = {k: v for k, v in saved["meta"]["dflash"].items() if k != "spec"}
    ids = o.get("target_layer_ids")
    return DFlashOptions(**{**o, "target_layer_ids": tuple(ids) if ids else None})


def summary(r: DFlashRun) -> dict[str, Any]:
    """The run's JSON summary (the `train --json` document)."""
    rows = outputs.read_metrics(Path(r.cfg.out) / "metrics.jsonl") if r.d.main else []
    rows = rows or [{"step": r.best_step}]
    best = next((x for x in rows if x["step"] == r.best_step), rows[-1])
    return {
        "kind": "eagle3kit.train",
        "method": r.drafter.method,
        "steps": r.step,
        "train_samples": len(r.train_idx),
        "source": r.source.kind,
        "block_size": r.drafter.spec.block_size,
        "draft_layers": r.drafter.spec.num_hidden_layers,
        "target_layer_ids": list(r.drafter.spec.target_layer_ids),
        "init_from": r.cfg.init_from,  # the warm start's drafter (None: fresh)
        "loss": r.opts.loss,  # the teacher: ce the data token, kl the target's law
        "position_loss": r.cfg.loss,  # --loss, against that teacher (train/losses.py)
        "best_step": r.best_step,
        "tau_every_position": best.get("tau_every_position"),
        "per_position_acceptance": best.get("per_position_acceptance"),
        "conditional_acceptance": best.get("conditional_acceptance", []),
        "best": str(Path(r.cfg.out) / "best"),
        "tokens_per_s": r.tokens / r.busy_s if r.busy_s > 0 else None,
        "train_s": r.busy_s,
        "world_size": r.d.world,
    }


def train_dflash_drafter(
    run: str | Path,
    target: str | Path,
    data: str | Path,
    *,
    steps: int,
    batch: int = 8,
    max_len: int = 512,
    lr: float = 3e-3,
    block_size: int = 8,
    draft_layers: int = 1,
    anchors: int = 16,
    init: str | Path | None = None,
    eval_samples: int = 32,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Train a DFlash drafter on DATA for TARGET into RUN (RUN/best: z-lab layout), with
    plain values a caller such as the demo takes from its recipe; returns the summary."""
    from eagle3kit.train.config import TrainConfig

    cfg = TrainConfig(
        out=str(run),
        target=str(target),
        data=str(data),
        init_from=str(init) if init else None,
        steps=steps,
        batch_size=batch,
        max_len=max_len,
        lr=lr / 3 if init else lr,
        eval_every=max(1, steps // 6),
        eval_samples=eval_samples,
    )
    opts = DFlashOptions(block_size=block_size, draft_layers=draft_layers, anchors=anchors)
    return train_dflash(cfg, opts, progress=progress)
