"""The report's sections for plan, eval and live probe JSON, and the list of files it did not
render (with why). Field names are those their producers write: plan/forecast.py
(`PlanResult.to_json`), measure/evaluate.py, live/probe.py."""

from __future__ import annotations

from typing import Any

from eagle3kit.report.collect import Found


def _n(x: Any, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def _pct(p: Any) -> str:
    return "-" if p is None else f"{p:.1%}"


def _plan_rows(p: dict, cite: str) -> list[list[str]]:
    k = p.get("depth")
    verdict = "pays" if p.get("pays") else "below break-even"
    rows = [
        ["baseline", f"{_n(p.get('baseline_tps'), '.4g')} tok/s"],
        ["cycle", f"{_n(p.get('cycle_ms'), '.4g')} ms at depth {k} ({p.get('cycle_model')})"],
        [
            "accept length τ",
            f"{_n(p.get('tau'))} (per-step p {_pct(p.get('per_step_acceptance'))})",
        ],
        ["throughput", f"{_n(p.get('throughput_tps'), '.4g')} tok/s = τ / cycle"],
        ["speedup", f"{_n(p.get('speedup'), '.3f')}x, {verdict}"],
        ["break-even τ", f"{_n(p.get('break_even_tau'))} = baseline × cycle"],
    ]
    if p.get("best_depth") is not None:
        rows.append(
            [
                "best depth",
                f"{p['best_depth']} → τ {_n(p.get('best_depth_tau'))}, "
                f"{_n(p.get('best_depth_tps'), '.4g')} tok/s",
            ]
        )
    if p.get("request"):
        q = p["request"]
        rows.append(
            [
                "per request",
                f"{_n(q.get('tps'), '.4g')} tok/s end to end "
                f"({_n(q.get('new_tokens'), '.4g')} tokens, prefill "
                f"{_n(q.get('prefill_ms'), '.4g')} ms)",
            ]
        )
    for t in p.get("targets") or []:
        at_k = (
            "unreachable at depth " + str(k)
            if t.get("unreachable_at_depth")
            else f"p {_pct(t.get('per_step_acceptance_at_depth'))} at depth {k}"
        )
        rows.append([f"target {t.get('tps'):g} tok/s", f"needs τ {_n(t.get('tau'))}, {at_k}"])
    return [[a, b, cite] for a, b in rows]


def plan_blocks(f: Found) -> list[tuple]:
    out: list[tuple] = []
    for cite, p in f.plans:
        out += [
            ("h2", "Plan (the cycle model)"),
            ("table", ["", "value", "source"], _plan_rows(p, cite)),
        ]
    return out


def _eval_row(cite: str, e: dict) -> list[str]:
    mode = str(e.get("mode", "-")) + (f" from {e['source']}" if e.get("source") else "")
    pos = e.get("per_position_acceptance") or []
    count = e.get("samples") if e.get("mode") != "online" else e.get("prompts")
    speed = "-"
    if e.get("tokens_per_s") is not None:
        speed = f"{e['tokens_per_s']:.1f} ({_n(e.get('speedup'), '.2f')}x)"
    return [
        mode,
        _n(e.get("depth"), "d"),
        _n(e.get("tau_online" if e.get("mode") == "online" else "tau_walk")),
        " ".join(f"{x:.3f}" for x in pos) or "-",
        _n(count, "d"),
        speed,
        cite,
    ]


def eval_blocks(f: Found) -> list[tuple]:
    if not f.evals:
        return []
    head = [
        "mode",
        "depth",
        "τ",
        "P(a ≥ i), i = 1..k",
        "samples / prompts",
        "tok/s (speedup)",
        "source",
    ]
    return [
        ("h2", "Evaluations (eval)"),
        ("table", head, [_eval_row(c, e) for c, e in f.evals]),
        (
            "p",
            "Offline τ is walked over the held-out answers (a cycle starts where the last "
            "ended); online τ is counted while decoding.",
        ),
    ]


def probe_live_blocks(f: Found) -> list[tuple]:
    out: list[tuple] = []
    for cite, p in f.probe_lives:
        al = p.get("tau_online") or {}
        out.append(("h2", f"Live probe: verdict {p.get('verdict')}"))
        out.append(
            (
                "p",
                f"The drafter on the new target's server {p.get('url')} against the reference "
                f"{p.get('reference_url')}: τ {_n(al.get('new'))} vs {_n(al.get('reference'))}, "
                f"keeps {_pct(p.get('retention'))} of the reference's gain (τ − 1) [{cite}].",
            )
        )
        errors = (p.get("bench") or {}).get("errors") or []
        items = [f"{r} [{cite}]" for r in p.get("reasons") or []]
        out.append(("list", items + [f"error: {e} [{cite}]" for e in errors]))
    return out


def skipped_blocks(f: Found) -> list[tuple]:
    items = list(f.skipped)
    if f.other:
        names = ", ".join(f.other[:4]) + (", ..." if len(f.other) > 4 else "")
        items.append(f"{len(f.other)} model or tokenizer files ({names}): not eagle3kit artefacts")
    if not items:
        return []
    return [("h2", "Files not rendered"), ("list", items)]


def provenance_blocks(f: Found) -> list[tuple]:
    """Each train run's provenance (RUN/provenance.json: command, code, versions, device,
    input digests) and its config (RUN/config.toml, a file `train --config` reads back)."""
    out: list[tuple] = []
    for cite, (prov, config) in sorted(f.provenance.items()):
        run = cite.rsplit("/", 2)[-2] if "/" in cite else "the run"
        out.append(("h3", f"{run}: how it was made"))
        if prov is not None:
            where = cite.rsplit("summary.json", 1)[0] + "provenance.json"
            out.append(("table", ["", "value", "source"], _provenance_rows(prov, where)))
        if config is not None:
            where = cite.rsplit("summary.json", 1)[0] + "config.toml"
            out += [("p", f"Its options ({where}):"), ("pre", config)]
    return out


def _provenance_rows(p: dict, cite: str) -> list[list[str]]:
    code = p.get("code") or {}
    dirty = {True: " (uncommitted changes)", False: "", None: ""}.get(code.get("dirty"), "")
    versions = p.get("versions") or {}
    dev = p.get("device") or {}
    rows = [
        ["command", " ".join(str(a) for a in p.get("command") or [])],
        ["commit", f"{code.get('commit') or 'not a git checkout'}{dirty}"],
        ["versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v)],
        ["device", ", ".join(str(dev[k]) for k in ("name", "accelerator", "cpu") if dev.get(k))],
        ["written", str(p.get("time", "-"))],
    ]
    for name, d in (p.get("inputs") or {}).items():
        rows.append([name, f"{d.get('path')} sha256 {d.get('sha256') or '-'}"])
    for r in p.get("resumed") or []:
        rows.append(["resumed", f"{' '.join(r.get('command') or [])} ({r.get('time', '-')})"])
    return [[a, b, cite] for a, b in rows]
