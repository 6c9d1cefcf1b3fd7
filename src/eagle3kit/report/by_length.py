"""The report's "By context length" section: every rendered measurement that carries
`by_length` (measure/by_length.py, live/summary.py, plan/by_length.py), as a table and a
figure of tau, cycle cost and speedup against context length.

A plan's points are its own; a bench, eval or bench-live file is priced as `plan --from`
prices it (plan/by_length.py); a file with acceptance only (offline eval) or a probe shows
tau per length alone (NEW and the reference for a probe)."""

from __future__ import annotations

from typing import Any

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.report.collect import Found


def _n(x: Any, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt)


def _priced(doc: dict, cite: str) -> list[dict] | None:
    """The plan's points of a measurement with costs per length (None: it has none)."""
    from eagle3kit.plan.by_length import lengths_of, plan_by_length

    try:
        f = lengths_of(doc, cite)
        return plan_by_length(f).to_json()["by_length"] if f and f.costs else None
    except Eagle3Error:
        return None


def _taus(doc: dict) -> dict[str, list[tuple[int, float]]]:
    """tau per length, one series per side (a probe: new and reference)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for e in doc.get("by_length") or []:
        t = e.get("tau")
        sides = t if isinstance(t, dict) else {"τ": e.get("tau_online", e.get("tau_walk", t))}
        for side, v in sides.items():
            if v is not None:
                out.setdefault(side, []).append((e["context_length"], v))
    return out


def sources(f: Found) -> list[tuple[str, str, dict]]:
    """(cite, kind, document) of every rendered file with `by_length`."""
    groups = (
        ("plan", f.plans),
        ("eval", f.evals),
        ("bench-live", f.lives),
        ("probe", f.probes),
        ("probe-live", f.probe_lives),
        ("bench", f.length_benches),
    )
    return [(c, k, d) for k, docs in groups for c, d in docs if d.get("by_length")]


def blocks(f: Found) -> tuple[list[tuple], list[tuple]]:
    """(the section's tables, its figures)."""
    from eagle3kit.report import plots as rp

    tables: list[tuple] = []
    figs: list[tuple] = []
    for i, (cite, kind, doc) in enumerate(sources(f)):
        pts = doc["by_length"] if kind == "plan" else _priced(doc, cite)
        name = f"by_length_{i}.png"
        if pts:
            head = ["context", "τ", "τ needed", "cycle ms", "plain ms", "speedup", "request"]
            rows = [
                [
                    str(p["context_length"]),
                    _n(p["tau"]),
                    _n(p["break_even_tau"]),
                    _n(p["cycle_ms"]),
                    _n(p["plain_ms"]),
                    _n(p["speedup"], ".3f"),
                    _n(p.get("request_speedup"), ".3f"),
                ]
                for p in pts
            ]
            answer = (doc.get("pays_up_to") or {}).get("answer")
            tables += [("h3", f"{kind} [{cite}]"), ("table", head, rows)]
            tables += [("p", f"{answer} [{cite}]")] if answer else []
            figs.append(
                (
                    "img",
                    name,
                    rp.by_length(pts, answer or ""),
                    f"τ, cycle cost and speedup against context length [{cite}]",
                )
            )
        else:
            series = _taus(doc)
            rows = [
                [side, ", ".join(f"{n}: {v:.3f}" for n, v in xs)] for side, xs in series.items()
            ]
            tables += [("h3", f"{kind} [{cite}]"), ("table", ["", "τ by context length"], rows)]
            figs.append(("img", name, rp.tau_by_length(series), f"τ by context length [{cite}]"))
    if tables:
        tables = [("h2", "By context length")] + tables
    return tables, [b for b in figs if b[2] is not None]
