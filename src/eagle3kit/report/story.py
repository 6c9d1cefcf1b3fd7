"""The live story: `bench --url --json` runs before and after fine-tuning, side by side and
in order, the speedup change and whether it crossed break-even; and the game plan's "what
next" from those live figures.

Each bench-live document gives one LiveRun: its first speculative deployment at its lowest
concurrency level (the level live/summary.py's plan fields come from) against its baseline.

Order: "before" is a plain run or one serving the old drafter (a train run's ``init_from``,
a probe's ``drafter``); "after" one serving a new drafter (a convert's ``out``, or a path
inside a train run's directory), matched on the draft model path the server reported. When
the servers do not name their drafters, the order the files were given on the command line
decides, else the runs' start times (bench --url's ``started``; a file without one: its
mtime), oldest first, and the report says so.

Break-even tau: the plan JSON's ``break_even_tau`` when one is given (the cycle the
user planned with), else each run's own cycle costs, cycle_ms / decode_ms (= baseline tok/s
x cycle s, docs/plan.md); with neither, the measured speedup against 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3kit.report.collect import Found


@dataclass
class LiveRun:
    cite: str
    speculative: bool
    url: str | None = None
    drafter: str | None = None  # the draft model path the server reported
    engine: str = "-"
    concurrency: int | None = None
    tau: float | None = None
    spec_tps: float | None = None  # decode tok/s per request, median
    plain_tps: float | None = None
    speedup: float | None = None
    cycle_ms: float | None = None
    decode_ms: float | None = None


def _med(s: Any) -> float | None:
    return s.get("median") if isinstance(s, dict) else None


def _lowest(dep: dict | None) -> dict:
    levels = (dep or {}).get("levels") or []
    return min(levels, key=lambda lv: lv.get("concurrency") or 0) if levels else {}


def live_run(cite: str, doc: dict) -> LiveRun:
    deps = doc.get("deployments") or []
    spec = next((d for d in deps if d.get("role") == "speculative"), None)
    base = next((d for d in deps if d.get("role") == "baseline"), None)
    plain = _med(_lowest(base).get("decode_tokens_per_s"))
    if spec is None:
        return LiveRun(
            cite,
            False,
            plain_tps=plain,
            speedup=1.0 if plain else None,
            engine=((base or {}).get("server") or {}).get("engine", "-"),
        )
    lv, server = _lowest(spec), spec.get("server") or {}
    conc = lv.get("concurrency")
    speed = next(
        (
            c.get("decode_speedup")
            for c in doc.get("comparison") or []
            if c.get("url") == spec.get("url") and c.get("concurrency") == conc
        ),
        None,
    )
    return LiveRun(
        cite,
        True,
        url=spec.get("url"),
        drafter=(server.get("speculative") or {}).get("draft_model"),
        engine=f"{server.get('engine', '-')} {server.get('version') or ''}".strip(),
        concurrency=conc,
        tau=(lv.get("acceptance") or {}).get("tau_online"),
        spec_tps=_med(lv.get("decode_tokens_per_s")),
        plain_tps=plain,
        speedup=speed,
        cycle_ms=doc.get("cycle_ms"),
        decode_ms=doc.get("decode_ms"),
    )


def _same(drafter: str, ident: str) -> bool:
    a, b = str(drafter).rstrip("/"), str(ident).rstrip("/")
    return a == b or Path(a).name == Path(b).name


def _role(r: LiveRun, f: Found) -> str | None:
    """before | after | None (cannot tell) from the drafter the server reported."""
    if not r.speculative:
        return "before"
    if not r.drafter:
        return None
    after = [c.get("out") for _, c in f.converts if c.get("out")]
    if any(_same(r.drafter, x) for x in after) or any(
        Path(cite).parent.name in Path(r.drafter).parts for cite, *_ in f.runs
    ):
        return "after"
    before = [s.get("init_from") for _, s, *_ in f.runs if s.get("init_from")]
    before += [p.get("drafter") for _, p in f.probes if p.get("drafter")]
    return "before" if any(_same(r.drafter, x) for x in before) else None


def ordered(f: Found) -> tuple[list[LiveRun], str]:
    """The live runs in order, and what decided it."""
    runs = [live_run(c, d) for c, d in f.lives]
    roles = {r.cite: _role(r, f) for r in runs}
    told = set(roles.values())
    if len(runs) > 1 and None not in told and told == {"before", "after"}:
        runs.sort(key=lambda r: (roles[r.cite] == "after", f.times.get(r.cite, 0.0)))
        return runs, "by the drafter each server reported (plain or old drafter first)"
    if len(runs) > 1 and all(r.cite in f.given for r in runs):
        runs.sort(key=lambda r: f.given[r.cite])
        return runs, "as given on the command line (the servers' drafters do not tell)"
    runs.sort(key=lambda r: (f.times.get(r.cite, 0.0), r.cite))
    why = "oldest first: the servers' drafters do not tell before from after"
    return runs, f"by the runs' start times, {why}" if len(runs) > 1 else "one run"


def ordered_docs(f: Found) -> list[tuple[str, dict]]:
    """The bench-live documents in the story's order."""
    docs = dict(f.lives)
    return [(r.cite, docs[r.cite]) for r in ordered(f)[0]]


def break_even(f: Found, r: LiveRun) -> tuple[float | None, str]:
    """(break-even tau, its source)."""
    if f.plans and f.plans[0][1].get("break_even_tau"):
        return f.plans[0][1]["break_even_tau"], f.plans[0][0]
    if r.cycle_ms and r.decode_ms:
        return r.cycle_ms / r.decode_ms, r.cite
    return None, ""


def pays(f: Found, r: LiveRun) -> bool | None:
    be, _ = break_even(f, r)
    if r.tau is not None and be is not None:
        return r.tau >= be
    return None if r.speedup is None else r.speedup >= 1.0


def _n(x: Any, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _column(f: Found, r: LiveRun) -> list[str]:
    be, src = break_even(f, r)
    p = pays(f, r)
    return [
        r.drafter or ("plain decoding" if not r.speculative else "not reported by the server"),
        f"{r.engine} {r.url or ''}".strip(),
        _n(r.concurrency, "d"),
        _n(r.tau, ".3f"),
        _n(r.spec_tps, ".1f"),
        _n(r.plain_tps, ".1f"),
        _n(r.speedup, ".2f") + ("x" if r.speedup is not None else ""),
        f"{be:.3f} [{src}]" if be is not None else "-",
        {True: "pays", False: "below break-even", None: "-"}[p],
        r.cite,
    ]


ROWS = [
    "drafter",
    "server",
    "concurrency",
    "τ",
    "decode tok/s",
    "plain tok/s, same run",
    "speedup median",
    "break-even τ",
    "verdict",
    "source",
]


def change_line(f: Found, a: LiveRun, b: LiveRun) -> str:
    """Before -> after: the speedup change and whether it crossed break-even."""
    sa, sb = a.speedup, b.speedup
    t = f"Before → after: speedup {_n(sa, '.2f')}x → {_n(sb, '.2f')}x"
    if sa is not None and sb is not None:
        t += f" ({sb - sa:+.2f}x)"
    t += f", τ {_n(a.tau, '.3f')} → {_n(b.tau, '.3f')}"
    pa, pb = pays(f, a), pays(f, b)
    be, src = break_even(f, b)
    against = f" (break-even τ {be:.3f} [{src}])" if be is not None else " (speedup 1x)"
    verdict = {
        (False, True): "crossed break-even",
        (True, True): "above break-even before and after",
        (False, False): "still below break-even",
        (True, False): "fell below break-even",
    }.get((pa, pb), "break-even not known")
    return f"{t}: {verdict}{against}{_disagrees(pb, b)} [{a.cite}, {b.cite}]."


def _disagrees(p: bool | None, r: LiveRun) -> str:
    """A note when the measured speedup contradicts the verdict from tau vs break-even."""
    if p is None or r.speedup is None or (r.speedup >= 1.0) == p:
        return ""
    return f"; but its measured speedup is {r.speedup:.2f}x: the cycle's cost moved"


def story_blocks(f: Found) -> list[tuple]:
    runs, basis = ordered(f)
    if len(runs) < 2:
        return []
    head = ["", *(f"{'before' if i == 0 else 'after'} ({i + 1})" for i in range(len(runs)))]
    cols = [_column(f, r) for r in runs]
    rows = [[name, *(c[i] for c in cols)] for i, name in enumerate(ROWS)]
    return [
        ("h2", "Live: before and after"),
        ("p", f"Runs in order {basis}; each at its lowest concurrency level."),
        ("table", head, rows),
        ("p", change_line(f, runs[0], runs[-1])),
    ]


def next_items(f: Found) -> list[str]:
    """The game plan's "what next" from the live figures (empty without a live bench)."""
    runs, _ = ordered(f)
    if not runs:
        return []
    now = runs[-1]
    be, src = break_even(f, now)
    figs = (
        f"τ {_n(now.tau, '.3f')}, {_n(now.spec_tps, '.1f')} tok/s per request, speedup "
        f"{_n(now.speedup, '.2f')}x at concurrency {_n(now.concurrency, 'd')} [{now.cite}]"
    )
    need = f"break-even τ {be:.3f} [{src}]" if be is not None else "speedup 1x"
    p = pays(f, now)
    if p:
        who = "the fine-tuned drafter" if len(runs) > 1 else "this drafter"
        return [f"What next (live): deploy {who}: {figs}; it clears {need}."]
    if p is False:
        gap = f", τ short by {be - now.tau:.3f}" if be is not None and now.tau is not None else ""
        return [
            f"What next (live): not yet: {figs} is below {need}{gap}; fine-tune on more of the "
            "target's own answers, or lower the cycle's cost (fewer draft steps)."
        ]
    return [f"What next (live): {figs}; break-even not known (no plan JSON, no cycle costs)."]
