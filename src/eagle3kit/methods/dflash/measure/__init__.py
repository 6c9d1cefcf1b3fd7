"""DFlash block drafters at the measure layer: the part core/registry.py asks for.

offline.py   offline eval (every answer position a block start), also from a store
probe.py     the probe's stages (readings of its layer ids, block acceptance)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.measure.costs import like, median_ms
from eagle3kit.methods.dflash.measure.offline import evaluate_offline_dflash, evaluate_store_dflash
from eagle3kit.methods.dflash.measure.probe import probe

if TYPE_CHECKING:
    from eagle3kit.methods.dflash.model import DFlashDrafter
    from eagle3kit.model.target import TargetModel

__all__ = ["evaluate_offline", "evaluate_store", "pass_ms", "probe"]


def evaluate_offline(
    target: TargetModel, drafter: DFlashDrafter, data: Any, depth: int, **kw: Any
) -> dict:
    """Block acceptance on the held-out samples (offline.py); `batch_size` does not apply."""
    return evaluate_offline_dflash(target, drafter, data, depth, progress=kw.get("progress"))


def evaluate_store(drafter: str, features: str, depth: int, **kw: Any) -> dict:
    """The same from a feature store holding the drafter's target layers (offline.py)."""
    kw.pop("batch_size", None)
    return evaluate_store_dflash(drafter, features, depth, **kw)


def pass_ms(target, drafter, ids: torch.Tensor, aux: torch.Tensor, repeats: int, sync) -> float:
    """One DFlash block pass [c, 1 + K] as methods/dflash/decode.py drafts in steady state: the
    prompt's
    context but its last NEW positions in the drafter's cache, those NEW (about one cycle's
    accepted tokens) as the pass's new context, the cache cropped back after every call."""
    from eagle3kit.methods.dflash.model import DFlashCache

    c, p = ids.shape
    k, new = drafter.spec.num_proposals, min(2, p - 1)
    block = torch.full((c, 1 + k), drafter.spec.mask_token_id, device=ids.device)
    block[:, 0] = ids[:, -1]
    ctx = like(drafter, aux)
    cache = DFlashCache(drafter.spec.num_hidden_layers)

    def pos(a: int, b: int) -> torch.Tensor:
        return torch.arange(a, b, device=ids.device).expand(c, -1)

    drafter(block, ctx[:, : p - new], pos(0, p - new + 1 + k), cache)  # the earlier context
    cache.crop(p - new)

    def run() -> None:
        drafter(block, ctx[:, p - new :], pos(p - new, p + 1 + k), cache)
        cache.crop(p - new)

    return median_ms(run, repeats, sync)
