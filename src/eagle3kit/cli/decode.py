"""CLI verbs: `eagle3kit generate | eval | bench` — speculative decoding and its measurements
(eagle3kit.decode, eagle3kit.measure.evaluate, eagle3kit.measure.bench)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from eagle3kit.cli._checks import heldout_amount, top_p
from eagle3kit.cli._decode_render import render_bench, render_eval
from eagle3kit.cli._options import (
    ByLength,
    ContextLengths,
    Device,
    Documents,
    JsonFlag,
    LengthsCommand,
    PromptSet,
    Seed,
)
from eagle3kit.core import registry
from eagle3kit.core.errors import bad

TARGET_HELP = "Target: a model dir, a hub id, or a zoo member (dsv3-v2, llama-v1-tiny)."
DRAFTER_HELP = "Drafter dir (any layout: SGLang, speculators/vLLM, EAGLE)."
DATA_HELP = "A DATA dir from `data prepare`, or a JSONL of conversations."
LIVE_URL_HELP = "Live: a speculative server (SGLang or vLLM), repeatable."
LIVE_BASE_HELP = "Live: the plain (no speculation) server to compare with."
LIVE_SUITE_HELP = (
    "Live: mt-bench,gsm8k,humaneval,math-500,chat (hub) or NAME=FILE; --prompts caps each."
)
LIVE_ENDPOINT_HELP = (
    "Live: chat (default), completions, or generate (SGLang's native endpoint); with "
    "context lengths: completions (default) or generate, the prompts sent as token ids."
)
LIVE_DEPTH_HELP = "Live: the drafter's trained depth (warns when the server's settings cap tau)."


def _load(target: str, drafter: str | None, device: str, threads: int | None, method: str):
    """(TargetModel, drafter) on `device`, torch using `threads` CPU threads when given; for
    --method mtp (or a head dir as --drafter) the drafter is an MTP head (model/loading.py
    `load_for`)."""
    from eagle3kit.model.loading import load_for

    if method not in METHODS:
        raise bad("--method", f"expected one of {', '.join(METHODS)}, found {method!r}")
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    return load_for(target, drafter, method, device=device)


def _check_depth(depth: int, option: str = "--depth") -> None:
    if depth < 1:
        raise bad(option, f"expected draft steps >= 1, found {depth}")


def _own_depth(d: object, given: int | None, fallback: int) -> int:
    """--depth when given, else the drafter's own (`default_depth`: a block drafter drafts
    its proposals per pass, B - 1, as z-lab's `dflash_generate` and vLLM's
    num_speculative_tokens = speculative_tokens do), else `fallback`."""
    if given is not None:
        return given
    own = getattr(d, "default_depth", None)
    return own if isinstance(own, int) and own >= 1 else fallback


def _output(r: dict, json_: bool, render) -> None:
    from eagle3kit.cli._render import emit_json

    if json_:
        emit_json(r)
    else:
        render(r)


def _tree(tree: bool, topk: int, budget: int):
    from eagle3kit.decode import TreeShape

    return TreeShape(topk, budget) if tree else None


# a drafter dir (its method read from the file), or the target's own head
METHODS = (registry.DEFAULT, registry.target_head().name)
Method = Annotated[
    str,
    typer.Option(
        "--method",
        help="eagle3 (--drafter: a drafter dir) or mtp (the target's own MTP head; --drafter: "
        "a head dir from `train --method mtp`).",
    ),
]
Target = Annotated[str, typer.Option("--target", help=TARGET_HELP)]
LocalTarget = Annotated[
    str,
    typer.Option(
        "--target",
        help=TARGET_HELP + " With --url: only with context lengths (its tokenizer cuts them).",
    ),
]
Drafter = Annotated[str, typer.Option("--drafter", help=DRAFTER_HELP)]
Threads = Annotated[int, typer.Option("--threads", min=1, help="torch CPU threads.")]
MaxNewTokens = Annotated[int, typer.Option("--max-new-tokens", min=1)]
LiveTemperature = Annotated[float, typer.Option("--temperature", help="Live: 0 = greedy.")]
Endpoint = Annotated[str, typer.Option("--endpoint", help=LIVE_ENDPOINT_HELP)]
Timeout = Annotated[float, typer.Option("--timeout", help="Live: bound on the whole run, s.")]

Prompt = Annotated[str, typer.Option("--prompt", help="Raw text (see --chat).")]
Chat = Annotated[bool, typer.Option("--chat", help="Wrap the prompt in the chat template.")]
GenDepth = Annotated[
    int,
    typer.Option(
        "--depth",
        min=1,
        help="Draft tokens per cycle (tree: depth); default: the drafter's own (a block "
        "drafter's proposals per pass), else 4.",
    ),
]
Tree = Annotated[bool, typer.Option("--tree", help="Draft a tree instead of a chain.")]
GenTopk = Annotated[int, typer.Option("--topk", min=1, help="Tree: children per expanded node.")]
GenBudget = Annotated[
    int, typer.Option("--budget", min=1, help="Tree: draft tokens sent to the target.")
]
Temperature = Annotated[float, typer.Option("--temperature", min=0.0, help="0 = greedy.")]
TopP = Annotated[float, typer.Option("--top-p", callback=top_p)]


def generate(
    *,
    target: Target,
    prompt: Prompt,
    drafter: Drafter = None,
    method: Method = "eagle3",
    chat: Chat = False,
    max_new_tokens: MaxNewTokens = 128,
    depth: GenDepth = None,
    tree: Tree = False,
    topk: GenTopk = 4,
    budget: GenBudget = 16,
    temperature: Temperature = 0.0,
    top_p: TopP = 1.0,
    seed: Seed = 0,
    device: Device = "cpu",
    threads: Threads = None,
    json_: JsonFlag = False,
) -> None:
    """Generate with speculative decoding; streams the text, ends with tau and tok/s."""
    from eagle3kit.data.regenerate import chat_prompt_ids
    from eagle3kit.decode import Sampling, speculative_generate

    if not prompt:
        raise bad("--prompt", "expected some text, found an empty prompt")
    if depth is not None:
        _check_depth(depth)
    if drafter is None and method in METHODS and not registry.get(method).target_head:
        raise bad("--drafter", f"expected a drafter dir (or --method {METHODS[1]}), found none")
    tm, d = _load(target, drafter, device, threads, method)
    depth = _own_depth(d, depth, 4)
    tok = tm.tokenizer
    if tok is None:
        raise typer.BadParameter("the target has no tokenizer", param_hint="--target")
    user = [{"role": "user", "content": prompt}]
    ids = chat_prompt_ids(tok, user) if chat else tok(prompt)["input_ids"]
    if not ids:
        raise bad("--prompt", f"expected text that makes at least one token, found {prompt!r}")
    stream = None if json_ else _Streamer(tok)
    g = speculative_generate(
        tm,
        d,
        ids,
        max_new_tokens=max_new_tokens,
        depth=depth,
        tree=_tree(tree, topk, budget),
        sampling=Sampling(temperature, top_p),
        eos_token_id=tok.eos_token_id,
        seed=seed,
        on_tokens=stream,
    )
    _show_generation(g, tok.decode(g.tokens), json_)


def _show_generation(g, text: str, json_: bool) -> None:
    """generate's ending: the JSON document, or tau and tok/s on stderr after the stream."""
    if json_:
        from eagle3kit.cli._render import emit_json
        from eagle3kit.core.artifacts import stamp

        doc = {
            "prompt_ids": g.prompt_ids,
            "tokens": g.tokens,
            "text": text,
            "tau_online": g.stats.tau_online,
            "tokens_per_s": g.stats.tokens_per_s,
            "stats": g.stats.summary(),
        }
        emit_json(stamp(doc, "generate"))
        return
    s = g.stats
    print(
        f"\n\ntau_online {s.tau_online:.2f}  {s.tokens_per_s:.1f} tok/s  ({s.new_tokens} tokens, "
        f"{len(s.cycles)} cycles, draft {s.mean_ms('draft_s'):.2f} ms + verify "
        f"{s.mean_ms('verify_s'):.2f} ms per cycle)",
        file=sys.stderr,
    )


EvalData = Annotated[Path, typer.Option("--data", help=DATA_HELP)]
Features = Annotated[
    Path,
    typer.Option(
        "--features",
        help="Offline from a feature store (`data capture`, in-process or --engine) "
        "instead of --data: no target loaded (--target: where its embedding is read).",
    ),
]
EvalHeldout = Annotated[
    str,
    typer.Option(
        "--heldout",
        callback=heldout_amount,
        help="Samples scored: a count (32) or fraction (0.05) of the split by sample id; "
        "default: DATA's 5% split, or the whole store when it was captured from held-out data.",
    ),
]
Online = Annotated[bool, typer.Option("--online", help="Also decode for real: tau, tok/s.")]
EvalDepth = Annotated[int, typer.Option("--depth", help="Draft steps (chain depth).")]
OnlineMaxNewTokens = Annotated[
    int, typer.Option("--max-new-tokens", min=1, help="Online: per prompt.")
]
EvalRepeats = Annotated[
    int, typer.Option("--repeats", min=1, help="Online: repeats (median/min/max).")
]
Limit = Annotated[int, typer.Option("--limit", min=1, help="Online: at most this many prompts.")]
EvalUrl = Annotated[list[str], typer.Option("--url", help=LIVE_URL_HELP + " With --online.")]
EvalSuite = Annotated[
    str, typer.Option("--suite", help=LIVE_SUITE_HELP.replace("--prompts", "--limit"))
]


def eval_(
    *,
    target: LocalTarget = None,
    drafter: Drafter = None,
    method: Method = "eagle3",
    data: EvalData = None,
    features: Features = None,
    heldout: EvalHeldout = None,
    online: Online = False,
    depth: EvalDepth = 3,
    max_new_tokens: OnlineMaxNewTokens = 128,
    repeats: EvalRepeats = 3,
    limit: Limit = 20,
    device: Device = "cpu",
    threads: Threads = None,
    json_: JsonFlag = False,
    url: EvalUrl = None,
    suite: EvalSuite = None,
    temperature: LiveTemperature = 0.0,
    endpoint: Endpoint = None,
    timeout: Timeout = 600.0,
    by_length: ByLength = None,
    documents: Documents = None,
    prompt_set: PromptSet = "all",
    seed: Seed = 0,
) -> None:
    """Acceptance offline (teacher-forced, held-out) and, with --online, real decoding;
    with --online --url, on running SGLang/vLLM servers (docs/live.md); with --by-length,
    per context bucket."""
    lengths = _lengths(by_length, "--by-length")
    if url:
        from eagle3kit.cli import live

        return live.run_eval(
            live.LiveOptions(
                urls=url,
                baseline_url=None,
                suite=suite,
                data=data,
                prompts=limit,
                max_new_tokens=max_new_tokens,
                repeats=repeats,
                endpoint=endpoint,
                timeout=timeout,
                json_=json_,
                temperature=temperature,
                depth=depth,
                lengths=lengths,
                target=target,
                documents=documents,
                prompt_set=prompt_set,
                seed=seed,
            ),
            online,
        )
    _check_depth(depth)
    if drafter is None and not (method in METHODS and registry.get(method).target_head):
        raise typer.BadParameter(
            f"expected --drafter (or --method {METHODS[1]}, or --online --url)"
        )
    if features is not None:
        if lengths:
            raise bad("--by-length", "expected --data or --online with it, found --features")
        extra = data is not None or online
        return _eval_features(
            drafter,
            features,
            depth,
            target=target,
            heldout=heldout,
            device=device,
            json_=json_,
            method=method,
            extra=extra,
        )
    if lengths:
        o = (lengths, limit, documents, prompt_set, seed, max_new_tokens, "--by-length")
        tm, d = _load_for_lengths(target, drafter, device, threads, method)
        return _eval_lengths(
            tm,
            d,
            o,
            data=data,
            heldout=heldout,
            online=online,
            depth=depth,
            repeats=repeats,
            json_=json_,
        )
    if target is None or data is None:
        raise bad("eval", "expected --target and --data (or --features STORE)")
    tm, d = _load(target, drafter, device, threads, method)
    _eval_local(
        tm,
        d,
        data,
        heldout=heldout,
        depth=depth,
        online=online,
        max_new=max_new_tokens,
        repeats=repeats,
        limit=limit,
        json_=json_,
    )


def _load_for_lengths(target, drafter, device, threads, method):
    if target is None:
        raise bad("eval", "expected --target with --by-length")
    return _load(target, drafter, device, threads, method)


def _eval_lengths(tm, d, prompt_options: tuple, **kw) -> None:
    """`eval --by-length`: acceptance per context bucket (cli/_lengths.py)."""
    from eagle3kit.cli._lengths import PromptOptions, eval_by_length, render_eval_lengths

    r = eval_by_length(tm, d, PromptOptions(*prompt_options), **kw)
    return _output(r, kw["json_"], render_eval_lengths)


def _eval_features(drafter, features, depth, *, target, heldout, device, json_, method, extra):
    """`eval --features STORE`: offline acceptance from a feature store, no target run."""
    from eagle3kit.cli._progress import bar
    from eagle3kit.measure.evaluate import evaluate_store

    rec = registry.get(method)
    if drafter is None or not rec.store_eval:
        why = rec.why_not.get("store_eval", "its drafter is not in a feature store")
        raise bad("--features", f"{method}: expected --data ({why})")
    if extra:
        raise bad("eval --features", "offline only, and without --data")
    with bar(not json_) as progress:
        r = evaluate_store(
            drafter,
            features,
            depth,
            target=target,
            heldout=heldout,
            device=device,
            progress=progress,
        )
    _output(r, json_, render_eval)


def _eval_local(tm, d, data, *, heldout, depth, online, max_new, repeats, limit, json_):
    """`eval --target --data`: offline acceptance, and online decoding with --online."""
    from eagle3kit.cli._progress import bar
    from eagle3kit.measure.evaluate import evaluate, load_eval_data

    kw = {} if heldout is None else {"heldout": heldout}
    ev = load_eval_data(data, tm.tokenizer, vocab_size=tm.vocab_size, **kw)
    with bar(not json_) as progress:
        r = evaluate(
            tm,
            d,
            ev,
            depth,
            online=online,
            max_new_tokens=max_new,
            repeats=repeats,
            limit=limit,
            progress=progress,
        )
    _output(r, json_, render_eval)


BenchData = Annotated[
    Path, typer.Option("--data", help=DATA_HELP + " Default: built-in chat prompts.")
]
Prompts = Annotated[int, typer.Option("--prompts", min=1, help="At most this many prompts.")]
BenchRepeats = Annotated[int, typer.Option("--repeats", min=1)]
BenchDepth = Annotated[
    int,
    typer.Option(
        "--depth",
        min=1,
        help="Chain depth; default: the drafter's own (a block drafter's), else 4.",
    ),
]
TreeDepth = Annotated[int, typer.Option("--tree-depth", min=1)]
BenchTopk = Annotated[int, typer.Option("--topk", min=1)]
BenchBudget = Annotated[int, typer.Option("--budget", min=1)]
Lookup = Annotated[
    int,
    typer.Option(
        "--lookup", min=1, help="Prompt lookup's drafts per cycle (prompt_lookup_num_tokens)."
    ),
]
BenchUrl = Annotated[list[str], typer.Option("--url", help=LIVE_URL_HELP)]
BaselineUrl = Annotated[str, typer.Option("--baseline-url", help=LIVE_BASE_HELP)]
BenchSuite = Annotated[str, typer.Option("--suite", help=LIVE_SUITE_HELP)]
Concurrency = Annotated[
    str,
    typer.Option(
        "--concurrency",
        help="Levels, e.g. 1,4,16. Live: each level's requests run that many at a time; "
        "in-process: the costs plan --methods reads, measured at each level.",
    ),
]
DrafterDepth = Annotated[int, typer.Option("--drafter-depth", help=LIVE_DEPTH_HELP)]


def bench_(
    *,
    target: LocalTarget = None,
    drafter: Drafter = None,
    method: Method = "eagle3",
    data: BenchData = None,
    prompts: Prompts = 8,
    repeats: BenchRepeats = 5,
    max_new_tokens: MaxNewTokens = 128,
    depth: BenchDepth = None,
    tree_depth: TreeDepth = 5,
    topk: BenchTopk = 4,
    budget: BenchBudget = 16,
    lookup: Lookup = 10,
    device: Device = "cpu",
    threads: Threads = None,
    json_: JsonFlag = False,
    url: BenchUrl = None,
    baseline_url: BaselineUrl = None,
    suite: BenchSuite = None,
    concurrency: Concurrency = "1",
    temperature: LiveTemperature = 0.0,
    endpoint: Endpoint = None,
    timeout: Timeout = 600.0,
    drafter_depth: DrafterDepth = None,
    context_lengths: ContextLengths = None,
    documents: Documents = None,
    prompt_set: PromptSet = "all",
    seed: Seed = 0,
) -> None:
    """Greedy vs prompt lookup vs chain vs tree on the same chat prompts (rotating order);
    with --url, an interleaved A/B of running SGLang/vLLM servers (docs/live.md); with
    --context-lengths, prompts built to each length and every figure per length."""
    lengths = _lengths(context_lengths, "--context-lengths")
    if url:
        from eagle3kit.cli import live

        return live.run(
            live.LiveOptions(
                urls=url,
                baseline_url=baseline_url,
                suite=suite,
                data=data,
                prompts=prompts,
                max_new_tokens=max_new_tokens,
                repeats=repeats,
                endpoint=endpoint,
                timeout=timeout,
                json_=json_,
                temperature=temperature,
                concurrency=concurrency,
                depth=drafter_depth,
                lengths=lengths,
                target=target,
                documents=documents,
                prompt_set=prompt_set,
                seed=seed,
            )
        )
    if target is None:
        raise typer.BadParameter("expected --target (in-process) or --url (live servers)")
    from eagle3kit.cli._progress import bar
    from eagle3kit.decode import TreeShape
    from eagle3kit.measure.bench import bench

    if depth is not None:
        _check_depth(depth)
    _check_depth(tree_depth, "--tree-depth")
    tm, d = _load(target, drafter, device, threads, method)
    kw = {
        "repeats": repeats,
        "max_new_tokens": max_new_tokens,
        "depth": _own_depth(d, depth, 4),
        "tree": TreeShape(topk, budget),
        "tree_depth": tree_depth,
        "lookup": lookup,
        "levels": _levels(concurrency),
    }
    if lengths:
        from eagle3kit.cli._lengths import PromptOptions, bench_by_length, render_bench_lengths

        if data is not None:
            raise bad("--data", "expected --documents with --context-lengths, found --data")
        o = PromptOptions(
            lengths, prompts, documents, prompt_set, seed, max_new_tokens, "--context-lengths"
        )
        return _output(bench_by_length(tm, d, o, kw, json_), json_, render_bench_lengths)
    ps = _bench_prompts(data, tm.tokenizer, prompts)
    with bar(not json_) as progress:
        r = bench(tm, d, ps, **kw, progress=progress)
    _output(r, json_, render_bench)


def _bench_prompts(data: Path | None, tokenizer, n: int) -> list:
    """The prompts of `bench`: --data's (skipped ones reported) or the built-in chat prompts."""
    from eagle3kit.measure.bench import data_prompts, default_prompts

    if data is None:
        return default_prompts(tokenizer, n)
    from eagle3kit.cli.live import warn_skipped

    ps, skipped = data_prompts(data, tokenizer, n)
    warn_skipped(data, skipped)
    return ps


def _lengths(text: str | None, option: str) -> tuple[int, ...] | None:
    """The context lengths an option names (None: not given)."""
    from eagle3kit.data.long_prompts import parse_lengths

    return None if text is None else parse_lengths(text, option)


def _levels(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise typer.BadParameter(f"expected levels >= 1 such as 1,4,16, found {text!r}")
    return out


def register(app: typer.Typer) -> None:
    app.command("generate")(generate)
    app.command("eval", cls=LengthsCommand)(eval_)
    app.command("bench")(bench_)


class _Streamer:
    """Print new text as it comes (decoding the whole continuation keeps merges right)."""

    def __init__(self, tok) -> None:
        self.tok, self.ids, self.shown = tok, [], ""

    def __call__(self, new: list[int]) -> None:
        self.ids += new
        text = self.tok.decode(self.ids)
        sys.stdout.write(text[len(self.shown) :])
        sys.stdout.flush()
        self.shown = text
