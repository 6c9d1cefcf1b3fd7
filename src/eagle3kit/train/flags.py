"""The EAGLE-3 drafter layer's norm flags a run trains with (docs/train.md "EAGLE 3.1"):

    fc_norm        one RMSNorm per aux hidden state before cat + fc   (fc_norm.{i}.weight)
    norm_output    the normed state norm(h) is both the head's input and the next step's
                   hidden (speculators' and vLLM's semantics; not SpecForge's)

and the older `norm_before_fc` (one RMSNorm over cat(aux), `input_norm.weight`), which excludes
fc_norm. A method may preset them (methods/eagle3/train.py: `--method eagle3.1` sets fc_norm +
norm_output, `--method eagle3` none); `--fc-norm/--no-fc-norm`, `--norm-before-fc/...`,
`--norm-output/...` set one flag.

A fresh drafter takes the flags asked for (none: EAGLE-3's plain layer). A warm start keeps the
flags its checkpoint declares unless told otherwise; a change is applied (a new norm starts at
ones, a dropped one is removed) and reported as a warning, since the engine will then run the
drafter with the new flags.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import Eagle3Error

if TYPE_CHECKING:
    pass

TRAIN_FLAGS = ("fc_norm", "norm_before_fc", "norm_output")
PLAIN = {"fc_norm": False, "norm_before_fc": False, "norm_output": False}  # EAGLE-3's layer


def wanted_flags(
    cfg: Any, start: dict[str, bool] | None, preset: dict[str, bool] | None = None
) -> dict[str, bool]:
    """The flags the run trains with: the start's (warm) or the plain layer's (fresh), then
    the method's `preset` (its train part's), then each flag given on its own."""
    flags = dict(start) if start is not None else dict(PLAIN)
    flags.update(preset or {})
    for name in TRAIN_FLAGS:
        v = getattr(cfg, name, None)
        if v is not None:
            flags[name] = bool(v)
    if flags["fc_norm"] and flags["norm_before_fc"]:
        raise Eagle3Error(
            "--fc-norm/--norm-before-fc: expected at most one of them (a per-layer norm or one "
            "norm over the concatenation, as speculators and vLLM refuse both), found both"
        )
    return flags


def spec_flags(spec: Any) -> dict[str, bool]:
    return {k: bool(getattr(spec, k)) for k in TRAIN_FLAGS}


def flag_changes(before: dict[str, bool], after: dict[str, bool]) -> list[str]:
    """`name: old -> new` for every flag that differs."""
    return [
        f"{k}: {str(before[k]).lower()} -> {str(after[k]).lower()}"
        for k in TRAIN_FLAGS
        if before[k] != after[k]
    ]


def with_flags(m: Any, flags: dict[str, bool]) -> Any:
    """A drafter like `m` (same kind, weights, vocab, embedding) with `flags`; a norm a new flag
    needs starts at ones (the RMSNorm's plain scale), one a dropped flag had is removed."""
    if spec_flags(m.spec) == flags:
        return m
    out = m.blank(m.spec.replace(**flags))
    own = out.state_dict()
    tensors = {k: v for k, v in m.canonical_state(with_embedding=True).items() if k in own}
    for name in own:
        if name.startswith(("fc_norm.", "input_norm.")) and name not in tensors:
            tensors[name] = torch.ones_like(own[name])
    out.load_canonical(tensors)
    out.embed_loaded = m.embed_loaded
    return out
