"""Speculative decoding over a TargetModel and an Eagle3Drafter (batch 1): chain and tree,
greedy (exactly the target's greedy output) and sampling (exactly the target's distribution)."""

from eagle3kit.decode.generation import Generation
from eagle3kit.decode.lookup import lookup_candidates, lookup_generate
from eagle3kit.decode.plain import greedy_generate, plain_generate
from eagle3kit.decode.sampling import Sampling
from eagle3kit.decode.speculative import SpecDecoder, TreeShape, speculative_generate
from eagle3kit.decode.stats import Cycle, DecodeStats

__all__ = [
    "Cycle",
    "DecodeStats",
    "Generation",
    "Sampling",
    "SpecDecoder",
    "TreeShape",
    "greedy_generate",
    "lookup_candidates",
    "lookup_generate",
    "plain_generate",
    "speculative_generate",
]
