"""Side-by-side decoding speed on the same chat prompts: greedy, prompt lookup, chain, tree.

Every method decodes the same chat-templated prompts (never a random-completion loop: loops
inflate accept length), `repeats` times; repeat r runs the methods in an order rotated by r,
so drift in machine speed hits them alike. Per method: tok/s = new tokens / wall time (prefill
included) over all prompts of one repeat, median/min/max over repeats; speedup = median /
greedy's median; tau = new tokens per target forward after the prefill.

For eagle3kit's own methods, the ideal bound is what the cycle would give with no overhead
beyond drafting and verifying:

    ideal = tau * t_decode / (t_draft_cycle + t_verify)     (t_draft_cycle ~ k * t_draft)

with t_decode greedy's median step; `fraction` = speedup / ideal. The target's distinct-4 of
its own greedy output (distinct 4-grams / all 4-grams) sits beside tau: a target that loops is
easy to predict, and its tau says little about real text.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from eagle3kit.core.diversity import cross_prompt, distinct_ngram_ratio
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.progress import Progress, emit

METHODS = ("greedy", "prompt-lookup", "chain", "tree")  # also accepted: "hf-greedy"


def environment() -> dict[str, Any]:
    """Python, OS, CPU, threads, load average, torch and transformers versions."""
    import transformers  # noqa: F401  (so that the versions name it)

    from eagle3kit.core.environment import environment_info

    return environment_info()


def default_prompts(tokenizer: Any, n: int = 8) -> list[list[int]]:
    """Chat prompts from the zoo's held-out stdlib files ("Write the Python function ..."),
    rendered with the target's chat template up to the assistant turn."""
    from eagle3kit.data.regenerate import chat_prompt_ids
    from eagle3kit.zoo.corpus import chat_samples, files, spaced

    convs = spaced(chat_samples(files("lib", held_out=True)), n)
    return [chat_prompt_ids(tokenizer, c["messages"][:1]) for c in convs]


class _ForwardCounter:
    """Counts forward calls of an HF model (prompt lookup's target forwards)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.n = 0
        self._h = model.register_forward_hook(self._hook)

    def _hook(self, *_: Any) -> None:
        self.n += 1

    def close(self) -> None:
        self._h.remove()


def _run_lookup(
    target, ids: list[int], n_new: int, eos, lookup: int | None
) -> tuple[list[int], int]:
    """transformers' generate (assisted by prompt lookup when `lookup`): (new tokens, target
    forwards)."""
    count = _ForwardCounter(target.model)
    try:
        with torch.no_grad():
            out = target.model.generate(
                torch.tensor([ids], device=target.device),
                do_sample=False,
                max_new_tokens=n_new,
                prompt_lookup_num_tokens=lookup,
                eos_token_id=eos,
                pad_token_id=eos if eos is not None else 0,
            )[0, len(ids) :].tolist()
    finally:
        count.close()
    if eos is not None and eos in out:
        out = out[: out.index(eos)]
    return out, count.n


def _run(method, target, drafter, ids, cfg) -> dict[str, Any]:
    """One method on one prompt: tokens, seconds, target forwards after prefill, cycle stats."""
    from eagle3kit.decode import greedy_generate, speculative_generate

    eos = getattr(target.tokenizer, "eos_token_id", None)
    t0 = time.perf_counter()
    if method in (
        "prompt-lookup",
        "hf-greedy",
    ):  # hf-greedy: generate()'s own overhead, for reference
        lookup = cfg["lookup"] if method == "prompt-lookup" else None
        toks, fwd = _run_lookup(target, ids, cfg["max_new_tokens"], eos, lookup)
        return {"tokens": toks, "s": time.perf_counter() - t0, "forwards": fwd - 1, "stats": None}
    if method == "greedy":
        g = greedy_generate(target, ids, max_new_tokens=cfg["max_new_tokens"], eos_token_id=eos)
    else:
        tree = cfg["tree"] if method == "tree" else None
        g = speculative_generate(
            target,
            drafter,
            ids,
            max_new_tokens=cfg["max_new_tokens"],
            depth=cfg["tree_depth" if tree else "depth"],
            tree=tree,
            eos_token_id=eos,
        )
    return {
        "tokens": g.tokens,
        "s": g.stats.total_s,
        "forwards": len(g.stats.cycles),
        "stats": g.stats,
    }


def bench(
    target,
    drafter=None,
    prompts: list[list[int]] | None = None,
    *,
    repeats: int = 5,
    max_new_tokens: int = 128,
    depth: int = 4,
    tree=None,
    tree_depth: int = 5,
    lookup: int = 10,
    methods: tuple[str, ...] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Measure every method on `prompts` (module docstring); returns the JSON document."""
    from eagle3kit.decode import TreeShape

    if repeats < 1:
        raise Eagle3Error(f"repeats: expected >= 1, found {repeats}")
    prompts = prompts or default_prompts(target.tokenizer)
    names = list(methods or (METHODS if drafter is not None else METHODS[:2]))
    unknown = [m for m in names if m not in (*METHODS, "hf-greedy")]
    if unknown:
        raise Eagle3Error(f"bench: unknown methods {unknown}, expected some of {list(METHODS)}")
    if drafter is None and {"chain", "tree"} & set(names):
        raise Eagle3Error("bench: the chain and tree methods need --drafter")
    cfg = {
        "max_new_tokens": max_new_tokens,
        "depth": depth,
        "tree": tree or TreeShape(),
        "tree_depth": tree_depth,
        "lookup": lookup,
    }
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in names}
    done, total = 0, repeats * len(names) * len(prompts)
    for r in range(repeats):
        for m in names[r % len(names) :] + names[: r % len(names)]:
            for ids in prompts:
                runs[m].append({**_run(m, target, drafter, ids, cfg), "repeat": r})
                done += 1
                emit(progress, "bench", done, total, "runs", method=m)
    return _summarise(runs, names, prompts, repeats, cfg)


def _summarise(runs, names, prompts, repeats, cfg) -> dict[str, Any]:
    from eagle3kit.decode import DecodeStats

    greedy_tokens = [x["tokens"] for x in runs.get("greedy", [])[: len(prompts)]]
    steps = [c.verify_s for x in runs.get("greedy", []) for c in x["stats"].cycles]
    t_decode = statistics.median(steps) if steps else None
    methods = []
    for m in names:
        tps = []
        for r in range(repeats):
            rs = [x for x in runs[m] if x["repeat"] == r]
            tps.append(sum(len(x["tokens"]) for x in rs) / sum(x["s"] for x in rs))
        fwd = sum(x["forwards"] for x in runs[m])
        # tokens after the prefill's one, counting an EOS that ended a run (it cost a forward)
        ended = [len(x["tokens"]) < cfg["max_new_tokens"] for x in runs[m]]
        new = sum(len(x["tokens"]) + e - 1 for x, e in zip(runs[m], ended, strict=True))
        row = {
            "name": m,
            "tokens_per_s": {"median": statistics.median(tps), "min": min(tps), "max": max(tps)},
            "accept_len": new / fwd if fwd else 1.0,
        }
        if greedy_tokens:
            row["same_tokens_as_greedy"] = all(
                x["tokens"] == greedy_tokens[i % len(prompts)] for i, x in enumerate(runs[m])
            )
        if m in ("chain", "tree"):
            pooled = DecodeStats(
                depth=cfg["depth"] if m == "chain" else cfg["tree_depth"], method=m
            )
            for x in runs[m]:
                pooled.cycles += x["stats"].cycles
            row.update(_bound(pooled, t_decode))
        methods.append(row)
    base = next((x["tokens_per_s"]["median"] for x in methods if x["name"] == "greedy"), None)
    for row in methods:
        row["speedup"] = row["tokens_per_s"]["median"] / base if base else None
        if "ideal_speedup" in row and row["speedup"] is not None:
            row["fraction_of_ideal"] = row["speedup"] / row["ideal_speedup"]
    return {
        "environment": environment(),
        "prompts": len(prompts),
        "repeats": repeats,
        "max_new_tokens": cfg["max_new_tokens"],
        "decode_ms": 1e3 * t_decode if t_decode else None,
        "target_distinct4": statistics.fmean(distinct_ngram_ratio(t, 4) for t in greedy_tokens)
        if greedy_tokens
        else None,
        # the canned-output check: do the target's answers depend on the prompt? (issue 22)
        "target_diversity": cross_prompt(greedy_tokens) if greedy_tokens else None,
        "methods": methods,
    }


def _bound(st, t_decode: float | None) -> dict[str, Any]:
    """tau and cycle times of our method, and the ideal speedup tau*t_decode/(draft+verify)."""
    draft, verify = st.mean_ms("draft_s"), st.mean_ms("verify_s")
    out = {
        "depth": st.depth,
        "tau": st.accept_len,
        "draft_ms": draft,
        "verify_ms": verify,
        "cycle_ms": st.mean_ms("cycle_s"),
        "per_position_acceptance": st.per_position_acceptance(),
    }
    if t_decode:
        out["ideal_speedup"] = st.accept_len * 1e3 * t_decode / (draft + verify)
    return out
