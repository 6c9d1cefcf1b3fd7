"""How much a model's outputs vary: within one output (loops) and across prompts (canned
answers). Torch-free; sequences are lists of token ids (or of any hashable items).

- ``distinct_ngram_ratio``: distinct n-grams / all n-grams of ONE output. A greedy loop
  pushes it towards 0; a canned answer (the same fluent text for every prompt) does not move
  it at all.
- ``cross_prompt``: figures over the outputs to N different prompts: how many distinct
  outputs, the share of distinct openings (first ``opening`` items), and pooled distinct-n
  (distinct n-grams over all outputs together / all their n-grams). A target that answers
  every prompt with the same few strings scores low on all three, whatever its per-output
  distinct-4, and acceptance measured on its outputs says little about a drafter.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

OPENING_ITEMS = 8  # an output's opening: its first 8 tokens
CANNED_OPENINGS = 0.5  # below this share of distinct openings, outputs barely depend on prompts
CANNED_POOLED = 0.3  # or below this pooled distinct-4


def ngrams(seq: Sequence[Hashable], n: int) -> list[tuple]:
    """The n-grams of ``seq`` in order (none when it is shorter than n)."""
    return [tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)]


def distinct_ngram_ratio(ids: Sequence[Hashable], n: int = 4) -> float:
    """Distinct n-grams / all n-grams of ``ids`` (1.0: no repetition, also when shorter than
    n; loops push it towards 0)."""
    grams = ngrams(ids, n)
    return len(set(grams)) / len(grams) if grams else 1.0


def distinct_outputs(outputs: Sequence[Sequence[Hashable]]) -> int:
    """How many different outputs there are among ``outputs``."""
    return len({tuple(o) for o in outputs})


def distinct_openings(outputs: Sequence[Sequence[Hashable]], k: int = OPENING_ITEMS) -> float:
    """Share of distinct openings (first ``k`` items) among ``outputs`` (1.0 when empty)."""
    if not outputs:
        return 1.0
    return len({tuple(o[:k]) for o in outputs}) / len(outputs)


def pooled_distinct(outputs: Sequence[Sequence[Hashable]], n: int = 4) -> float:
    """Distinct n-grams over all ``outputs`` together / all their n-grams (n-grams never span
    two outputs). The same answer to every prompt scores about 1/N; 1.0 when no n-grams."""
    grams = [g for o in outputs for g in ngrams(o, n)]
    return len(set(grams)) / len(grams) if grams else 1.0


def cross_prompt(
    outputs: Sequence[Sequence[Hashable]], *, n: int = 4, opening: int = OPENING_ITEMS
) -> dict[str, Any]:
    """The cross-prompt figures of the outputs to N prompts, plus ``canned``: True when the
    outputs barely depend on the prompt (few distinct openings or low pooled distinct-n), and
    ``warning``: one line saying so (None otherwise). Needs 2 or more outputs to judge."""
    outs = [list(o) for o in outputs]
    doc: dict[str, Any] = {
        "outputs": len(outs),
        "distinct_outputs": distinct_outputs(outs),
        "distinct_openings": round(distinct_openings(outs, opening), 4),
        "opening_tokens": opening,
        f"pooled_distinct{n}": round(pooled_distinct(outs, n), 4),
    }
    canned = len(outs) >= 2 and (
        doc["distinct_openings"] < CANNED_OPENINGS or doc[f"pooled_distinct{n}"] < CANNED_POOLED
    )
    doc["canned"] = canned
    doc["warning"] = canned_warning(doc, n) if canned else None
    return doc


def canned_warning(doc: dict[str, Any], n: int = 4) -> str:
    """The one-line warning for cross-prompt figures ``doc`` that look canned."""
    return (
        f"the target's outputs barely depend on the prompt: {doc['distinct_outputs']} distinct "
        f"outputs of {doc['outputs']}, distinct openings {doc['distinct_openings']:.2f}, "
        f"pooled distinct-{n} {doc[f'pooled_distinct{n}']:.2f}; acceptance measured on such "
        "outputs says little about a drafter"
    )
