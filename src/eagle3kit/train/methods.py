"""Which draft method a run trains, and the EAGLE 3.1 flags its drafter carries.

Methods (the names every verb uses): `eagle3`, `eagle3.1`, `peagle`. EAGLE 3.1 is EAGLE-3 with
two config flags (docs/train.md "EAGLE 3.1"):

    fc_norm        one RMSNorm per aux hidden state before cat + fc   (fc_norm.{i}.weight)
    norm_output    the normed state norm(h) is both the head's input and the next step's
                   hidden (speculators' and vLLM's semantics; not SpecForge's)

and the older `norm_before_fc` (one RMSNorm over cat(aux), `input_norm.weight`), which excludes
fc_norm. `--method eagle3.1` sets fc_norm + norm_output (the EAGLE 3.1 paper's and vLLM's
variant); `--fc-norm/--no-fc-norm`, `--norm-before-fc/...`, `--norm-output/...` set one flag.

A fresh drafter takes the flags asked for (none: EAGLE-3). A warm start keeps the flags its
checkpoint declares unless told otherwise; a change is applied (a new norm starts at ones, a
dropped one is removed) and reported as a warning, since the engine will then run the drafter
with the new flags.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.methods.eagle3.checkpoint import method_of  # noqa: F401  (its one rule)

if TYPE_CHECKING:
    from eagle3kit.model.drafter import Eagle3Drafter
    from eagle3kit.model.protocols import Target

METHODS = ("eagle3", "eagle3.1", "peagle")
TRAIN_FLAGS = ("fc_norm", "norm_before_fc", "norm_output")
EAGLE31 = {"fc_norm": True, "norm_before_fc": False, "norm_output": True}
EAGLE3 = {"fc_norm": False, "norm_before_fc": False, "norm_output": False}


def check_method(method: str | None) -> None:
    if method is not None and method not in METHODS:
        raise Eagle3Error(f"--method: expected one of {', '.join(METHODS)}, found {method!r}")


def wanted_flags(cfg: Any, start: dict[str, bool] | None) -> dict[str, bool]:
    """The flags the run trains with: the start's (warm) or EAGLE-3's (fresh), then the
    method's preset (`eagle3`/`eagle3.1`), then each flag given on its own."""
    flags = dict(start) if start is not None else dict(EAGLE3)
    if cfg.method == "eagle3.1":
        flags.update(EAGLE31)
    elif cfg.method == "eagle3":
        flags.update(EAGLE3)
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


def as_method(
    m: Eagle3Drafter, cfg: Any, target: Target, info: dict[str, Any] | None
) -> Eagle3Drafter:
    """The drafter of the run's method: `--method peagle` turns an EAGLE-3 drafter (fresh or
    warm) into a P-EAGLE one (every weight and the vocab map kept, `mask_hidden` added); a
    P-EAGLE checkpoint stays one (it cannot be trained as EAGLE-3: its mask_hidden would be
    dropped)."""
    from eagle3kit.model.peagle import PEagleDrafter

    parallel = getattr(m, "parallel", False)
    if parallel and cfg.method in ("eagle3", "eagle3.1"):
        raise Eagle3Error(
            f"--method {cfg.method}: {cfg.init_from} is a P-EAGLE drafter; train it with "
            "--method peagle (or without --method), or start from an EAGLE-3 drafter"
        )
    if parallel or cfg.method != "peagle":
        return m
    token = cfg.mask_token_id if cfg.mask_token_id is not None else default_mask_token(target)
    out = PEagleDrafter.from_eagle3(m, token, seed=cfg.seed)
    if info is not None:
        info["peagle"] = {"from": "eagle3", "mask_token_id": token, "mask_hidden": "added"}
    return out


def default_mask_token(target: Target) -> int:
    """The target's pad token when it has one (a token the data never asks the drafter to
    predict), else its last vocabulary id; `--mask-token-id` chooses another."""
    cfg = target.config.to_dict() if hasattr(target.config, "to_dict") else dict(target.config)
    cfg = cfg.get("text_config") or cfg
    pad = cfg.get("pad_token_id")
    if isinstance(pad, int) and not isinstance(pad, bool) and 0 <= pad < target.vocab_size:
        return pad
    return int(target.vocab_size) - 1
