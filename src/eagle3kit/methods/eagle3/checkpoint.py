"""EAGLE-3 / EAGLE 3.1 drafters at the checkpoint layer: which of the two a drafter is."""

from __future__ import annotations

from typing import Any

EAGLE31_FLAGS = ("fc_norm", "norm_output")  # either one set: EAGLE 3.1 (docs/train.md)


def method_of(spec: Any) -> str:
    """`eagle3.1` when fc_norm or norm_output is set, else `eagle3` (norm_before_fc alone
    predates 3.1: speculators wrote it for EAGLE-3 drafters)."""
    return "eagle3.1" if any(getattr(spec, f) for f in EAGLE31_FLAGS) else "eagle3"
