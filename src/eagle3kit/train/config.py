"""The settings of a training run, their checks, and the learning-rate schedule.

lr(s) = lr * (s+1)/warmup                              for s < warmup
      = lr * (r + (1-r) * (1 + cos(pi * p)) / 2),      p = (s-warmup)/(N-warmup), r = min_lr_ratio
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.options import check, option

METHOD_HELP = (
    "eagle3, eagle3.1 (fc_norm + norm_output), peagle (parallel drafting), dflash (a block "
    "drafter, docs/dflash.md), dspark (DFlash's backbone + a Markov head; --init-from a DFlash "
    "drafter warm-starts the backbone, docs/dspark.md) or mtp (fine-tune the target's MTP head, "
    "FastMTP's recipe; "
    "--init-from: a head dir, default the target's own head, else fresh weights; docs/mtp.md); "
    "default: a warm start's own, else eagle3."
)


@dataclass
class TrainConfig:
    """Every setting of a run (saved in RUN/state; `--resume` reuses them). Each field is an
    option of `eagle3kit train` and a key of its config file (core/options.py)."""

    out: str = option(None, "Run directory RUN.", short="-o", required=True)
    target: str | None = option(None, "Target: zoo name (dsv3-v1, dsv3-v1-tiny), dir or hub id.")
    data: str | None = option(
        None, "DATA dir from `data prepare` (online: the target runs on each batch)."
    )
    features: str | None = option(None, "Feature STORE from `data capture` (offline).")
    init_from: str | None = option(
        None, "Warm start from this drafter (any layout, dir or hub id)."
    )
    attention: str = option("mha", "Fresh drafter's attention: mha or mla.", choices=("mha", "mla"))
    # the draft method (a TTT one, `check_method`): None keeps a warm start's, else the default
    method: str | None = option(None, METHOD_HELP)
    fc_norm: bool | None = option(  # None: the method's (or the warm start's) value
        None, "EAGLE 3.1: one RMSNorm per aux state before fc.", flags="--fc-norm/--no-fc-norm"
    )
    norm_before_fc: bool | None = option(
        None, "One RMSNorm over cat(aux).", flags="--norm-before-fc/--no-norm-before-fc"
    )
    norm_output: bool | None = option(
        None,
        "EAGLE 3.1: feed norm(h) to the next step and the head (speculators, vLLM).",
        flags="--norm-output/--no-norm-output",
    )
    mask_token_id: int | None = option(
        None, "peagle: the parallel slots' token (default: pad).", min=0
    )
    cod_ratio: float = option(0.7, "peagle: COD keeps n*max(r^d, min) at depth d.", above=0, max=1)
    cod_min: float = option(0.2, "peagle: COD's floor r_min.", above=0, max=1)
    loss: str = option(  # the per-position loss (train/losses.py LOSSES); kl: EAGLE-3's soft CE
        "kl",
        "Per-position loss to the target's law: kl (default), rkl, jsd, tv, ce (the target's "
        "argmax), lk or lk-hybrid (acceptance, LK); every method (docs/train.md).",
    )
    vocab: str | None = option(
        None, "VOCAB file (d2t/t2d) from `data vocab`, or a drafter checkpoint's own."
    )
    draft_vocab_size: int | None = option(
        None, "Build the vocab from DATA's assistant-token counts.", min=1
    )
    rebuild_vocab: bool = option(
        False, "Warm start: replace the checkpoint's d2t/t2d (lm_head rows follow their ids)."
    )
    l2sp: float = option(0.0, "Warm start: L2-SP weight toward the starting weights.", min=0)
    reference_target: str | None = option(
        None, "Old target (with --data): report accept length before/after on it too."
    )
    reference_features: str | None = option(  # the old target's store (with --features)
        None,
        "Old target's feature STORE of the same DATA (with --features): the same before/after, "
        "no target loaded.",
    )
    ttt_steps: int = option(7, "Unrolled draft steps (weights 0.8^i); peagle: depths K.", min=1)
    steps: int | None = option(None, "Exactly this many optimizer steps.", min=1)
    epochs: float | None = option(None, "Or: passes over the training split (default 1).", above=0)
    batch_size: int = option(8, "Samples per optimizer step (global).", min=1)
    max_len: int = option(  # a position t predicts x[t+2]
        512, "Truncate samples to this many tokens.", min=3
    )
    sliding_window: int | None = option(  # the drafter's layers see the last W positions
        None,
        "Sliding-window attention: the drafter's layers see keys within W positions of the "
        "query (written as layer_types/sliding_window; eagle3, eagle3.1, dflash).",
        min=1,
    )
    max_samples: int | None = option(None, "Train on the first N training samples only.", min=1)
    lr: float = option(1e-3, "Peak learning rate (AdamW).", above=0)
    warmup: int | None = option(None, "Warm-up steps (default 5% of steps).", min=0)
    min_lr_ratio: float = option(0.1, "The cosine's floor, a share of --lr.", cli=False)
    weight_decay: float = option(0.0, "AdamW's weight decay.", min=0)
    grad_clip: float = option(1.0, "Clip the gradient's norm to this (0: no clipping).", min=0)
    heldout: int | float = option(  # the validation split: scored to choose RUN/best
        0.05,
        "Validation fraction (0.05) or count (8) of samples, by sample id: chooses RUN/best.",
        above=0,
    )
    best_includes_start: bool = option(
        False, "Let the starting weights (step 0) be RUN/best (default: trained steps only)."
    )
    eval_every: int | None = option(None, "Evaluate every N steps (default steps/10).", min=1)
    eval_samples: int = option(64, "Held-out samples scored per evaluation.", min=1)
    eval_batch: int = option(8, "Held-out samples per forward.", min=1)
    save_every: int | None = option(None, "Write RUN/step-N every N steps.", min=1)
    seed: int = option(0, "Seed of the fresh weights, the data order and COD.")
    device: str = option("cpu", "cpu, cuda, cuda:1 ...")
    target_dtype: str = option("float32", "float32, bfloat16, float16.")
    topk: int | None = option(None, "Online: keep the teacher's top-K draft ids only.", min=1)
    trust_remote_code: bool = option(False, "Allow the target's own model code.")
    # seconds of training: stop (evaluate, save) after the step that passes it
    time_limit: float | None = option(
        None, "Stop after this many seconds of training (evaluate and save first).", min=0
    )

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def validate(self) -> None:
        """Every numeric setting in its range, before anything is loaded or written; the
        message names the CLI option (`--batch-size` for batch_size)."""
        check(self)
        h = self.heldout
        if isinstance(h, float) and not 0.0 < h < 1.0:
            raise Eagle3Error(f"--heldout: expected a fraction in (0, 1) or a count, found {h:g}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise Eagle3Error(f"min_lr_ratio: expected 0..1, found {self.min_lr_ratio:g}")
        from eagle3kit.train.loss_names import check_loss

        check_loss(self.loss)


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to lr * min_lr_ratio (module docstring)."""
    warm = cfg.warmup if cfg.warmup is not None else max(1, total // 20)
    if step < warm:
        return cfg.lr * (step + 1) / warm
    p = (step - warm) / max(1, total - warm)
    r = cfg.min_lr_ratio
    return cfg.lr * (r + (1 - r) * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def total_steps(cfg: TrainConfig, n_train: int) -> int:
    """--steps, or --epochs (default 1) passes over the training split."""
    if cfg.steps is not None:
        if cfg.steps < 1:
            raise Eagle3Error(f"--steps: expected a positive int, found {cfg.steps}")
        return cfg.steps
    epochs = cfg.epochs if cfg.epochs is not None else 1.0
    return max(1, math.ceil(epochs * n_train / cfg.batch_size))


def ttt_methods() -> tuple[str, ...]:
    """The methods this training-time-test loop trains (those whose train part says `TTT`)."""
    from eagle3kit.core import registry

    trained = registry.names(can="train")
    return tuple(n for n in trained if getattr(registry.part(n, "train"), "TTT", False))


def check_method(method: str | None) -> None:
    """`--method` of a TTT run: None (a warm start's own, else the default) or a TTT method."""
    if method is not None and method not in ttt_methods():
        raise Eagle3Error(f"--method: expected one of {', '.join(ttt_methods())}, found {method!r}")


def from_options(options: dict[str, Any], **over: Any) -> TrainConfig:
    """A TrainConfig from the CLI's options (those that are its fields), `over` on top."""
    names = {f.name for f in fields(TrainConfig)}
    return TrainConfig(**{k: v for k, v in options.items() if k in names} | over)


@dataclass
class TrainOptions(TrainConfig):
    """`eagle3kit train`'s options: the run's settings (TrainConfig) and those of the other
    methods' runs and of this invocation. The command line and a config file read this one
    list (cli/_command.py, core/config_file.py); a run directory's config.toml holds every
    field but the `record=False` ones (how to run, not what runs)."""

    block_size: int = option(8, "dflash: block size B (B-1 drafts).", min=2)
    draft_layers: int = option(1, "dflash: drafter layers.", min=1)
    anchors: int = option(16, "dflash: blocks per sample per step.", min=1)
    gamma: float = option(4.0, "dflash: position weights exp(-(k-1)/g).", above=0)
    position_weights: str = option(
        "exp", "dflash: exp or dpace (with ce).", choices=("exp", "dpace")
    )
    dflash_loss: str = option("kl", "dflash: ce (data) or kl (target).", choices=("ce", "kl"))
    mtp_steps: int = option(3, "mtp: teacher-forced recursive steps (3).", min=1)
    mtp_targets: str = option(
        "data",
        "mtp: data (FastMTP: CE on DATA's tokens, for DATA regenerated by the target) or "
        "target (distil the target's own next-token law).",
        choices=("data", "target"),
    )
    threads: int | None = option(None, "torch CPU threads.", min=1)
    resume: bool = option(False, "Continue RUN exactly (its saved settings).", record=False)
    dry_run: bool = option(
        False,
        "Print the run's plan (shapes, steps, memory per rank, time per step measured here) "
        "and exit without writing anything.",
        record=False,
    )
    json_: bool = option(
        False,
        "Print RUN/summary.json (with --dry-run: the plan) as one JSON document.",
        record=False,
    )


def run_split(cfg: TrainConfig, train_idx: list, held_idx: list) -> tuple[list, list]:
    """The run's training and held-out sample ids from the data's split: `--max-samples` keeps
    the first training ones; both sets must be non-empty (`train` and its dry run alike)."""
    if cfg.max_samples:
        train_idx = train_idx[: cfg.max_samples]
    if not train_idx or not held_idx:
        raise bad(
            cfg.data or cfg.features,
            f"expected training and held-out samples, found {len(train_idx)} and "
            f"{len(held_idx)} (--heldout {cfg.heldout})",
        )
    return train_idx, held_idx
