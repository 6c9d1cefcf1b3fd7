"""`eagle3kit bench --url ...`: the live A/B against running servers (eagle3kit.live)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from eagle3kit.core.errors import Eagle3Error


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
        prompts += load_conversations(data, limit)
    return prompts


def run(o: dict[str, Any]) -> None:
    """Run the live bench from the `bench` command's options; print or emit JSON."""
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json, err
    from eagle3kit.live.bench import LiveConfig, run_live_bench

    cfg = LiveConfig(
        prompts=load_prompts(o["suite"], o["data"], o["prompts"]),
        max_tokens=o["max_new_tokens"],
        temperature=o["temperature"],
        repeats=o["repeats"],
        concurrency=parse_levels(o["concurrency"]),
        endpoint=o["endpoint"],
        timeout=o["timeout"],
        depth=o["drafter_depth"],
    )

    def said(info) -> None:
        spec = info.speculative
        what = f"{spec['algorithm']} ({spec['num_steps']} steps)" if spec else "no speculation"
        err().print(f"{info.url}: {info.engine} {info.version or ''} serving {info.model}, {what}")

    with bar(not o["json_"]) as progress:
        r = run_live_bench(o["url"], o["baseline_url"], cfg, progress, said)
    for line in r["errors"]:
        print(f"error: {line}", file=sys.stderr)
    for line in r["warnings"]:
        print(f"warning: {line}", file=sys.stderr)
    if o["json_"]:
        emit_json(r)
    else:
        render(r)
    if not r["deployments"]:
        import typer

        raise typer.Exit(1)


def _s(x: dict | None, fmt: str = ".1f") -> str:
    if not x:
        return "-"
    return f"{x['median']:{fmt}} ({x['min']:{fmt}}-{x['max']:{fmt}})"


def _tau(acc: dict | None) -> str:
    if not acc:
        return "-"
    return f"{acc['accept_len']:.2f} ({acc['source']})"


def render(r: dict) -> None:
    from rich.table import Table

    from eagle3kit.cli._render import out

    c, st = out(), r["settings"]
    speed = {(x["url"], x["concurrency"]): x["decode_speedup"] for x in r["comparison"]}
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
        "speedup",
    ):
        t.add_column(col)
    for d in r["deployments"]:
        for lv in d["levels"]:
            sp = speed.get((d["url"], lv["concurrency"]))
            t.add_row(
                f"{d['role']} {d['url']}",
                str(lv["concurrency"]),
                _s(lv["decode_tokens_per_s"]),
                _s(lv["throughput_tokens_per_s"]),
                _s(lv["ttft_ms"], ".0f"),
                _tau(lv["acceptance"]),
                f"{lv['distinct4']:.2f}" if lv["distinct4"] is not None else "-",
                f"{lv['distinct_answers']}/{lv['answers']}",
                f"{sp:.2f}x" if sp else "-",
            )
    c.print(t)
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
            f"{k} {v['accept_len']:.2f}"
            for k, v in lv["suites"].items()
            if v["accept_len"] is not None
        ]
        if per_suite and len(lv["suites"]) > 1:
            c.print(f"  tau per suite: {', '.join(per_suite)}")
    life = d["server_life_accept_len"]
    if life and life.get("after") is not None:
        c.print(f"  server's avg_spec_accept_length {life['after']:.2f} ({life['note']})")
