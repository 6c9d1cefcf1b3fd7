"""`eagle3kit plan --methods a,b --costs bench.json --accept [LABEL=]eval.json ...`: which method
pays at which load (plan/methods.py), rendered; the winner's launch lines; vLLM's schedule."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3kit.core.errors import Eagle3Error


@dataclass(frozen=True)
class MethodsOptions:
    methods: tuple[str, ...]  # empty: every candidate given
    costs: Path | None
    accept: tuple[str, ...]
    live: Path | None
    suite: str | None
    depth: int | None
    model: str
    vllm_schedule: Path | None
    max_batch: int


def _candidates(o: MethodsOptions):
    from eagle3kit.plan.method_inputs import (
        parse_accept_arg,
        read_candidates,
        read_costs,
        read_live,
    )

    levels, prefill, new, cands = [], None, None, []
    if o.live is not None:
        levels, cands = read_live(o.live, o.suite)
    if o.costs is not None:
        if levels:
            raise Eagle3Error("--costs: expected either --costs or --live, found both")
        levels, prefill, new = read_costs(o.costs)
    if not levels:
        raise Eagle3Error(
            "--costs: expected measured costs (--costs bench.json from `bench --concurrency "
            "1,4 --json`, or --live bench-live.json), found none"
        )
    for a in o.accept:
        label, path = parse_accept_arg(a)
        cands += read_candidates(path, label)
    if o.methods:
        from eagle3kit.core import registry

        for m in o.methods:
            registry.get(m, "--methods")
        cands = [c for c in cands if c.method in o.methods]
    if not cands:
        want = ", ".join(o.methods) or "any method"
        raise Eagle3Error(
            f"--accept: expected measured acceptance for {want} (an eval or bench JSON with "
            '"method" and per_position_acceptance), found none'
        )
    return levels, prefill, new, cands


def run(o: MethodsOptions, json_: bool) -> bool:
    """Plan, write the schedule when asked, render; True when some method beats plain
    decoding at some level."""
    from eagle3kit.plan.methods import plan_methods, vllm_schedule_config

    levels, prefill, new, cands = _candidates(o)
    depths = [o.depth] if o.depth is not None else None
    mp = plan_methods(cands, levels, depths=depths, new_tokens=new, prefill_ms=prefill)
    doc = mp.to_json()
    doc["launch"] = _launches(mp, cands, o.model)
    if o.methods:  # say only what is missing among the methods asked for
        doc["notes"] = [n for n in doc["notes"] if n.split(":")[0] in o.methods]
    if o.vllm_schedule is not None:
        from eagle3kit.core.atomic import atomic_write_json

        first = mp.winners[min(mp.winners)]
        pick = next((c for c in cands if c.label == first.label), None) or _best_served(mp, cands)
        cfg = vllm_schedule_config(mp, pick, o.max_batch)
        atomic_write_json(o.vllm_schedule, cfg)
        doc["vllm_schedule"] = {"file": str(o.vllm_schedule), "label": pick.label, **cfg}
    if json_:
        from eagle3kit.cli._render import emit_json
        from eagle3kit.core.artifacts import stamp

        emit_json(stamp({"mode": "methods", **doc}, "plan"))
    else:
        _render(mp, doc)
    return any(w.label != "plain" for w in mp.winners.values())


def _best_served(mp, cands):
    """The candidate vLLM serves with the highest tok/s at the lowest level."""
    from eagle3kit.core import registry

    low = mp.best[min(mp.best)]
    served = [p for p in low if p.label != "plain" and registry.get(p.method).serves("vllm")]
    if not served:
        raise Eagle3Error("--vllm-schedule: no candidate that vLLM serves")
    top = max(served, key=lambda p: p.user_tps)
    return next(c for c in cands if c.label == top.label)


def _launches(mp, cands, model: str) -> dict[str, Any]:
    """Per level, the winner's SGLang and vLLM launch lines."""
    from eagle3kit.core import registry

    out = {}
    for c, w in sorted(mp.winners.items()):
        cand = next((x for x in cands if x.label == w.label), None)
        name = cand.method if cand else registry.DEFAULT
        out[str(c)] = registry.launch_lines(name, w.depth, model, cand.draft if cand else None)
    return out


def _render(mp, doc: dict[str, Any]) -> None:
    from rich.table import Table

    from eagle3kit.cli._render import out

    console = out()
    for lv in doc["levels"]:
        c = lv["concurrency"]
        t = Table(title=f"concurrency {c}: which method pays", title_justify="left")
        for col in (
            "method",
            "k",
            "τ",
            "cycle ms",
            "tok/s per user",
            "total tok/s",
            "speedup",
            "break-even τ",
        ):
            t.add_column(col, justify="right" if col != "method" else "left")
        for p in lv["methods"]:
            iv = p["tokens_per_s_per_user_interval"]
            user = f"{p['tokens_per_s_per_user']:.1f}" + (
                f" [{iv[0]:.1f}, {iv[1]:.1f}]" if iv else ""
            )
            name = p["label"] + ("  ← winner" if p["label"] == lv["winner"] else "")
            t.add_row(
                name,
                str(p["depth"]),
                f"{p['tau']:.2f}",
                f"{p['cycle_ms']:.2f}",
                user,
                f"{p['tokens_per_s_total']:.1f}",
                f"{p['speedup']:.2f}×",
                f"{p['break_even_tau']:.2f}",
            )
        console.print(t)
        launch = doc["launch"][str(c)]
        for eng in ("sglang", "vllm"):
            line = launch[eng] or f"({eng} does not serve {lv['winner']})"
            console.print(f"  {eng}: {line}", soft_wrap=True)
    for n in doc["notes"]:
        console.print(f"[dim]{n}[/]")
    if "vllm_schedule" in doc:
        s = doc["vllm_schedule"]
        sched = json.dumps(s["num_speculative_tokens_per_batch_size"])
        console.print(
            f"vLLM schedule for {s['label']} written to {s['file']}: "
            f"num_speculative_tokens_per_batch_size {sched}"
        )
