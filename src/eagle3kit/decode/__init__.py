"""Speculative decoding over a TargetModel and a drafter (batch 1): the one lossless verifier
(decode/speculative.py: draft -> verify -> accept -> crop -> catch up; greedy is exactly the
target's greedy output, sampling exactly its distribution), plain decoding, the sampling rule.
`speculative_generate` lets the drafter's method propose: its package's decode part
(core/registry.py), EAGLE-3's chain or tree being decode/speculative.py's own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eagle3kit.core import registry
from eagle3kit.decode.generation import Generation
from eagle3kit.decode.plain import greedy_generate, plain_generate
from eagle3kit.decode.sampling import Sampling
from eagle3kit.decode.speculative import SpecDecoder, TreeShape
from eagle3kit.decode.stats import Cycle, DecodeStats

if TYPE_CHECKING:
    from eagle3kit.model.protocols import Drafter
    from eagle3kit.model.target import TargetModel

__all__ = [
    "Cycle",
    "DecodeStats",
    "Generation",
    "Sampling",
    "SpecDecoder",
    "TreeShape",
    "greedy_generate",
    "plain_generate",
    "speculative_generate",
]


def speculative_generate(
    target: TargetModel, drafter: Drafter, prompt_ids: Any, **kw: Any
) -> Generation:
    """Speculative decoding with any drafter, as its method proposes (EAGLE-3 chains/trees,
    P-EAGLE's one pass, DFlash blocks of `depth` drafts, an MTP head); decode/speculative.py's
    keywords."""
    return registry.part(drafter.method, "decode").generate(target, drafter, prompt_ids, **kw)
