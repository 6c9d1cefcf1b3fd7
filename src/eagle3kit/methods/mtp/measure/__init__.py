"""MTP heads at the measure layer: the part core/registry.py asks for.

offline.py   offline eval of a head (teacher-forced recursive steps)
probe.py     `probe --method mtp` (loads NEW, OLD and the head on each)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core import registry
from eagle3kit.core.errors import bad
from eagle3kit.measure.costs import like, median_ms
from eagle3kit.methods.mtp.checkpoint.layout import METHOD
from eagle3kit.methods.mtp.measure.offline import evaluate_mtp_offline
from eagle3kit.methods.mtp.measure.probe import probe_head

if TYPE_CHECKING:
    from eagle3kit.methods.mtp.model import MTPHead
    from eagle3kit.model.target import TargetModel

__all__ = ["evaluate_offline", "evaluate_store", "pass_ms", "probe_head"]


def evaluate_offline(target: TargetModel, head: MTPHead, data: Any, depth: int, **kw: Any) -> dict:
    """The head's acceptance on the held-out samples (offline.py)."""
    return evaluate_mtp_offline(target, head, data, depth, batch_size=kw.get("batch_size", 8))


def evaluate_store(drafter: str | None, features: Any, depth: int, **kw: Any) -> dict:
    """Refused: a feature store keeps aux layers, not what the head reads."""
    why = registry.get(METHOD).why_not["store_eval"]
    raise bad("--features", f"{METHOD}: expected --data ({why})")


def pass_ms(target, head, ids: torch.Tensor, aux: torch.Tensor, repeats: int, sync) -> float:
    """One MTP head step [c, 1] over its cache of the prompt, on the target's final hidden
    state (methods/mtp/decode.py: what the head reads; steps 2..k reuse its own output hidden)."""
    from eagle3kit.methods.mtp.decode import FinalHidden
    from eagle3kit.methods.mtp.model import MTPCache

    feats = FinalHidden(target)
    try:
        target.reset()
        hidden = feats.prefill(ids).aux  # [c, P, H]
    finally:
        feats.close()
    cache = MTPCache()
    first = head(ids[:, 1:], like(head, hidden[:, :-1]), cache)  # pairs (h_t, x_{t+1})
    p = cache.length
    h, tok = first.hidden[:, -1:], ids[:, -1:]

    def run() -> None:
        head(tok, h, cache)
        cache.crop(p)

    return median_ms(run, repeats, sync)
