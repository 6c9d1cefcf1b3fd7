"""The one timing harness of eval and bench: several decoding methods on the same prompts.

Repeat r, prompt i: every method decodes prompt i once, in the order of `methods` rotated by
r + i, so drift in machine speed (and warm caches) hits the methods alike. Per method and
repeat, tok/s = new tokens / wall time (prefill included) summed over the prompts.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eagle3kit.core import registry
from eagle3kit.core.progress import Progress, emit


@dataclass
class Timed:
    """One method on one prompt."""

    tokens: list[int]
    s: float  # wall time, prefill included
    forwards: int  # target forwards after the prefill
    stats: Any = None  # DecodeStats of eagle3kit's own decoders
    method: str = ""
    repeat: int = 0
    prompt: int = 0


Runner = Callable[[list[int]], Timed]


def timed(g: Any) -> Timed:
    """A Timed from an eagle3kit.decode Generation."""
    return Timed(g.tokens, g.stats.total_s, len(g.stats.cycles), g.stats)


def plain_runner(target, max_new_tokens: int, eos: int | None) -> Runner:
    """Plain greedy decoding with the KV cache (the baseline)."""
    from eagle3kit.decode import greedy_generate

    return lambda ids: timed(
        greedy_generate(target, ids, max_new_tokens=max_new_tokens, eos_token_id=eos)
    )


def lookup_runner(target, max_new_tokens: int, eos: int | None, k: int) -> Runner:
    """Greedy decoding drafted by prompt lookup in our own KV-cache loop (the decode part of
    the method core/registry.py runs under the loop name "lookup")."""
    look = registry.part(registry.of_decoder("lookup").name, "decode")
    return lambda ids: timed(
        look.generate(target, None, ids, max_new_tokens=max_new_tokens, depth=k, eos_token_id=eos)
    )


def spec_runner(target, drafter, max_new_tokens: int, eos: int | None, depth: int, tree) -> Runner:
    """Greedy speculative decoding, chain (tree None) or tree, as the drafter's method
    proposes (decode `speculative_generate`)."""
    from eagle3kit.decode import speculative_generate

    def run(ids: list[int]) -> Timed:
        g = speculative_generate(
            target,
            drafter,
            ids,
            max_new_tokens=max_new_tokens,
            depth=depth,
            tree=tree,
            eos_token_id=eos,
        )
        return timed(g)

    return run


def time_methods(
    methods: dict[str, Runner],
    prompts: list[list[int]],
    repeats: int,
    *,
    progress: Progress | None = None,
    label: str = "timing",
) -> list[Timed]:
    """Every method on every prompt, `repeats` times, in rotated order (module docstring)."""
    names = list(methods)
    runs: list[Timed] = []
    total = repeats * len(prompts) * len(names)
    for r in range(repeats):
        for i, ids in enumerate(prompts):
            k = (r + i) % len(names)
            for m in names[k:] + names[:k]:
                t = methods[m](ids)
                t.method, t.repeat, t.prompt = m, r, i
                runs.append(t)
                emit(progress, label, len(runs), total, "runs", method=m)
    return runs


def of(runs: list[Timed], method: str) -> list[Timed]:
    return [x for x in runs if x.method == method]


def tokens_per_s(runs: list[Timed], method: str) -> list[float]:
    """Per repeat: new tokens / wall seconds, summed over the prompts."""
    mine = of(runs, method)
    out = []
    for r in sorted({x.repeat for x in mine}):
        rs = [x for x in mine if x.repeat == r]
        out.append(sum(len(x.tokens) for x in rs) / sum(x.s for x in rs))
    return out


def step_times(runs: list[Timed], method: str) -> list[float]:
    """Every decode step's seconds of a plain method (its cycles' verify_s)."""
    return [c.verify_s for x in of(runs, method) for c in x.stats.cycles]


def same_tokens(runs: list[Timed], method: str, base: str) -> bool:
    """Every run of `method` emitted exactly what `base` emitted on that prompt."""
    want = {x.prompt: x.tokens for x in of(runs, base)}
    return all(x.tokens == want[x.prompt] for x in of(runs, method))


def pooled(runs: list[Timed], method: str, depth: int):
    """One DecodeStats holding every cycle of `method`'s runs."""
    from eagle3kit.decode import DecodeStats

    mine = of(runs, method)
    st = DecodeStats(depth=depth, method=mine[0].stats.method if mine else method)
    for x in mine:
        st.cycles += x.stats.cycles
    return st


def spread(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}
