"""CLI verbs: `eagle3kit generate | eval | bench` — speculative decoding and its measurements
(eagle3kit.decode, eagle3kit.measure.evaluate, eagle3kit.measure.bench)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated

import typer

from eagle3kit.cli._checks import check_device, heldout_amount, top_p
from eagle3kit.cli._command import command
from eagle3kit.cli._decode_render import render_bench, render_eval
from eagle3kit.cli._options import Device, JsonFlag, LengthsCommand, Seed
from eagle3kit.cli.decode_options import (
    DRAFTER_HELP,
    METHOD_HELP,
    TARGET_HELP,
    THREADS_HELP,
    BenchOptions,
    EvalOptions,
)
from eagle3kit.core import registry
from eagle3kit.core.errors import bad


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
Method = Annotated[str, typer.Option("--method", help=METHOD_HELP)]
Target = Annotated[str, typer.Option("--target", help=TARGET_HELP)]
Drafter = Annotated[str, typer.Option("--drafter", help=DRAFTER_HELP)]
Threads = Annotated[int, typer.Option("--threads", min=1, help=THREADS_HELP)]
MaxNewTokens = Annotated[int, typer.Option("--max-new-tokens", min=1)]

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
    ids = _prompt_ids(tok, prompt, chat)
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


def _prompt_ids(tok, prompt: str, chat: bool) -> list[int]:
    """generate's prompt as token ids (in the chat template with --chat)."""
    from eagle3kit.data.regenerate import chat_prompt_ids

    if tok is None:
        raise typer.BadParameter("the target has no tokenizer", param_hint="--target")
    user = [{"role": "user", "content": prompt}]
    ids = chat_prompt_ids(tok, user) if chat else tok(prompt)["input_ids"]
    if not ids:
        raise bad("--prompt", f"expected text that makes at least one token, found {prompt!r}")
    return ids


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


def _path(p: str | None) -> Path | None:
    return None if p is None else Path(p)


def _target_head(method: str) -> bool:
    """--method names the target's own head (mtp): no --drafter needed."""
    return method in METHODS and registry.get(method).target_head


def eval_(o: EvalOptions) -> None:
    """Acceptance offline (teacher-forced, held-out) and, with --online, real decoding;
    with --online --url, on running SGLang/vLLM servers (docs/live.md); with --by-length,
    per context bucket."""
    check_device(o.device)
    o = dataclasses.replace(o, heldout=heldout_amount(o.heldout))
    lengths = _lengths(o.by_length, "--by-length")
    if o.url:
        from eagle3kit.cli import live

        lo = live.LiveOptions.of(o, urls=o.url, prompts=o.limit, depth=o.depth, lengths=lengths)
        return live.run_eval(lo, o.online)
    _check_depth(o.depth)
    if o.drafter is None and not _target_head(o.method):
        raise typer.BadParameter(
            f"expected --drafter (or --method {METHODS[1]}, or --online --url)"
        )
    if o.features is not None:
        return _eval_features(o, lengths)
    if lengths:
        return _eval_lengths(o, lengths)
    if o.target is None or o.data is None:
        raise bad("eval", "expected --target and --data (or --features STORE)")
    _eval_local(o)


def _eval_lengths(o: EvalOptions, lengths: tuple[int, ...]) -> None:
    """`eval --by-length`: acceptance per context bucket (cli/_lengths.py)."""
    from eagle3kit.cli._lengths import PromptOptions, eval_by_length, render_eval_lengths

    if o.target is None:
        raise bad("eval", "expected --target with --by-length")
    tm, d = _load(o.target, o.drafter, o.device, o.threads, o.method)
    prompts = PromptOptions(
        lengths, o.limit, _path(o.documents), o.prompt_set, o.seed, o.max_new_tokens, "--by-length"
    )
    r = eval_by_length(
        tm,
        d,
        prompts,
        data=_path(o.data),
        heldout=o.heldout,
        online=o.online,
        depth=o.depth,
        repeats=o.repeats,
        json_=o.json_,
    )
    return _output(r, o.json_, render_eval_lengths)


def _eval_features(o: EvalOptions, lengths: tuple[int, ...] | None) -> None:
    """`eval --features STORE`: offline acceptance from a feature store, no target run."""
    from eagle3kit.cli._progress import bar
    from eagle3kit.measure.evaluate import evaluate_store

    if lengths:
        raise bad("--by-length", "expected --data or --online with it, found --features")
    rec = registry.get(o.method)
    if o.drafter is None or not rec.store_eval:
        why = rec.why_not.get("store_eval", "its drafter is not in a feature store")
        raise bad("--features", f"{o.method}: expected --data ({why})")
    if o.data is not None or o.online:
        raise bad("eval --features", "offline only, and without --data")
    with bar(not o.json_) as progress:
        r = evaluate_store(
            o.drafter,
            Path(o.features),
            o.depth,
            target=o.target,
            heldout=o.heldout,
            device=o.device,
            progress=progress,
        )
    _output(r, o.json_, render_eval)


def _eval_local(o: EvalOptions) -> None:
    """`eval --target --data`: offline acceptance, and online decoding with --online."""
    from eagle3kit.cli._progress import bar
    from eagle3kit.measure.evaluate import evaluate, load_eval_data

    tm, d = _load(o.target, o.drafter, o.device, o.threads, o.method)
    kw = {} if o.heldout is None else {"heldout": o.heldout}
    ev = load_eval_data(Path(o.data), tm.tokenizer, vocab_size=tm.vocab_size, **kw)
    with bar(not o.json_) as progress:
        r = evaluate(
            tm,
            d,
            ev,
            o.depth,
            online=o.online,
            max_new_tokens=o.max_new_tokens,
            repeats=o.repeats,
            limit=o.limit,
            progress=progress,
        )
    _output(r, o.json_, render_eval)


def bench_(o: BenchOptions) -> None:
    """Greedy vs prompt lookup vs chain vs tree on the same chat prompts (rotating order);
    with --url, an interleaved A/B of running SGLang/vLLM servers (docs/live.md); with
    --context-lengths, prompts built to each length and every figure per length."""
    check_device(o.device)
    lengths = _lengths(o.context_lengths, "--context-lengths")
    if o.url:
        from eagle3kit.cli import live

        depth = o.drafter_depth
        live.run(
            live.LiveOptions.of(o, urls=o.url, prompts=o.prompts, depth=depth, lengths=lengths)
        )
        return
    if o.target is None:
        raise typer.BadParameter("expected --target (in-process) or --url (live servers)")
    if o.depth is not None:
        _check_depth(o.depth)
    _check_depth(o.tree_depth, "--tree-depth")
    tm, d = _load(o.target, o.drafter, o.device, o.threads, o.method)
    kw = _bench_settings(o, d)
    if lengths:
        return _bench_lengths(tm, d, o, lengths, kw)
    from eagle3kit.cli._progress import bar
    from eagle3kit.measure.bench import bench

    ps = _bench_prompts(_path(o.data), tm.tokenizer, o.prompts)
    with bar(not o.json_) as progress:
        r = bench(tm, d, ps, **kw, progress=progress)
    _output(r, o.json_, render_bench)


def _bench_settings(o: BenchOptions, d: object) -> dict:
    """The decode settings every in-process bench run shares (measure/bench.py `bench`)."""
    from eagle3kit.decode import TreeShape

    return {
        "repeats": o.repeats,
        "max_new_tokens": o.max_new_tokens,
        "depth": _own_depth(d, o.depth, 4),
        "tree": TreeShape(o.topk, o.budget),
        "tree_depth": o.tree_depth,
        "lookup": o.lookup,
        "levels": _levels(o.concurrency),
    }


def _bench_lengths(tm, d, o: BenchOptions, lengths: tuple[int, ...], kw: dict) -> None:
    """`bench --context-lengths`: every method on prompts built to each length."""
    from eagle3kit.cli._lengths import PromptOptions, bench_by_length, render_bench_lengths

    if o.data is not None:
        raise bad("--data", "expected --documents with --context-lengths, found --data")
    prompts = PromptOptions(
        lengths,
        o.prompts,
        _path(o.documents),
        o.prompt_set,
        o.seed,
        o.max_new_tokens,
        "--context-lengths",
    )
    r = bench_by_length(tm, d, prompts, kw, o.json_)
    _output(r, o.json_, render_bench_lengths)


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
    app.command("eval", cls=LengthsCommand)(command(EvalOptions, eval_))
    app.command("bench")(command(BenchOptions, bench_))


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
