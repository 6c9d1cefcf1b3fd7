"""`eval --by-length` and `bench --context-lengths` in process: the prompts built to each
length (data/long_prompts.py), the measurement per bucket (measure/by_length.py,
measure/bench.py), and their tables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3kit.core.errors import bad


@dataclass(frozen=True)
class PromptOptions:
    """Where the prompts of each length come from, and how many per length."""

    lengths: tuple[int, ...]
    per_length: int
    documents: Path | None
    prompt_set: str
    seed: int
    new_tokens: int
    option: str  # the verb's option naming the lengths, for the refusals


def build_prompts(tm, o: PromptOptions) -> tuple[list, str]:
    """(the prompts, interleaved: prompt i of every length before prompt i + 1; their source)."""
    from eagle3kit.data.long_prompts import long_prompts
    from eagle3kit.measure.by_length import interleaved

    ps, src = long_prompts(
        tm.tokenizer,
        o.lengths,
        o.per_length,
        prompts_file=o.documents,
        which=o.prompt_set,
        seed=o.seed,
        new_tokens=o.new_tokens,
        max_positions=getattr(tm.config, "max_position_embeddings", None),
        option=o.option,
    )
    return interleaved(ps), src


def eval_by_length(tm, d, o: PromptOptions, *, data, heldout, online, depth, repeats, json_):
    """Offline: DATA's positions bucketed; online: prompts built to each length decoded."""
    from eagle3kit.cli._progress import bar
    from eagle3kit.measure import by_length as BL

    if online and data is not None:
        raise bad(
            "--data",
            "expected no --data with --by-length --online (the prompts are "
            "built from --documents or the zoo's files); run the offline buckets alone",
        )
    if not online and data is None:
        raise bad(
            "--by-length",
            "expected --data (offline buckets) or --online (prompts built to each length)",
        )
    if not online and o.documents is not None:
        raise bad("--documents", "expected --online with it (offline reads --data)")
    with bar(not json_) as progress:
        if online:
            ps, src = build_prompts(tm, o)
            r = BL.online_by_length(
                tm,
                d,
                ps,
                depth,
                max_new_tokens=o.new_tokens,
                repeats=repeats,
                source=src,
                progress=progress,
            )
        else:
            from eagle3kit.measure.evaluate import load_eval_data

            kw = {} if heldout is None else {"heldout": heldout}
            ev = load_eval_data(data, tm.tokenizer, vocab_size=tm.vocab_size, **kw)
            r = BL.evaluate_by_length(tm, d, ev, depth, o.lengths, progress=progress)
    return r


def bench_by_length(tm, d, o: PromptOptions, kw: dict[str, Any], json_: bool) -> dict:
    """`bench --context-lengths`: every method on the prompts of every length, one run."""
    from eagle3kit.cli._progress import bar
    from eagle3kit.measure.bench import bench

    ps, src = build_prompts(tm, o)
    with bar(not json_) as progress:
        r = bench(
            tm,
            d,
            [list(p.ids) for p in ps],
            lengths=[p.length for p in ps],
            progress=progress,
            **kw,
        )
    r["prompt_source"] = src
    return r


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def render_eval_lengths(r: dict) -> None:
    """One row per bucket: tau (walked or online), per-position acceptance, and online the
    speeds, lossless and the offline walk's gap."""
    from rich.table import Table

    from eagle3kit.cli._render import out

    online = r["mode"] == "online"
    tau = "tau_online" if online else "tau_walk"
    t = Table(title=f"{r['mode']} eval by context length, depth {r['depth']}")
    cols = ["context", "prompts" if online else "positions", tau, "P(a >= i)"]
    cols += ["tok/s", "speedup", "decode ms", "cycle ms", "gap"] if online else ["cycles"]
    for c in cols:
        t.add_column(c)
    for e in r["by_length"]:
        pp = " ".join(f"{p:.2f}" for p in e["per_position_acceptance"] or [])
        row = [str(e["context_length"]), str(e["prompts" if online else "positions"])]
        row += [_f(e[tau]), pp]
        if online:
            gap = e.get("offline_online_gap")
            row += [
                _f(e["tokens_per_s"], ".1f"),
                _f(e["speedup"]),
                _f(e["decode_ms"]),
                _f(e["cycle_ms"]),
                "-" if gap is None else f"{100 * gap:+.1f}%",
            ]
        else:
            row.append(str(e["cycles"]))
        t.add_row(*row)
    c = out()
    c.print(t)
    for w in r.get("warnings") or []:
        c.print(f"  [yellow]warning[/]: {w}")


def render_bench_lengths(r: dict) -> None:
    """One row per length and method: tok/s, speedup, tau, and the step and cycle times."""
    from rich.table import Table

    from eagle3kit.cli._render import out

    t = Table(title=f"bench by context length ({r.get('prompt_source', '')})")
    for c in ("context", "method", "tok/s", "speedup", "tau", "decode ms", "cycle ms", "prefill"):
        t.add_column(c)
    for e in r["by_length"]:
        for m in e["methods"]:
            t.add_row(
                str(e["context_length"]),
                m["name"],
                _f(m["tokens_per_s"]["median"], ".1f"),
                _f(m["speedup"]),
                _f(m.get("tau_online")),
                _f(e["decode_ms"]),
                _f(m.get("cycle_ms")),
                _f(m.get("prefill_ms"), ".1f"),
            )
    out().print(t)
