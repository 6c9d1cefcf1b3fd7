"""`eagle3kit report RUN_DIR... -o OUT`: report.md and a self-contained report.html.

Written from the runs' JSON artefacts only, each recognised by its ``"kind"``
(core/artifacts.py) wherever it lies under the run directories:

- probe   (`probe --json`, kind "eagle3kit.probe")
- bench   (`bench --json`, kind "eagle3kit.bench"; the demo's bench files add a role and label)
- train   (RUN/summary.json, kind "eagle3kit.train"; RUN/metrics.jsonl beside it;
           RUN/state/state.json for the batch size)
- plan    (`plan --json`, kind "eagle3kit.plan")
- live    (`bench --url --json`, kind "eagle3kit.bench-live"; report/live.py)

Other eagle3kit artefacts (eval, compat, data, ...) are not part of the report. A JSON file
without an eagle3kit kind (or unreadable) is named in the result's ``skipped`` list.

Every number printed names the file it came from, relative to the run directory it was found
in. The game plan prices each path from the measured curves: samples seen to reach a held-out
simulated accept length tau is ``step x batch_size`` at the first evaluation reaching it, and
its time is ``samples x tokens_per_sample / tokens_per_s`` when the run recorded both.
The HTML has inline CSS and its PNGs as base64 data URIs: no script, no external request.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.core.artifacts import kind_of, stamp
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.report.live import KIND as LIVE_KIND
from eagle3kit.report.live import live_blocks

MAX_JSON_BYTES = 20 * 2**20
# JSON that lives in run directories but is not ours to classify (model and tokenizer files)
OTHER_JSON = {
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "model.safetensors.index.json",
}


@dataclass
class Found:
    """The artefacts of the run directories, each with its citation (relative path)."""

    probes: list[tuple[str, dict]] = field(default_factory=list)
    benches: list[tuple[str, dict]] = field(default_factory=list)
    runs: list[tuple[str, dict, list[dict], dict]] = field(
        default_factory=list
    )  # summary, metrics, config
    plans: list[tuple[str, dict]] = field(default_factory=list)
    lives: list[tuple[str, dict]] = field(default_factory=list)  # bench --url --json
    skipped: list[str] = field(default_factory=list)  # "path: why" of JSON not read


def _read_json(p: Path) -> Any:
    try:
        if p.stat().st_size > MAX_JSON_BYTES:
            return None
        return json.loads(p.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _metrics(path: Path) -> list[dict]:
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a torn last line of a killed run
    return rows


def _bench_summary(doc: dict) -> dict | None:
    """The report's bench keys from an `eagle3kit bench --json` document (greedy + chain/tree)."""
    rows = {m.get("name"): m for m in doc.get("methods") or [] if isinstance(m, dict)}
    g, c = rows.get("greedy"), rows.get("chain") or rows.get("tree")
    if not g or not c or "tau" not in c:
        return None
    return {
        "label": c["name"],
        "baseline_tps": g["tokens_per_s"]["median"],
        "spec_tps": c["tokens_per_s"]["median"],
        "speedup": c["speedup"],
        "accept_len": c["tau"],
        "cycle_ms": c["cycle_ms"],
        "depth": c["depth"],
        "per_position_acceptance": c["per_position_acceptance"],
    }


def collect(run_dirs: list[str | Path]) -> Found:
    """Find the JSON artefacts under ``run_dirs`` and sort them by kind."""
    f = Found()
    for rd in run_dirs:
        root = Path(rd)
        if not root.is_dir():
            raise Eagle3Error(f"report: {rd}: expected a run directory, found no such directory")
        for p in sorted(root.rglob("*.json")):
            _classify(f, p, str(p.relative_to(root)))
    order = {"stale": 0, "finetuned": 1, "scratch": 2}
    f.benches.sort(key=lambda cb: (order.get(cb[1].get("role"), 3), cb[0]))
    if not (f.probes or f.benches or f.runs or f.plans or f.lives):
        why = f" (skipped: {'; '.join(f.skipped[:3])})" if f.skipped else ""
        raise Eagle3Error(
            f"report: {', '.join(map(str, run_dirs))}: no probe, bench, train or plan JSON "
            f"found{why}"
        )
    return f


def _classify(f: Found, p: Path, cite: str) -> None:
    """Add the artefact at ``p`` to its list by its kind; name it in f.skipped otherwise."""
    doc = _read_json(p)
    kind = kind_of(doc)
    if kind is None:
        why = "not a JSON object" if not isinstance(doc, dict) else "no eagle3kit kind"
        if p.name not in OTHER_JSON:
            f.skipped.append(f"{cite}: {why}")
        return
    if kind == "probe":
        f.probes.append((cite, doc))
    elif kind == "bench":
        summary = doc if "spec_tps" in doc else _bench_summary(doc)
        if summary is None:
            f.skipped.append(f"{cite}: a bench without a speculative method")
        else:
            f.benches.append((cite, summary))
    elif kind == "train":
        state = _read_json(p.parent / "state" / "state.json") or {}
        f.runs.append((cite, doc, _metrics(p.parent / "metrics.jsonl"), state.get("config") or {}))
    elif kind == "plan":
        f.plans.append((cite, doc))
    elif doc.get("kind") == LIVE_KIND:
        f.lives.append((cite, doc))


# ---------------------------------------------------------------- content as blocks


def _n(x: Any, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def headline(f: Found) -> list[tuple]:
    if not f.benches:
        return []
    rows = []
    base = f.benches[0][1]
    rows.append(
        [
            "baseline (plain decoding)",
            _n(base["baseline_tps"], ".1f"),
            "-",
            "1.00x",
            "1.00",
            f.benches[0][0],
        ]
    )
    for cite, b in f.benches:
        rows.append(
            [
                b.get("label", cite),
                _n(b["spec_tps"], ".1f"),
                _n(b["baseline_tps"], ".1f"),
                _n(b["speedup"], ".2f") + "x",
                _n(b["accept_len"], ".2f"),
                cite,
            ]
        )
    head = ["", "tok/s", "plain tok/s, same run", "speedup", "τ", "source"]
    return [
        ("h2", "Headline"),
        ("table", head, rows),
        ("p", "Each speedup is against plain decoding measured in the same run, interleaved."),
    ]


def probe_blocks(f: Found) -> list[tuple]:
    out: list[tuple] = []
    for cite, p in f.probes:
        out.append(("h2", f"Phase 0 probe: verdict {p['verdict']}"))
        out.append(
            (
                "p",
                f"Drafter {p['drafter']} on {p['target']}"
                + (f", reference {p['reference']}" if p.get("reference") else "")
                + f" [{cite}].",
            )
        )
        out.append(("list", [f"{r} [{cite}]" for r in p["reasons"]]))
        if p.get("aux"):
            out += _aux_blocks(p["aux"], cite)
        if p["similarity"]:
            out += _similarity_blocks(p, cite)
        al = p["accept_len"]
        out.append(
            (
                "p",
                f"Offline accept length (depth {p['depth']}): new target {_n(al['target'])}, "
                f"reference {_n(al['reference'])} [{cite}].",
            )
        )
    return out


def _aux_blocks(aux: dict, cite: str) -> list[tuple]:
    """A probe's aux-layer reading: the candidates' offline τ, and what each engine captures."""
    rows = [
        [
            c["reading"],
            str(c["layers"]),
            "yes" if c["declared"] else "",
            _n(aux["acceptance"][c["reading"]]["accept_len"]),
            "chosen" if c["reading"] == aux["chosen"]["reading"] else "",
            cite,
        ]
        for c in aux["candidates"]
    ]
    engines = [
        f"{eng}: captures {e['captures']}: "
        + ("correct" if e["ok"] else f"wrong; {e['fix']}")
        + f" [{cite}]"
        for eng, e in aux.get("engines", {}).items()
    ]
    head = ["reading", "HF layers", "config says", "offline τ", "", "source"]
    return [
        ("h3", "Which hidden states was the drafter trained on?"),
        ("table", head, rows),
        ("list", engines),
    ]


def _similarity_blocks(p: dict, cite: str) -> list[tuple]:
    """A probe's hidden-state similarity table, reference vs new target (fc(aux) last)."""
    named = [(f"h[{s['layer']}]", s) for s in p["similarity"]]
    named += [("fc(aux)", p["fc_similarity"])] if p["fc_similarity"] else []
    rows = [
        [
            label,
            _n(s["cosine_mean"], ".4f"),
            _n(s["cosine_p10"], ".4f"),
            _n(s["cka"], ".4f"),
            _n(s["norm_ratio"], ".3f"),
            cite,
        ]
        for label, s in named
    ]
    head = ["layer", "cosine mean", "cosine p10", "CKA", "norm ratio", "source"]
    return [
        ("h3", "Hidden-state similarity (reference vs new target, same tokens)"),
        ("table", head, rows),
    ]


def _samples_to(rows: list[dict], batch: int, tau: float) -> int | None:
    """Samples seen (step x batch) at the first evaluation reaching ``tau``."""
    for r in rows:
        if r["sim_accept_len"] >= tau:
            return int(r["step"]) * batch
    return None


def train_blocks(f: Found) -> list[tuple]:
    if not f.runs:
        return []
    rows = []
    for cite, s, m, cfg in f.runs:
        first = m[0]["sim_accept_len"] if m else None
        rows.append(
            [
                _run_name(cite),
                "warm start" if s.get("init_from") else "from scratch",
                str(s.get("steps")),
                str(cfg.get("batch_size", "-")),
                str(s.get("train_samples")),
                _n(first),
                _n(s["sim_accept_len"]),
                str(s.get("best_step")),
                cite,
            ]
        )
    return [
        ("h2", "Training"),
        (
            "table",
            [
                "run",
                "init",
                "steps",
                "batch",
                "train samples",
                "τ at step 0",
                "best τ",
                "best step",
                "source",
            ],
            rows,
        ),
    ]


def _run_name(cite: str) -> str:
    parts = Path(cite).parts
    return parts[-2] if len(parts) > 1 else cite


def _tokens_per_sample(cfg: dict) -> tuple[float, str] | None:
    """Mean tokens per training sample (the DATA dir's data.json, capped at max_len) and its
    path."""
    data = cfg.get("data")
    doc = _read_json(Path(data) / "data.json") if data else None
    if not isinstance(doc, dict) or not doc.get("samples") or not doc.get("tokens"):
        return None
    per = doc["tokens"] / doc["samples"]
    if cfg.get("max_len"):
        per = min(per, float(cfg["max_len"]))
    return per, str(Path(data) / "data.json")


def _run_path(f: Found, name: str, cite: str, s: dict, m: list, cfg: dict) -> str:
    """One training path of the game plan: the run's best held-out τ, the samples (and time)
    it took, and its bench where one was measured."""
    batch = int(cfg.get("batch_size") or 0)
    n = _samples_to(m, batch, s["sim_accept_len"]) if batch else None
    b = next(((bc, bb) for bc, bb in f.benches if bb.get("run") == _run_name(cite)), None)
    t = f"{name} ({_run_name(cite)}): best held-out τ {s['sim_accept_len']:.3f} after {n} "
    t += "samples seen"
    state = Path(cite).parent / "state" / "state.json"
    t += f" ({s.get('best_step')} steps x batch {batch}) [{cite}, {state}]"
    per = _tokens_per_sample(cfg)
    if s.get("tokens_per_s") and n is not None and per:
        secs = n * per[0] / s["tokens_per_s"]
        t += (
            f"; ≈ {secs:.0f} s of training at {s['tokens_per_s']:.0f} tokens/s and "
            f"{per[0]:.0f} tokens/sample [{cite}, {per[1]}]"
        )
    if b:
        bm = b[1]
        t += f"; measured {bm['spec_tps']:.1f} tok/s, {bm['speedup']:.2f}x, "
        t += f"τ {bm['accept_len']:.2f} [{b[0]}]"
    return t


def game_plan(f: Found) -> list[tuple]:
    """Each path with its measured result and its cost in samples (and time when known)."""
    items = []
    stale = next(((c, b) for c, b in f.benches if b.get("role") == "stale"), None)
    probe = f.probes[0] if f.probes else None
    if stale:
        c, b = stale
        items.append(
            f"Plug in as is: 0 samples; measured {b['spec_tps']:.1f} tok/s, {b['speedup']:.2f}x, "
            f"τ {b['accept_len']:.2f} [{c}]"
            + (f"; probe verdict {probe[1]['verdict']} [{probe[0]}]" if probe else "")
        )
    warm = [r for r in f.runs if r[1].get("init_from")]
    cold = [r for r in f.runs if not r[1].get("init_from")]
    for name, group in (("Fine-tune the old drafter", warm), ("Train from scratch", cold)):
        items += [_run_path(f, name, *run) for run in group]
    if warm and cold:
        (wc, _, wm, wcfg), (cc, cs, cm, ccfg) = warm[0], cold[0]
        target = cs["sim_accept_len"]
        nw = _samples_to(wm, int(wcfg.get("batch_size") or 0), target)
        nc = _samples_to(cm, int(ccfg.get("batch_size") or 0), target)
        if nw is not None and nc:
            items.append(
                f"Warm start reaches scratch's best τ {target:.3f} after {nw} samples instead of "
                f"{nc} "
                f"({1 - nw / nc:.0%} fewer) [{wc}, {cc}]"
            )
    for cite, s, m, cfg in f.runs:
        if m and s.get("best_step") == m[-1]["step"] and len(m) >= 3:
            a, z = m[len(m) // 2], m[-1]
            batch = int(cfg.get("batch_size") or 1)
            gain = (z["sim_accept_len"] - a["sim_accept_len"]) / max(
                1, (z["step"] - a["step"]) * batch
            )
            items.append(
                f"More data ({_run_name(cite)}): still improving at its last evaluation: "
                f"+{gain * 1000:.3f} τ per 1000 samples over its second half "
                f"[{Path(cite).parent / 'metrics.jsonl'}]"
            )
    if not items:
        return []
    return [("h2", "Game plan"), ("list", items)]


def figure_blocks(f: Found) -> list[tuple]:
    from eagle3kit.report import plots as rp

    out: list[tuple] = []
    pp = {}
    for cite, p in f.probes:
        acc = p.get("acceptance") or {}
        for side in ("target", "reference"):
            if acc.get(side):
                pp[f"probe offline, {side} [{cite}]"] = acc[side]["acc"]
    for cite, b in f.benches:
        if b.get("per_position_acceptance"):
            pp[f"{b.get('label', cite)} online [{cite}]"] = b["per_position_acceptance"]
    out.append(("img", "per_position.png", rp.per_position(pp), "Per-position acceptance"))
    curves = {f"{_run_name(c)} [{c}]": m for c, s, m, cfg in f.runs}
    out.append(
        (
            "img",
            "training_curves.png",
            rp.training_curves(curves),
            "Training curves (metrics.jsonl)",
        )
    )
    if f.benches:
        b0 = f.benches[0][1]
        pts = {b.get("label", c): (b["accept_len"], b["spec_tps"]) for c, b in f.benches}
        out.append(
            (
                "img",
                "throughput.png",
                rp.throughput(b0["baseline_tps"], b0["cycle_ms"], int(b0.get("depth", 3)), pts),
                f"Throughput vs accept length [{f.benches[0][0]}]",
            )
        )
    if f.probes:
        c, p = f.probes[0]
        out.append(
            (
                "img",
                "similarity.png",
                rp.similarity(p["similarity"], p.get("fc_similarity")),
                f"Similarity per layer [{c}]",
            )
        )
    ws = {}
    for c, s, m, cfg in f.runs:
        batch = int(cfg.get("batch_size") or 0)
        if batch and m:
            label = ("warm start" if s.get("init_from") else "from scratch") + f" ({_run_name(c)})"
            ws[label] = ([r["step"] * batch for r in m], [r["sim_accept_len"] for r in m])
    out.append(("img", "warm_vs_scratch.png", rp.warm_vs_scratch(ws), "Warm start vs scratch"))
    return [b for b in out if b[2] is not None]


# ---------------------------------------------------------------- rendering

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:980px;margin:2em auto;
padding:0 1em;color:#1a1a1a;line-height:1.5}
h1{border-bottom:2px solid #2b6cb0;padding-bottom:.2em}h2{margin-top:1.6em;color:#2b6cb0}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #cbd5e0;padding:.3em .6em;text-align:left}th{background:#edf2f7}
td.src,span.src{color:#718096;font-size:.85em}figure{margin:1em 0}img{max-width:100%}
figcaption{color:#4a5568;font-size:.9em}
"""


def _md(blocks: list[tuple], title: str) -> str:
    lines = [f"# {title}", ""]
    for b in blocks:
        if b[0] in ("h2", "h3"):
            lines += [("## " if b[0] == "h2" else "### ") + b[1], ""]
        elif b[0] == "p":
            lines += [b[1], ""]
        elif b[0] == "list":
            lines += [f"- {x}" for x in b[1]] + [""]
        elif b[0] == "table":
            lines += ["| " + " | ".join(b[1]) + " |", "|" + "---|" * len(b[1])]
            lines += ["| " + " | ".join(r) + " |" for r in b[2]] + [""]
        elif b[0] == "img":
            lines += [f"![{b[3]}]({b[1]})", ""]
    return "\n".join(lines)


def _html(blocks: list[tuple], title: str) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{e(title)}</h1>",
    ]
    for b in blocks:
        if b[0] in ("h2", "h3", "p"):
            parts.append(f"<{b[0]}>{e(b[1])}</{b[0]}>")
        elif b[0] == "list":
            parts.append("<ul>" + "".join(f"<li>{e(x)}</li>" for x in b[1]) + "</ul>")
        elif b[0] == "table":
            head = "".join(f"<th>{e(h)}</th>" for h in b[1])
            body = "".join(
                "<tr>"
                + "".join(
                    f'<td class="src">{e(c)}</td>'
                    if i == len(r) - 1 and b[1][-1] == "source"
                    else f"<td>{e(c)}</td>"
                    for i, c in enumerate(r)
                )
                + "</tr>"
                for r in b[2]
            )
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif b[0] == "img":
            data = base64.b64encode(b[2]).decode("ascii")
            parts.append(
                f'<figure><img alt="{e(b[3])}" src="data:image/png;base64,{data}">'
                f"<figcaption>{e(b[3])}</figcaption></figure>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def report(
    run_dirs: list[str | Path], out: str | Path, *, title: str = "eagle3kit report"
) -> dict[str, Any]:
    """Write OUT/report.md (+ its PNGs) and OUT/report.html; returns what was written and found."""
    from eagle3kit.core.atomic import atomic_write_bytes, atomic_write_text

    f = collect(run_dirs)
    blocks = headline(f) + live_blocks(f.lives) + probe_blocks(f) + train_blocks(f)
    blocks += game_plan(f)
    figs = figure_blocks(f)
    blocks += [("h2", "Figures")] + figs if figs else []
    srcs = ", ".join(str(Path(r)) for r in run_dirs)
    blocks.append(
        (
            "p",
            f"Every number above comes from the JSON artefacts under {srcs}; "
            "the bracketed path after it names the file, relative to its run directory.",
        )
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for b in figs:
        atomic_write_bytes(out / b[1], b[2])
    atomic_write_text(out / "report.md", _md(blocks, title))
    atomic_write_text(out / "report.html", _html(blocks, title))
    doc = {
        "report_md": str(out / "report.md"),
        "report_html": str(out / "report.html"),
        "figures": [b[1] for b in figs],
        "found": {
            "probe": [c for c, _ in f.probes],
            "bench": [c for c, _ in f.benches],
            "train": [c for c, *_ in f.runs],
            "plan": [c for c, _ in f.plans],
            "bench_live": [c for c, _ in f.lives],
        },
        "skipped": f.skipped,
    }
    return stamp(doc, "report")
