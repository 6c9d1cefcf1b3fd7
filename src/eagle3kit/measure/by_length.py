"""Context length as a dimension of every measurement: `eval --by-length` (offline, online),
`bench --context-lengths` (measure/bench.py) and the probe's curve.

Buckets. Lengths L_1 < ... < L_m name m buckets, bucket i holding the context lengths
[L_i, L_{i+1}) (the last one [L_m, inf)). A cycle's context length is the number of tokens
before the token it drafts from: the prompt's length for the first cycle after a prompt
(offline, a walked cycle starting at t has context t + 1, and every position t is counted
in the bucket of t + 1). Positions shorter than L_1 are in no bucket (name 0 to keep them).

- Offline (`evaluate_by_length`): the held-out samples' positions, bucketed; per bucket
  the walked tau (`tau_walk`), the every-position tau and the per-position acceptance, from
  one unrolled pass (train/ttt.py `counts_by_position`).
- Online (`online_by_length`): prompts built to each length (data/long_prompts.py), all
  buckets' prompts in one timing harness, interleaved (prompt i of every length, then i + 1),
  so drift in the machine's speed hits every bucket alike; each bucket is summarised from its
  own runs as `eval --online` summarises (measure/evaluate.py `online_summary`), and its
  answers are replayed offline (`offline_same_answers`: the walk on the target's own answers
  equals decoding, so the gap says the two agree).

Every document keeps its kind and adds `by_length` (one entry per bucket, each with its
`context_length`) and `lengths`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eagle3kit.core import registry
from eagle3kit.core.artifacts import few_sequences, stamp
from eagle3kit.core.errors import bad
from eagle3kit.core.progress import Progress

if TYPE_CHECKING:
    import torch

    from eagle3kit.data.long_prompts import LongPrompt
    from eagle3kit.measure.evaluate import EvalData


def bucket_ranges(lengths: tuple[int, ...]) -> list[tuple[int, int | None]]:
    """[(L_i, L_{i+1}) ...] with None for the last bucket's open end."""
    ends: list[int | None] = [*lengths[1:], None]
    return list(zip(lengths, ends, strict=True))


def position_sets(loss_mask: torch.Tensor, lengths: tuple[int, ...]) -> list[torch.Tensor]:
    """Bool [B, T] per bucket: the positions t whose context t + 1 lies in it; then one set
    of every position (the whole run's figures)."""
    import torch

    ctx = torch.arange(1, loss_mask.shape[1] + 1).expand(loss_mask.shape)  # [B, T]
    out = [(ctx >= lo) & (ctx < hi if hi else True) for lo, hi in bucket_ranges(lengths)]
    return [*out, torch.ones(loss_mask.shape, dtype=torch.bool)]


def offline_entry(a, lo: int, hi: int | None) -> dict[str, Any]:
    """One bucket of an offline `by_length` (an `Acceptance`; no cycle walked: no tau)."""
    from eagle3kit.plan.forecast import conditional

    none = a.cycles == 0
    return {
        "context_length": lo,
        "range": [lo, hi],
        "tau_walk": None if none else a.tau_walk,
        "tau_every_position": None if a.counted[0] == 0 else a.tau_every_position,
        "per_position_acceptance": None if none else a.walk_acc,
        "conditional_acceptance": None if none else conditional(a.walk_acc),
        "cycles": a.cycles,
        "positions": a.counted[0],
    }


def evaluate_by_length(
    target,
    drafter,
    data: EvalData,
    depth: int,
    lengths: tuple[int, ...],
    *,
    batch_size: int = 8,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Offline `eval --by-length`: the drafter's method's measure part buckets the positions
    (`evaluate_by_length`); a method whose offline eval is not the TTT walk is refused."""
    part = registry.part(drafter.method, "measure")
    if not hasattr(part, "evaluate_by_length"):
        raise bad(
            "--by-length",
            f"offline: expected a drafter whose offline eval walks positions (EAGLE-3, "
            f"P-EAGLE), found {drafter.method}; use --online (prompts built to each length)",
        )
    return part.evaluate_by_length(
        target, drafter, data, depth, lengths, batch_size=batch_size, progress=progress
    )


def by_length_doc(whole: dict[str, Any], entries: list[dict], lengths, **extra) -> dict:
    """`whole` (an eval document) with its `by_length` entries and the bucket lengths."""
    empty = [e["context_length"] for e in entries if not e.get("cycles")]
    warn = [f"no cycle in the buckets of context {empty}"] if empty else []
    doc = {**whole, "lengths": list(lengths), "by_length": entries, **extra}
    doc["warnings"] = list(doc.get("warnings") or []) + warn
    return stamp(doc, "eval")


def interleaved(prompts: list[LongPrompt]) -> list[LongPrompt]:
    """Prompt 0 of every length, then prompt 1 of every length, ..."""
    return sorted(prompts, key=lambda p: (p.index, p.length))


def online_by_length(
    target,
    drafter,
    prompts: list[LongPrompt],
    depth: int = 3,
    *,
    max_new_tokens: int = 128,
    repeats: int = 3,
    source: str = "",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Online `eval --by-length` (module docstring): the whole run's figures, and per bucket
    its own, with the offline walk of its answers beside them where the method has one."""
    from eagle3kit.measure import timing as T
    from eagle3kit.measure.evaluate import online_summary

    order = interleaved(prompts)
    ids = [list(p.ids) for p in order]
    eos = getattr(target.tokenizer, "eos_token_id", None)
    methods = {
        "base": T.plain_runner(target, max_new_tokens, eos),
        "spec": T.spec_runner(target, drafter, max_new_tokens, eos, depth, None),
    }
    runs = T.time_methods(methods, ids, repeats, progress=progress, label="online eval")
    lengths = tuple(sorted({p.length for p in order}))
    entries = []
    for length in lengths:
        mine = {i for i, p in enumerate(order) if p.length == length}
        sub = [x for x in runs if x.prompt in mine]
        e = online_summary(sub, drafter.method, depth, len(mine), repeats)
        e = {"context_length": length, **e}
        e["warnings"] = few_sequences(len(mine), f"the bucket of context {length}")
        entries.append(e)
    _same_answers(
        target,
        drafter,
        order,
        runs,
        depth=depth,
        max_new=max_new_tokens,
        lengths=lengths,
        entries=entries,
    )
    whole = online_summary(runs, drafter.method, depth, len(order), repeats)
    return by_length_doc(whole, entries, lengths, prompt_source=source)


def _same_answers(target, drafter, order, runs, *, depth, max_new, lengths, entries) -> None:
    """Per bucket, the offline walk on the target's own greedy answers (the prompt, then the
    answer and its EOS as the assistant span), and its gap to the bucket's tau_online."""
    import torch

    from eagle3kit.measure import timing as T
    from eagle3kit.measure.evaluate import EvalData

    if not hasattr(registry.part(drafter.method, "measure"), "evaluate_by_length"):
        return
    eos = getattr(target.tokenizer, "eos_token_id", None)
    samples = []
    for x in T.of(runs, "base"):
        if x.repeat == 0:
            p = list(order[x.prompt].ids)
            ans = x.tokens + ([eos] if eos is not None and len(x.tokens) < max_new else [])
            mask = torch.tensor([False] * len(p) + [True] * len(ans))
            samples.append((torch.tensor(p + ans), mask))
    data = EvalData("answers decoded", samples, [list(p.ids) for p in order])
    off = evaluate_by_length(target, drafter, data, depth, lengths, batch_size=1)
    for e, o in zip(entries, off["by_length"], strict=True):
        e["offline_same_answers"] = {k: o[k] for k in ("tau_walk", "cycles")}
        gap = o["tau_walk"] / e["tau_online"] - 1.0 if o["tau_walk"] else None
        e["offline_online_gap"] = gap


def tau_curve(target, drafter, prompts: list[LongPrompt], depth: int, max_new: int) -> dict:
    """{length: tau_online, per-position acceptance, cycles} of real chain decoding of each
    length's prompts (the drafter's method proposing, `decode.speculative_generate`)."""
    from eagle3kit.decode import DecodeStats, speculative_generate

    eos = getattr(target.tokenizer, "eos_token_id", None)
    pooled: dict[int, DecodeStats] = {}
    for p in interleaved(prompts):
        g = speculative_generate(
            target, drafter, list(p.ids), max_new_tokens=max_new, depth=depth, eos_token_id=eos
        )
        pooled.setdefault(
            p.length, DecodeStats(depth=depth, method="chain")
        ).cycles += g.stats.cycles
    return {
        n: {
            "tau_online": st.tau_online,
            "per_position_acceptance": st.per_position_acceptance(),
            "cycles": len(st.cycles),
        }
        for n, st in sorted(pooled.items())
    }


def probe_curve(new: dict, old: dict | None, prompts: int) -> list[dict[str, Any]]:
    """The probe's `by_length`: per length, tau on NEW and on OLD (`tau_curve`s) and the
    share of the drafter's gain kept, (tau_new - 1) / (tau_old - 1)."""
    out = []
    for n, a in new.items():
        b = (old or {}).get(n)
        ref = b["tau_online"] if b else None
        kept = (a["tau_online"] - 1) / (ref - 1) if ref is not None and ref > 1 else None
        out.append(
            {
                "context_length": n,
                "prompts": prompts,
                "tau": {"new": a["tau_online"], "reference": ref},
                "retention": kept,
                "per_position_acceptance": {
                    "new": a["per_position_acceptance"],
                    "reference": b["per_position_acceptance"] if b else None,
                },
                "cycles": {"new": a["cycles"], "reference": b["cycles"] if b else None},
            }
        )
    return out
