"""`eagle3kit bench --url ...`: the live A/B against running servers (eagle3kit.live)."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3kit.core.errors import Eagle3Error


@dataclass(frozen=True)
class LiveOptions:
    """A run against live servers (`bench --url`, `eval --online --url`, `probe --url`): the
    command's options, as given (`LiveOptions.of` the verb's options object)."""

    urls: list[str]
    suite: str | None
    data: str | Path | None
    prompts: int  # at most this many (per suite, and from --data)
    max_new_tokens: int
    repeats: int
    endpoint: str | None  # None: completions for prompts built to lengths, else chat
    timeout: float
    json_: bool
    baseline_url: str | None = None
    temperature: float = 0.0
    concurrency: str = "1"
    depth: int | None = None  # the drafter's depth, when the server does not say it
    lengths: tuple[int, ...] | None = None  # --context-lengths / --by-length
    target: str | None = None  # whose tokenizer cuts the prompts to those lengths
    documents: str | Path | None = None
    prompt_set: str = "all"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.endpoint is None:
            object.__setattr__(self, "endpoint", "completions" if self.lengths else "chat")

    @classmethod
    def of(
        cls,
        o: Any,
        *,
        urls: list[str],
        prompts: int,
        depth: int | None,
        lengths: tuple[int, ...] | None,
    ) -> LiveOptions:
        """The live run of a verb's options object `o` (cli/decode_options.py `EvalOptions`,
        `BenchOptions`, cli/probe_options.py `ProbeOptions`): every field `o` has by the same
        name as it is (one the verb lacks, as probe's --temperature, at its default here);
        the four each verb names its own way as given: the servers, the prompt cap (--limit,
        --prompts, --samples), the drafter's depth (bench: --drafter-depth) and the context
        lengths, parsed."""
        own = {"urls": urls, "prompts": prompts, "depth": depth, "lengths": lengths}
        names = [f.name for f in dataclasses.fields(cls) if f.name not in own]
        same = {name: getattr(o, name) for name in names if hasattr(o, name)}
        return cls(**same, **own)


def parse_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise Eagle3Error(f"--concurrency: expected levels like 1,4,16, found {text!r}") from None
    if not levels or min(levels) < 1:
        raise Eagle3Error(f"--concurrency: expected levels >= 1, found {text!r}")
    return levels


def load_prompts(suite: str | None, data: Path | None, limit: int) -> list:
    from eagle3kit.live.suites import load_conversations, load_suites

    if suite is None and data is None:
        raise Eagle3Error("--suite or --data: expected one with --url (e.g. --suite mt-bench)")
    prompts = load_suites(suite, limit) if suite else []
    if data is not None:
        got, skipped = load_conversations(data, limit)
        warn_skipped(data, skipped)
        prompts += got
    return prompts


def warn_skipped(path: Path, skipped: list) -> None:
    """One warning line for the --data records left out, as `data prepare` reports them."""
    if skipped:
        from eagle3kit.data.conversations import summarise_reasons

        why = summarise_reasons(p.reason for p in skipped)
        print(
            f"warning: {path}: skipped {len(skipped)} unusable records ({why}), "
            f"first: {skipped[0]}",
            file=sys.stderr,
        )


def length_prompts(o: LiveOptions) -> tuple[list, dict[str, int]]:
    """Prompts built to each context length (data/long_prompts.py) with the served target's
    tokenizer, one suite per length ("ctx-L"), sent as token ids; {suite: length}."""
    from eagle3kit.data.long_prompts import long_prompts, served_target
    from eagle3kit.live.suites import Prompt

    if o.suite or o.data:
        raise Eagle3Error(
            "--context-lengths: expected --documents for the prompts, found --suite/--data"
        )
    tok, positions = served_target(o.target)
    ps, _ = long_prompts(
        tok,
        o.lengths,
        o.prompts,
        prompts_file=o.documents,
        which=o.prompt_set,
        seed=o.seed,
        new_tokens=o.max_new_tokens,
        max_positions=positions,
        option="--context-lengths",
    )
    ps = sorted(ps, key=lambda p: (p.index, p.length))
    out = [
        Prompt(f"ctx-{p.length}", f"{p.length}-{p.index}", (tok.decode(list(p.ids)),), tuple(p.ids))
        for p in ps
    ]
    return out, {f"ctx-{n}": n for n in o.lengths}


def _config(o: LiveOptions):
    from eagle3kit.live.bench import LiveConfig

    if o.lengths:
        prompts, lengths = length_prompts(o)
    else:
        prompts, lengths = load_prompts(o.suite, Path(o.data) if o.data else None, o.prompts), {}
    return LiveConfig(
        prompts=prompts,
        lengths=lengths,
        max_tokens=o.max_new_tokens,
        temperature=o.temperature,
        repeats=o.repeats,
        concurrency=parse_levels(o.concurrency),
        endpoint=o.endpoint,
        timeout=o.timeout,
        depth=o.depth,
    )


def _said(info) -> None:
    from eagle3kit.cli._render import err

    spec = info.speculative
    what = f"{spec['algorithm']} ({spec['num_steps']} steps)" if spec else "no speculation"
    err().print(f"{info.url}: {info.engine} {info.version or ''} serving {info.model}, {what}")


def _lines(r: dict) -> None:
    for line in r["errors"]:
        print(f"error: {line}", file=sys.stderr)
    for line in r["warnings"]:
        print(f"warning: {line}", file=sys.stderr)


def run(o: LiveOptions) -> None:
    """`bench --url`: the live A/B; print or emit JSON. Exit 1 when nothing was measured."""
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json
    from eagle3kit.live.bench import run_live_bench

    cfg = _config(o)
    with bar(not o.json_) as progress:
        r = run_live_bench(o.urls, o.baseline_url, cfg, progress, _said)
    _lines(r)
    if o.json_:
        emit_json(r)
    else:
        render(r)
    if not r["deployments"]:
        import typer

        raise typer.Exit(1)


def run_eval(o: LiveOptions, online: bool) -> None:
    """`eval --online --url`: acceptance and speed of speculative servers, no baseline."""
    if not online:
        raise Eagle3Error("--url: measures online only (add --online)")
    run(o)


def run_probe(o: LiveOptions, url: str | None, reference_url: str | None) -> None:
    """`probe --url NEW --reference-url OLD`: the drafter's zero-shot tau on NEW vs OLD."""
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json, out
    from eagle3kit.live.probe import run_live_probe

    if not url or not reference_url:
        raise Eagle3Error("--url and --reference-url: expected both (NEW and OLD servers)")
    with bar(not o.json_) as progress:
        r = run_live_probe(url, reference_url, _config(o), o.baseline_url, progress, _said)
    _lines(r["bench"])
    if o.json_:
        return emit_json(r)
    render(r["bench"])
    c = out()
    for k, v in r["per_suite"].items():
        ret = f"{v['retention']:.0%}" if v["retention"] is not None else "-"
        c.print(f"  {k}: tau new {_n(v['new'])}, reference {_n(v['reference'])}, keeps {ret}")
    for why in r["reasons"]:
        c.print(f"  - {why}")
    c.print(f"[bold]verdict: {r['verdict']}[/]")


def _n(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _s(x: dict | None, fmt: str = ".1f") -> str:
    if not x:
        return "-"
    return f"{x['median']:{fmt}} ({x['min']:{fmt}}-{x['max']:{fmt}})"


def _tau(acc: dict | None) -> str:
    if not acc:
        return "-"
    return f"{acc['tau_online']:.2f} ({acc['source']})"


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v else "-"


def render(r: dict) -> None:
    from rich.table import Table

    from eagle3kit.cli._render import out

    c, st = out(), r["settings"]
    speed = {(x["url"], x["concurrency"]): x for x in r["comparison"]}
    t = Table(
        title=f"live A/B: {sum(st['suites'].values())} prompts x {st['max_tokens']} "
        f"tokens, {st['repeats']} rounds, T={st['temperature']:g}, {st['endpoint']}"
    )
    for col in (
        "deployment",
        "conc",
        "decode tok/s med (min-max)",
        "throughput",
        "TTFT ms",
        "tau (source)",
        "distinct-4",
        "answers",
        "speedup median",
        "speedup pooled (plan)",
    ):
        t.add_column(col)
    for d in r["deployments"]:
        for lv in d["levels"]:
            sp = speed.get((d["url"], lv["concurrency"])) or {}
            t.add_row(
                f"{d['role']} {d['url']}",
                str(lv["concurrency"]),
                _s(lv["decode_tokens_per_s"]),
                _s(lv["throughput_tokens_per_s"]),
                _s(lv["ttft_ms"], ".0f"),
                _tau(lv["acceptance"]),
                f"{lv['distinct4']:.2f}" if lv["distinct4"] is not None else "-",
                f"{lv['distinct_answers']}/{lv['answers']}",
                _x(sp.get("decode_speedup")),
                _x(sp.get("decode_speedup_pooled")),
            )
    c.print(t)
    if r["comparison"]:
        from eagle3kit.live.summary import SPEEDUP_NOTE

        c.print(SPEEDUP_NOTE)
    for d in r["deployments"]:
        _render_server(c, d)


def _render_server(c, d: dict) -> None:
    s = d["server"]
    sp = s["speculative"]
    cfg = (
        (
            f"{sp['algorithm']}, steps {sp['num_steps']}, topk {sp['topk']}, draft tokens "
            f"{sp['num_draft_tokens']}, drafter {sp['draft_model']}"
        )
        if sp
        else "no speculation"
    )
    c.print(f"{d['url']}: {s['engine']} {s['version'] or '?'}, model {s['model']}: {cfg}")
    c.print(f"  drafting: {d['drafting_rule']}")
    for lv in d["levels"]:
        acc = lv["acceptance"]
        if acc and acc["per_position_acceptance"]:
            pos = " ".join(f"{p:.2f}" for p in acc["per_position_acceptance"])
            cond = " ".join(f"{p:.2f}" for p in acc["conditional_acceptance"])
            c.print(f"  concurrency {lv['concurrency']}: per-position {pos}; conditional {cond}")
        per_suite = [
            f"{k} {v['tau_online']:.2f}"
            for k, v in lv["suites"].items()
            if v["tau_online"] is not None
        ]
        if per_suite and len(lv["suites"]) > 1:
            c.print(f"  tau per suite: {', '.join(per_suite)}")
    life = d["server_life_tau"]
    if life and life.get("after") is not None:
        c.print(f"  server's avg_spec_accept_length {life['after']:.2f} ({life['note']})")
