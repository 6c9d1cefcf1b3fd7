"""P-EAGLE at the measure layer: the part core/registry.py asks for. Its offline eval, probe
and pass are EAGLE-3's (methods/eagle3/measure.py: one pass of its layer is one EAGLE-3 step);
its costs are measured at concurrency 1 only."""

from __future__ import annotations

from collections.abc import Sequence

from eagle3kit.methods.eagle3.measure import (
    evaluate_by_length,
    evaluate_offline,
    evaluate_store,
    pass_ms,
    probe,
)

__all__ = [
    "check_levels",
    "evaluate_by_length",
    "evaluate_offline",
    "evaluate_store",
    "pass_ms",
    "probe",
]


def check_levels(levels: Sequence[int]) -> None:
    """Refuse, before any timing, levels above 1: the parallel pass is timed at batch 1."""
    from eagle3kit.core.errors import Eagle3Error

    if any(c > 1 for c in levels):
        raise Eagle3Error(
            f"--concurrency: expected 1 with a P-EAGLE drafter (its parallel pass runs at "
            f"batch 1 here), found {','.join(map(str, levels))}; for higher levels use "
            "plan --live with a served drafter"
        )
