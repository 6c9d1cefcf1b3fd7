"""Speculative decoding over a TargetModel and an Eagle3Drafter (batch 1): chain and tree,
greedy (exactly the target's greedy output) and sampling (exactly the target's distribution)."""

from eagle3kit.decode.lookup import lookup_candidates, lookup_generate
from eagle3kit.decode.sampling import Sampling
from eagle3kit.decode.speculative import (
    Generation,
    TreeShape,
    greedy_generate,
    speculative_generate,
)
from eagle3kit.decode.stats import Cycle, DecodeStats

__all__ = [
    "Cycle",
    "DecodeStats",
    "Generation",
    "Sampling",
    "TreeShape",
    "greedy_generate",
    "lookup_candidates",
    "lookup_generate",
    "speculative_generate",
]
