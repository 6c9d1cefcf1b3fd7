"""Speculative decoding over a TargetModel and an Eagle3Drafter (batch 1): chain and tree,
greedy (exactly the target's greedy output) and sampling (exactly the target's distribution).
A DFlash drafter decodes by blocks (decode/block.py); `speculative_generate` picks the loop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode.block import block_generate
from eagle3kit.decode.generation import Generation
from eagle3kit.decode.lookup import lookup_candidates, lookup_generate
from eagle3kit.decode.plain import greedy_generate, plain_generate
from eagle3kit.decode.sampling import Sampling
from eagle3kit.decode.speculative import SpecDecoder, TreeShape
from eagle3kit.decode.speculative import speculative_generate as chain_or_tree_generate
from eagle3kit.decode.stats import Cycle, DecodeStats

if TYPE_CHECKING:
    from eagle3kit.model.dflash import DFlashDrafter
    from eagle3kit.model.protocols import Drafter
    from eagle3kit.model.target import TargetModel

__all__ = [
    "Cycle",
    "DecodeStats",
    "Generation",
    "Sampling",
    "block_generate",
    "chain_or_tree_generate",
    "SpecDecoder",
    "TreeShape",
    "greedy_generate",
    "lookup_candidates",
    "lookup_generate",
    "plain_generate",
    "speculative_generate",
]


def speculative_generate(
    target: TargetModel, drafter: Drafter | DFlashDrafter, prompt_ids: Any, **kw: Any
) -> Generation:
    """Speculative decoding with any drafter: EAGLE-3 chains/trees (decode/speculative.py),
    DFlash blocks of `depth` drafts (decode/block.py); the keywords of the former."""
    if getattr(drafter, "method", None) != "dflash":
        return chain_or_tree_generate(target, drafter, prompt_ids, **kw)
    if kw.pop("tree", None) is not None:
        raise Eagle3Error("tree: a DFlash drafter proposes one block (a chain), not a tree")
    return block_generate(target, drafter, prompt_ids, **kw)
