"""The report's section for `eagle3kit bench --url --json` (kind "eagle3kit.bench-live"):
one row per deployment and concurrency level, the servers' settings, warnings and faults,
each citing its file."""

from __future__ import annotations

from typing import Any

from eagle3kit.live.summary import SPEEDUP_NOTE

KIND = "eagle3kit.bench-live"


def _n(x: Any, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _spread(s: dict | None, fmt: str = ".1f") -> str:
    if not s:
        return "-"
    return f"{s['median']:{fmt}} ({s['min']:{fmt}}-{s['max']:{fmt}})"


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v else "-"


def _rows(doc: dict, cite: str) -> list[list[str]]:
    speed = {(c["url"], c["concurrency"]): c for c in doc["comparison"]}
    rows = []
    for d in doc["deployments"]:
        s = d["server"]
        for lv in d["levels"]:
            acc = lv["acceptance"]
            sp = speed.get((d["url"], lv["concurrency"])) or {}
            rows.append(
                [
                    f"{d['role']} {d['url']}",
                    f"{s['engine']} {s['version'] or ''}".strip(),
                    str(lv["concurrency"]),
                    _spread(lv["decode_tokens_per_s"]),
                    _spread(lv["throughput_tokens_per_s"]),
                    f"{acc['tau_online']:.2f} ({acc['source']})" if acc else "-",
                    _n(lv["distinct4"], ".2f"),
                    _x(sp.get("decode_speedup")),
                    _x(sp.get("decode_speedup_pooled")),
                    cite,
                ]
            )
    return rows


def _notes(doc: dict, cite: str) -> list[str]:
    out = []
    for d in doc["deployments"]:
        sp = d["server"]["speculative"]
        cfg = (
            f"{sp['algorithm']}, steps {sp['num_steps']}, topk {sp['topk']}, draft tokens "
            f"{_n(sp['num_draft_tokens'], 'd')}, drafter "
            f"{sp['draft_model'] or 'not reported by the server'}"
            if sp
            else "no speculation"
        )
        out.append(f"{d['url']}: {cfg}; {d['drafting_rule']} [{cite}]")
        life = d.get("server_life_tau") or {}
        if life.get("after") is not None:
            out.append(f"{d['url']}: server's average {life['after']:.2f}, {life['note']} [{cite}]")
    out += [f"warning: {w} [{cite}]" for w in doc.get("warnings") or []]
    out += [f"error: {e} [{cite}]" for e in doc.get("errors") or []]
    return out


def live_blocks(lives: list[tuple[str, dict]]) -> list[tuple]:
    """Blocks (see render.py) for every bench-live JSON found."""
    if not lives:
        return []
    head = [
        "deployment",
        "engine",
        "conc",
        "decode tok/s",
        "throughput",
        "τ (source)",
        "distinct-4",
        "speedup median",
        "speedup pooled (plan)",
        "source",
    ]
    out: list[tuple] = [("h2", "Live deployments (bench --url)")]
    for cite, doc in lives:
        st = doc.get("settings", {})
        out.append(
            (
                "p",
                f"{sum((st.get('suites') or {}).values())} prompts x "
                f"{st.get('max_tokens')} tokens, "
                f"{st.get('repeats')} interleaved rounds, temperature {st.get('temperature')}, "
                f"{st.get('endpoint')} endpoint [{cite}].",
            )
        )
        out.append(("table", head, _rows(doc, cite)))
        if doc.get("comparison"):
            out.append(("p", SPEEDUP_NOTE))
        out.append(("list", _notes(doc, cite)))
    return out
