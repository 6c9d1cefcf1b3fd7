"""Side-by-side decoding speed on the same chat prompts: greedy, prompt lookup, chain, tree.

Every method decodes the same chat-templated prompts (never a random-completion loop: loops
inflate accept length), `repeats` times, through the shared timing harness
(measure/timing.py): prompt i of repeat r runs the methods in an order rotated by r + i, so
drift in machine speed hits them alike. Per method: tok/s = new tokens / wall time (prefill
included) over all prompts of one repeat, median/min/max over repeats; speedup = median /
greedy's median; tokens_per_forward = new tokens per target forward after the prefill (1
for greedy); tau_online = mean tokens emitted per cycle, for the speculative methods.

Prompt lookup runs twice: "lookup" is eagle3kit's own KV-cache loop (methods/lookup/decode.py, the
n-gram rule of transformers' PromptLookupCandidateGenerator), "lookup-hf" is transformers'
`generate(prompt_lookup_num_tokens=...)`: same method, two implementations, both reported.

For eagle3kit's own speculative methods (lookup, chain, tree), two bounds on the speedup:

    upper_bound           = tau_online * t_decode / t_verify                   (drafting free)
    bound_with_draft_cost = tau_online * t_decode / (t_draft_cycle + t_verify)  (drafting paid)

with t_decode greedy's median step and t_draft_cycle (~ k * t_draft), t_verify the method's
measured means per cycle: the first is what tau could give at best, the second what is left
once drafting is paid, so `fraction_of_bound` = speedup / bound_with_draft_cost measures the
loop's other overhead only. The target's distinct-4 of its own greedy output (distinct 4-grams
/ all 4-grams) sits beside tau: a target that loops is easy to predict, and its tau says
little about real text.

With each prompt's context length (`bench --context-lengths`: prompts built to each length,
data/long_prompts.py, interleaved), `by_length` summarises each length's runs as a bench of
their own, with their costs at every level measured at that length (`plan --from` prices
them per length, plan/by_length.py). Every row also carries `tokens_per_s_pooled` (all new
tokens / all wall seconds: the rate the cycle model prices) and, for eagle3kit's own loops,
`prefill_ms` and `new_tokens` (a speculative prefill includes the drafter's pass).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch

from eagle3kit.core import registry
from eagle3kit.core.artifacts import stamp
from eagle3kit.core.diversity import cross_prompt, distinct_ngram_ratio
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.progress import Progress

# the decoding loops a bench times (not method names: core/registry.py says which method each
# of our speculative loops runs); also accepted: "hf-greedy"
METHODS = ("greedy", "lookup", "lookup-hf", "chain", "tree")


def environment() -> dict[str, Any]:
    """Python, OS, CPU, threads, load average, torch and transformers versions."""
    import transformers  # noqa: F401  (so that the versions name it)

    from eagle3kit.core.environment import environment_info

    return environment_info()


def default_prompts(tokenizer: Any, n: int = 8) -> list[list[int]]:
    """Chat prompts from the zoo's held-out stdlib files ("Write the Python function ..."),
    rendered with the target's chat template up to the assistant turn; with the function's
    signature when the target is a zoo member trained on such requests."""
    from eagle3kit.data.regenerate import chat_prompt_ids
    from eagle3kit.zoo import signed_requests
    from eagle3kit.zoo.corpus import chat_samples, files, spaced

    signed = signed_requests(getattr(tokenizer, "name_or_path", None))
    convs = spaced(chat_samples(files("lib", held_out=True), signed=signed), n)
    return [chat_prompt_ids(tokenizer, c["messages"][:1]) for c in convs]


def data_prompts(path: str | Path, tokenizer: Any, n: int) -> tuple[list[list[int]], list[Any]]:
    """`--data`: (at most n chat prompts, the records skipped as unusable: `Problem`s).

    A DATA dir gives its held-out samples' prompts (as eval's online part). A file is read as
    `data prepare` reads conversations, except that a benchmark needs prompts only: a
    conversation without answers, or a {"prompt": "..."} row, is enough. Each prompt is the
    conversation up to its first assistant turn, with the target's chat template."""
    from eagle3kit.data.conversations import read_prompts
    from eagle3kit.data.regenerate import chat_prompt_ids

    p = Path(path)
    if p.is_dir():
        from eagle3kit.measure.evaluate import load_eval_data

        return load_eval_data(p, tokenizer).prompts[:n], []
    convs, skipped = read_prompts(p, n)
    out = []
    for c in convs:
        first = next(i for i, t in enumerate(c.turns) if t["role"] == "assistant")
        out.append(chat_prompt_ids(tokenizer, c.turns[:first]))
    return out, skipped


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


def _runners(names, target, drafter, cfg) -> dict[str, Any]:
    """The timing harness's runner of each method (measure/timing.py)."""
    from eagle3kit.measure import timing as T

    eos = getattr(target.tokenizer, "eos_token_id", None)
    n = cfg["max_new_tokens"]

    def lookup(method: str):
        k = cfg["lookup"] if method == "lookup-hf" else None  # hf-greedy: generate() alone

        def run(ids: list[int]) -> T.Timed:
            t0 = time.perf_counter()
            toks, fwd = _run_lookup(target, ids, n, eos, k)
            return T.Timed(toks, time.perf_counter() - t0, fwd - 1)

        return run

    out = {}
    for m in names:
        if m in ("lookup-hf", "hf-greedy"):
            out[m] = lookup(m)
        elif m == "lookup":
            out[m] = T.lookup_runner(target, n, eos, cfg["lookup"])
        elif m == "greedy":
            out[m] = T.plain_runner(target, n, eos)
        else:
            tree = cfg["tree"] if m == "tree" else None
            depth = cfg["tree_depth" if tree else "depth"]
            out[m] = T.spec_runner(target, drafter, n, eos, depth, tree)
    return out


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
    levels: tuple[int, ...] = (),
    lengths: list[int] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Measure every method on `prompts` (module docstring); returns the JSON document. With
    `levels`, also the costs `plan --methods` reads, at each concurrency level
    (measure/costs.py). With `lengths` (each prompt's context length: `bench
    --context-lengths`), also `by_length`: each length's prompts summarised alone, with their
    costs (`by_length`)."""
    from eagle3kit.decode import TreeShape
    from eagle3kit.measure import timing as T

    if repeats < 1:
        raise Eagle3Error(f"repeats: expected >= 1, found {repeats}")
    prompts = prompts or default_prompts(target.tokenizer)
    names = _method_names(methods, drafter)
    if drafter is not None:
        from eagle3kit.measure.costs import check_levels

        check_levels(drafter, levels)
    cfg = {
        "max_new_tokens": max_new_tokens,
        "depth": depth,
        "tree": tree or TreeShape(),
        "tree_depth": tree_depth,
        "lookup": lookup,
    }
    runners = _runners(names, target, drafter, cfg)
    runs = T.time_methods(runners, prompts, repeats, progress=progress, label="bench")
    doc = _summarise(runs, names, prompts, repeats, cfg)
    if drafter is not None:
        _name_draft_rows(doc, drafter.method)
    if lengths is not None:
        doc["by_length"] = by_length(
            target, drafter, prompts, runs, names=names, cfg=cfg, lengths=lengths, levels=levels
        )
        doc["lengths"] = sorted(set(lengths))
    elif levels:
        doc["costs"] = _costs(target, drafter, prompts, runs, doc, levels)
    return doc


def _method_names(methods: tuple[str, ...] | None, drafter) -> list[str]:
    """The rows to time: the given methods, else every one the drafter can run."""
    names = list(methods or (METHODS if drafter is not None else METHODS[:3]))
    if methods is None and drafter is not None and not registry.get(drafter.method).tree:
        names.remove("tree")  # DFlash blocks, P-EAGLE's one pass, MTP heads: a chain only
    unknown = [m for m in names if m not in (*METHODS, "hf-greedy")]
    if unknown:
        raise Eagle3Error(f"bench: unknown methods {unknown}, expected some of {list(METHODS)}")
    if drafter is None and {"chain", "tree"} & set(names):
        raise Eagle3Error("bench: the chain and tree methods need --drafter")
    return names


def _name_draft_rows(doc: dict[str, Any], method: str) -> None:
    """Which draft method the chain/tree rows ran (the label keys the loop's overhead cost)."""
    doc["method"] = method
    for row in doc["methods"]:
        if row["name"] in ("chain", "tree"):
            row["method"] = method
            row["label"] = method + (" (tree)" if row["name"] == "tree" else "")


def by_length(target, drafter, prompts, runs, *, names, cfg, lengths, levels) -> list[dict]:
    """One entry per context length: its prompts' runs summarised as a bench of their own
    (methods, decode step, the canned-output check) and their costs at each level (at least
    concurrency 1), measured at that length: what `plan` prices per length."""
    out = []
    for length in sorted(set(lengths)):
        mine = [i for i, n in enumerate(lengths) if n == length]
        sub = [x for x in runs if x.prompt in set(mine)]
        ps = [prompts[i] for i in mine]
        part = _summarise(sub, names, ps, max(x.repeat for x in sub) + 1, cfg)
        entry = {"context_length": length}
        entry |= {k: v for k, v in part.items() if k not in ("kind", "schema", "environment")}
        entry["costs"] = _costs(target, drafter, ps, sub, part, levels or (1,))
        out.append(entry)
    return out


def _costs(target, drafter, prompts, runs, doc, levels) -> dict[str, Any]:
    """The `costs` block `plan --methods` reads: level 1 from the loops, higher levels scaled
    by isolated batched forwards (measure/costs.py), the mean prefill and answer length."""
    from eagle3kit.measure import costs as C
    from eagle3kit.measure import timing as T

    level1 = C.loop_costs(runs, doc["methods"])
    stats = [x.stats for x in T.of(runs, "greedy")]
    if level1["plain_ms"] is None or not stats:
        raise Eagle3Error("bench: the costs need the greedy method (plain decoding's step)")
    return {
        "levels": C.level_table(target, drafter, prompts[0], levels, level1),
        "prefill_ms": 1e3 * statistics.fmean(s.prefill_s for s in stats),
        "new_tokens": statistics.fmean(s.new_tokens for s in stats),
    }


def _summarise(runs, names, prompts, repeats, cfg) -> dict[str, Any]:
    from eagle3kit.measure import timing as T

    greedy_tokens = [x.tokens for x in T.of(runs, "greedy") if x.repeat == 0]
    steps = T.step_times(runs, "greedy")
    t_decode = statistics.median(steps) if steps else None
    methods = []
    for m in names:
        tps, mine = T.tokens_per_s(runs, m), T.of(runs, m)
        fwd = sum(x.forwards for x in mine)
        # tokens after the prefill's one, counting an EOS that ended a run (it cost a forward)
        new = sum(len(x.tokens) + (len(x.tokens) < cfg["max_new_tokens"]) - 1 for x in mine)
        row = {
            "name": m,
            "tokens_per_s": T.spread(tps),
            "tokens_per_s_pooled": sum(len(x.tokens) for x in mine) / sum(x.s for x in mine),
            "tokens_per_forward": new / fwd if fwd else 1.0,
        }
        if all(x.stats is not None for x in mine):  # eagle3kit's own loops
            row["prefill_ms"] = 1e3 * statistics.fmean(x.stats.prefill_s for x in mine)
            row["new_tokens"] = statistics.fmean(x.stats.new_tokens for x in mine)
        if greedy_tokens:
            row["same_tokens_as_greedy"] = T.same_tokens(runs, m, "greedy")
        if m in ("lookup", "chain", "tree"):
            depth = {"lookup": cfg["lookup"], "chain": cfg["depth"]}.get(m, cfg["tree_depth"])
            st = T.pooled(runs, m, depth)
            row.update(_bound(st, t_decode))
            ran = registry.of_decoder(st.method) or registry.get(registry.DEFAULT)
            row["method"] = ran.name  # plan's method and label of the loop
            row["label"] = ran.name + (" (tree)" if m == "tree" else "")
        methods.append(row)
    base = next((x["tokens_per_s"]["median"] for x in methods if x["name"] == "greedy"), None)
    for row in methods:
        row["speedup"] = row["tokens_per_s"]["median"] / base if base else None
        if "bound_with_draft_cost" in row and row["speedup"] is not None:
            row["fraction_of_bound"] = row["speedup"] / row["bound_with_draft_cost"]
    doc = {
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
    return stamp(doc, "bench")


def _bound(st, t_decode: float | None) -> dict[str, Any]:
    """tau and cycle times of our method, and its two bounds (module docstring)."""
    draft, verify = st.mean_ms("draft_s"), st.mean_ms("verify_s")
    out = {
        "depth": st.depth,
        "tau_online": st.tau_online,
        "draft_ms": draft,
        "verify_ms": verify,
        "cycle_ms": st.mean_ms("cycle_s"),
        "per_position_acceptance": st.per_position_acceptance(),
        "cycles": len(st.cycles),
        "drafted_per_cycle": statistics.fmean(c.drafted for c in st.cycles) if st.cycles else 0,
    }
    if t_decode:
        out["upper_bound"] = st.tau_online * 1e3 * t_decode / verify
        out["bound_with_draft_cost"] = st.tau_online * 1e3 * t_decode / (draft + verify)
    return out
