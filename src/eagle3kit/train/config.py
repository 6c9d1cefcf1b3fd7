"""The settings of a training run, their checks, and the learning-rate schedule.

lr(s) = lr * (s+1)/warmup                              for s < warmup
      = lr * (r + (1-r) * (1 + cos(pi * p)) / 2),      p = (s-warmup)/(N-warmup), r = min_lr_ratio
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from eagle3kit.core.errors import Eagle3Error


@dataclass
class TrainConfig:
    """Every setting of a run (saved in RUN/state; `--resume` reuses them)."""

    out: str
    target: str | None = None
    data: str | None = None
    features: str | None = None
    init_from: str | None = None
    attention: str = "mha"
    # the draft method (a TTT one, `check_method`): None keeps a warm start's, else the default
    method: str | None = None
    fc_norm: bool | None = None  # None: the method's (or the warm start's) value
    norm_before_fc: bool | None = None
    norm_output: bool | None = None
    mask_token_id: int | None = None  # peagle: the token of the parallel slots
    cod_ratio: float = 0.7  # peagle: depth d keeps n * max(r^d, r_min) anchors (COD)
    cod_min: float = 0.2
    loss: str = "kl"  # the per-position loss (train/losses.py LOSSES); kl: EAGLE-3's soft CE
    vocab: str | None = None
    draft_vocab_size: int | None = None
    rebuild_vocab: bool = False
    l2sp: float = 0.0
    reference_target: str | None = None
    reference_features: str | None = None  # the old target's feature store (with --features)
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
    heldout: float = 0.05  # the validation split: scored to choose RUN/best
    best_includes_start: bool = False  # the starting weights (step 0) may be RUN/best
    eval_every: int | None = None  # default: steps // 10
    eval_samples: int = 64
    eval_batch: int = 8
    save_every: int | None = None
    seed: int = 0
    device: str = "cpu"
    target_dtype: str = "float32"
    topk: int | None = None
    trust_remote_code: bool = False
    # seconds of training: stop (evaluate, save) after the step that passes it
    time_limit: float | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def validate(self) -> None:
        """Every numeric setting in its range, before anything is loaded or written; the
        message names the CLI option (`--batch-size` for batch_size)."""
        for name, lo, strict, optional in _RANGES:
            v = getattr(self, name)
            if v is None and optional:
                continue
            flag = "--" + name.replace("_", "-")
            kind = "an int" if name in _INTS else "a number"
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise Eagle3Error(f"{flag}: expected {kind}, found {v!r}")
            if v < lo or (strict and v == lo):
                rel = ">" if strict else ">="
                raise Eagle3Error(f"{flag}: expected {kind} {rel} {lo:g}, found {v:g}")
        h = self.heldout
        if isinstance(h, float) and not 0.0 < h < 1.0:
            raise Eagle3Error(f"--heldout: expected a fraction in (0, 1) or a count, found {h:g}")
        for name in ("cod_ratio", "cod_min"):
            if getattr(self, name) > 1.0:
                flag = "--" + name.replace("_", "-")
                raise Eagle3Error(
                    f"{flag}: expected a fraction in (0, 1], found {getattr(self, name):g}"
                )
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise Eagle3Error(f"min_lr_ratio: expected 0..1, found {self.min_lr_ratio:g}")
        from eagle3kit.train.losses import check_loss  # torch: not at import (`--help`)

        check_loss(self.loss)


# (field, lower bound, bound excluded, None allowed)
_RANGES = (
    ("lr", 0, True, False),
    ("steps", 1, False, True),
    ("epochs", 0, True, True),
    ("batch_size", 1, False, False),
    ("ttt_steps", 1, False, False),
    ("warmup", 0, False, True),
    ("max_len", 3, False, False),  # a position t predicts x[t+2]
    ("max_samples", 1, False, True),
    ("heldout", 0, True, False),
    ("eval_every", 1, False, True),
    ("eval_samples", 1, False, False),
    ("eval_batch", 1, False, False),
    ("save_every", 1, False, True),
    ("grad_clip", 0, False, False),
    ("weight_decay", 0, False, False),
    ("l2sp", 0, False, False),
    ("time_limit", 0, False, True),
    ("topk", 1, False, True),
    ("draft_vocab_size", 1, False, True),
    ("mask_token_id", 0, False, True),
    ("cod_ratio", 0, True, False),
    ("cod_min", 0, True, False),
)
_INTS = {
    "steps",
    "batch_size",
    "ttt_steps",
    "warmup",
    "max_len",
    "max_samples",
    "eval_every",
    "eval_samples",
    "eval_batch",
    "save_every",
    "topk",
    "draft_vocab_size",
    "mask_token_id",
}


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
