"""`eagle3kit report SOURCE... -o OUT`: report.md and a self-contained report.html.

Written from the runs' JSON artefacts only, each recognised by its ``"kind"`` (collect.py
lists what is rendered; every other JSON is named in the report as skipped, with why):
headline and training from in-process benches and train runs (here), live deployments
(live.py), the live before/after story and the game plan's "what next" (story.py), plan,
eval and live probe sections (sections.py), output (output.py).

Every number printed names the file it came from, relative to the run directory it was found
in. The game plan prices each path from the measured curves: samples seen to reach a held-out
simulated accept length tau is ``step x batch_size`` at the first evaluation reaching it, and
its time is ``samples x tokens_per_sample / tokens_per_s`` when the run recorded both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eagle3kit.core.artifacts import stamp
from eagle3kit.report import by_length, sections, story
from eagle3kit.report.collect import Found, collect, read_json
from eagle3kit.report.live import live_blocks
from eagle3kit.report.output import to_html, to_md

# ---------------------------------------------------------------- content as blocks


def _n(x: Any, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def headline(f: Found) -> list[tuple]:
    """Plain decoding, a model-free method benched beside a drafter (prompt lookup), then each
    bench's drafter: the rows the demo's terminal headline prints, in its order."""
    if not f.benches:
        return []
    rows = []
    base = f.benches[0][1]
    rows.append(
        [
            "baseline (plain)",
            _n(base["baseline_tps"], ".1f"),
            "-",
            "1.00x",
            "1.00",
            f.benches[0][0],
        ]
    )
    look = next(((c, b) for c, b in f.benches if b.get("lookup")), None)
    if look is not None:
        cite, lk = look[0], look[1]["lookup"]
        rows.append(
            [
                lk["label"],
                _n(lk["spec_tps"], ".1f"),
                _n(look[1]["baseline_tps"], ".1f"),
                _n(lk["speedup"], ".2f") + "x",
                _n(lk["tau_online"], ".2f"),
                cite,
            ]
        )
    for cite, b in f.benches:
        rows.append(
            [
                b.get("label", cite),
                _n(b["spec_tps"], ".1f"),
                _n(b["baseline_tps"], ".1f"),
                _n(b["speedup"], ".2f") + "x",
                _n(b["tau_online"], ".2f"),
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
        out.append(("h2", f"Phase 0 probe: verdict {p.get('verdict')}"))
        ref = f", reference {p['reference']}" if p.get("reference") else ""
        data = p.get("data") or {}
        seqs = f"; {data['sequences']} sequences of {data.get('source')}" if data else ""
        out.append(("p", f"Drafter {p.get('drafter')} on {p.get('target')}{ref}{seqs} [{cite}]."))
        out.append(("list", [f"{r} [{cite}]" for r in p.get("reasons") or []]))
        if p.get("aux"):
            out += _aux_blocks(p["aux"], cite)
        if p.get("similarity"):
            out += _similarity_blocks(p, cite)
        al = p.get("tau_every_position") or {}
        out.append(
            (
                "p",
                f"Offline tau_every_position (depth {p.get('depth')}): new target "
                f"{_n(al.get('target'))}, reference {_n(al.get('reference'))} [{cite}].",
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
            _n(aux["acceptance"][c["reading"]]["tau_every_position"]),
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
        if r["tau_every_position"] >= tau:
            return int(r["step"]) * batch
    return None


GENERIC = ("best", "head", "drafter")  # a run's or a package's folder, named by its parent


def start_of(s: dict) -> tuple[bool, str]:
    """(a warm start, how the run started) from its summary, for every method: `init_from`
    (EAGLE-3, P-EAGLE, DFlash), or an MTP fine-tune's `init` ("target": the target's own head,
    "fresh", or a head dir)."""
    init = s.get("init_from")
    if not init and isinstance(s.get("init"), str) and s["init"] != "fresh":
        init = "the target's own MTP head" if s["init"] == "target" else s["init"]
    if not init:
        return False, "fresh (from scratch)"
    parts = Path(init).parts
    keep = 2 if len(parts) > 1 and parts[-1] in GENERIC else 1
    name = init if init.startswith("the ") else "/".join(parts[-keep:])
    return True, f"warm start from {name}"


def train_blocks(f: Found) -> list[tuple]:
    if not f.runs:
        return []
    rows = []
    for cite, s, m, cfg in f.runs:
        first = m[0]["tau_every_position"] if m else None
        rows.append(
            [
                _run_name(cite),
                start_of(s)[1],
                _n(s.get("steps"), "d"),
                str(cfg.get("batch_size", "-")),
                _n(s.get("train_samples"), "d"),
                _n(first),
                _n(s.get("tau_every_position")),
                _n(s.get("best_step"), "d"),
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
    doc = read_json(Path(data) / "data.json")[0] if data else None
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
    n = _samples_to(m, batch, s["tau_every_position"]) if batch else None
    b = next(((bc, bb) for bc, bb in f.benches if bb.get("run") == _run_name(cite)), None)
    t = f"{name} ({_run_name(cite)}): best held-out τ {s['tau_every_position']:.3f} after "
    state = Path(cite).parent / "state" / "state.json"
    if n is None:
        t += f"{s.get('best_step')} steps (samples seen unknown: no batch size or metrics)"
        t += f" [{cite}, {state}]"
    else:
        t += f"{n} samples seen ({s.get('best_step')} steps x batch {batch}) [{cite}, {state}]"
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
        t += f"τ {bm['tau_online']:.2f} [{b[0]}]"
    return t


def game_plan(f: Found) -> list[tuple]:
    """Each path with its measured result and its cost in samples (and time when known)."""
    items = story.next_items(f)
    stale = next(((c, b) for c, b in f.benches if b.get("role") == "stale"), None)
    probe = f.probes[0] if f.probes else None
    if stale:
        c, b = stale
        items.append(
            f"Plug in as is: 0 samples; measured {b['spec_tps']:.1f} tok/s, {b['speedup']:.2f}x, "
            f"τ {b['tau_online']:.2f} [{c}]"
            + (f"; probe verdict {probe[1]['verdict']} [{probe[0]}]" if probe else "")
        )
    scored = [r for r in f.runs if r[1].get("tau_every_position") is not None]
    warm = [r for r in scored if start_of(r[1])[0]]
    cold = [r for r in scored if not start_of(r[1])[0]]
    for run in warm:
        name = "Fine-tune the old drafter, " + start_of(run[1])[1]
        items.append(_run_path(f, name, *run))
    items += [_run_path(f, "Train from scratch (fresh)", *run) for run in cold]
    if warm and cold:
        (wc, _, wm, wcfg), (cc, cs, cm, ccfg) = warm[0], cold[0]
        target = cs["tau_every_position"]
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
            gain = (z["tau_every_position"] - a["tau_every_position"]) / max(
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
        pts = {b.get("label", c): (b["tau_online"], b["spec_tps"]) for c, b in f.benches}
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
            label = start_of(s)[1] + f" ({_run_name(c)})"
            ws[label] = ([r["step"] * batch for r in m], [r["tau_every_position"] for r in m])
    out.append(("img", "warm_vs_scratch.png", rp.warm_vs_scratch(ws), "Warm start vs scratch"))
    return [b for b in out if b[2] is not None]


def report(
    run_dirs: list[str | Path], out: str | Path, *, title: str = "eagle3kit report"
) -> dict[str, Any]:
    """Write OUT/report.md (+ its PNGs) and OUT/report.html; returns what was written and found
    (``run_dirs``: run directories or JSON files)."""
    from eagle3kit.core.atomic import atomic_write_bytes, atomic_write_text

    f = collect(run_dirs)
    blocks = headline(f) + story.story_blocks(f) + live_blocks(story.ordered_docs(f))
    blocks += sections.probe_live_blocks(f) + probe_blocks(f) + sections.eval_blocks(f)
    lengths, length_figs = by_length.blocks(f)
    blocks += sections.plan_blocks(f) + lengths + train_blocks(f) + sections.provenance_blocks(f)
    blocks += game_plan(f)
    figs = figure_blocks(f) + length_figs
    blocks += [("h2", "Figures")] + figs if figs else []
    blocks += sections.skipped_blocks(f)
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
    atomic_write_text(out / "report.md", to_md(blocks, title))
    atomic_write_text(out / "report.html", to_html(blocks, title))
    return stamp(_result(out, figs, f), "report")


def _result(out: Path, figs: list[tuple], f: Found) -> dict[str, Any]:
    return {
        "report_md": str(out / "report.md"),
        "report_html": str(out / "report.html"),
        "figures": [b[1] for b in figs],
        "found": {
            "probe": [c for c, _ in f.probes],
            "bench": [c for c, _ in f.benches],
            "train": [c for c, *_ in f.runs],
            "plan": [c for c, _ in f.plans],
            "bench_live": [c for c, _ in f.lives],
            "eval": [c for c, _ in f.evals],
            "probe_live": [c for c, _ in f.probe_lives],
        },
        "skipped": f.skipped,
    }
