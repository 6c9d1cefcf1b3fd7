"""`eagle3kit probe` (Phase 0: reuse a sibling's drafter?) and `eagle3kit report` (the game
plan)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from eagle3kit.cli._checks import check_device
from eagle3kit.cli._command import command
from eagle3kit.cli._options import JsonFlag, LengthsCommand
from eagle3kit.cli.probe_options import ProbeOptions


def _render_probe(r: dict[str, Any]) -> None:
    from eagle3kit.cli._render import out

    con = out()
    con.print(
        f"[bold]probe[/]: {r.get('method', 'drafter')} {r['drafter'] or 'head'} on {r['target']}"
        + (f" (reference {r['reference']})" if r["reference"] else "")
    )
    con.print(f"  compat: {r['compat']['verdict']}")
    if r.get("data"):
        d = r["data"]
        con.print(
            f"  data: {d['source']}: {d['sequences']} sequences, {d['tokens']} tokens, "
            f"{d['scored']} scored" + (f" ({d['heldout']['rule']})" if d.get("heldout") else "")
        )
    if r.get("aux"):
        _render_aux(con, r["aux"])
    if r["similarity"]:
        con.print(_similarity_table(r))
    al = r["tau_every_position"]
    if al["target"] is not None:
        ref = f", reference {al['reference']:.3f}" if al["reference"] is not None else ""
        con.print(f"  tau_every_position (depth {r['depth']}): target {al['target']:.3f}{ref}")
        for k, v in (r.get("tau_online") or {}).items():
            if v:
                con.print(f"  tau_online: {k} {v['tau_online']:.3f} over {v['cycles']} cycles")
    for e in r.get("by_length") or []:
        t, kept = e["tau"], e["retention"]
        ref = f", reference {t['reference']:.3f}" if t["reference"] is not None else ""
        keep = f", keeps {kept:.0%}" if kept is not None else ""
        con.print(f"  context {e['context_length']}: tau_online new {t['new']:.3f}{ref}{keep}")
    for why in r["reasons"]:
        con.print(f"  - {why}")
    for w in r.get("warnings") or []:
        con.print(f"  [yellow]warning[/]: {w}", highlight=False)
    colour = {"plug-in": "green", "fine-tune": "yellow", "from-scratch": "red"}[r["verdict"]]
    con.print(f"[bold {colour}]verdict: {r['verdict']}[/]")


def _render_aux(con: Any, aux: dict[str, Any]) -> None:
    """The aux readings tried, the one chosen, and what each engine captures."""
    for c in aux["candidates"]:
        a = aux["acceptance"].get(c["reading"])
        if a is None:  # a store without this reading's layers
            con.print(f"  aux {c['reading']} = h{c['layers']}: not in the store, not tested")
            continue
        mark = "  <- chosen" if c["reading"] == aux["chosen"]["reading"] else ""
        decl = " (the config's reading)" if c["declared"] else ""
        con.print(
            f"  aux {c['reading']} = h{c['layers']}{decl}: acc "
            f"{[round(x, 3) for x in a['acc']]}, "
            f"tau_every_position {a['tau_every_position']:.3f}{mark}"
        )
    ch = aux["chosen"]
    con.print(
        f"  trained on h{ch['layers']} (margin {ch['margin_tau_every_position']}, "
        f"{'clear' if ch['clear'] else 'uncertain'})"
    )
    for eng, e in aux["engines"].items():
        verdict = "ok" if e["ok"] else "WRONG: " + e["fix"]
        con.print(f"  {eng}: captures h{e['captures']}: {verdict}")


def _similarity_table(r: dict[str, Any]) -> Any:
    """The hidden-state similarity table, reference vs target, with the fc(aux) row."""
    from rich.table import Table

    t = Table(title="hidden-state similarity, reference vs target")
    for col in ("layer", "cosine mean", "cosine p10", "CKA", "norm ratio"):
        t.add_column(col)
    fc = [{"layer": "fc(aux)", **r["fc_similarity"]}] if r.get("fc_similarity") else []
    for s in [*r["similarity"], *fc]:
        t.add_row(
            str(s["layer"]),
            f"{s['cosine_mean']:.4f}",
            f"{s['cosine_p10']:.4f}",
            f"{s['cka']:.4f}",
            f"{s['norm_ratio']:.3f}",
        )
    return t


def _from_stores(o: ProbeOptions) -> bool:
    """Whether the local probe reads feature stores (else it loads the models); exit 2 on a
    combination of options it cannot run."""
    if o.drafter is None or (o.target is None and o.features_new is None):
        raise typer.BadParameter(
            "expected --drafter and --target (or --features-new STORE, or --url and "
            "--reference-url)"
        )
    from eagle3kit.core.errors import Eagle3Error

    stores = o.features_new is not None or o.features_old is not None
    if stores and (o.features_new is None or o.data is not None):
        raise Eagle3Error(
            "probe: --features-old (--reference-features) goes with --features-new, not --data"
        )
    if not stores and o.target is None:
        raise Eagle3Error("probe: expected --target (or --features-new STORE)")
    return stores


def _target_head(method: str) -> bool:
    """The method's drafter ships inside the target (its MTP head): models, not stores."""
    from eagle3kit.core import registry

    return registry.get(method).target_head


def _check_method(method: str, target: str | None) -> None:
    from eagle3kit.core import registry

    probed = registry.names(can="probe")
    if method not in probed:
        from eagle3kit.core.errors import bad

        raise bad(
            "--method", f"expected {', '.join(probed[:-1])} or {probed[-1]}, found {method!r}"
        )
    if registry.get(method).target_head and target is None:
        raise typer.BadParameter(f"--method {method}: expected --target (and --reference-target)")


def probe(o: ProbeOptions) -> None:
    """Phase 0: can a drafter trained for one target serve a sibling? Similarity, acceptance,
    verdict.

    Exit 0 with a verdict (plug-in, fine-tune, from-scratch); 2 on bad input. With --url and
    --reference-url: the online half against two running servers (docs/live.md). With
    --by-length, also the tau-by-context-length curve on NEW and OLD."""
    from eagle3kit.data.long_prompts import parse_lengths

    check_device(o.device)
    lengths = None if o.by_length is None else parse_lengths(o.by_length)
    if o.url or o.reference_url:
        from eagle3kit.cli import live

        urls = [u for u in (o.url, o.reference_url) if u]
        opts = live.LiveOptions.of(o, urls=urls, prompts=o.samples, depth=o.depth, lengths=lengths)
        return live.run_probe(opts, o.url, o.reference_url)
    _check_method(o.method, o.target)
    stores = not _target_head(o.method) and _from_stores(o)
    if lengths and (stores or _target_head(o.method)):
        from eagle3kit.core.errors import bad

        raise bad(
            "--by-length",
            "expected a drafter dir and the models (the prompts are "
            "decoded), found feature stores or a target's own head",
        )
    _run_local(o, stores, lengths)


def _run_local(o: ProbeOptions, stores: bool, lengths: tuple[int, ...] | None) -> None:
    """The in-process probe (from the models or from feature stores), with its curve by
    context length when asked; printed or as JSON."""
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json

    with bar(not o.json_) as progress:
        r = (_probe_stores if stores else _probe_models)(o, progress)
        if lengths:
            r = _with_curve(r, o, lengths)
    if o.json_:
        emit_json(r)
    else:
        _render_probe(r)


RunDirs = Annotated[
    list[str],
    typer.Argument(
        help="Run directories or JSON files: every eagle3kit JSON in them is rendered or "
        "listed as skipped, with why."
    ),
]
Out = Annotated[str, typer.Option("-o", "--out", help="Output directory.")]
Title = Annotated[str, typer.Option(help="Report title.")]


def report(
    run_dirs: RunDirs,
    out: Out,
    title: Title = "eagle3kit report",
    json_out: JsonFlag = False,
) -> None:
    """Write report.md and a self-contained report.html (plots inline) from the runs' JSON
    artefacts."""
    from eagle3kit.cli._checks import check_output
    from eagle3kit.cli._render import emit_json, err
    from eagle3kit.cli._render import out as stdout
    from eagle3kit.report import report as run_report

    check_output(out, "-o", *run_dirs, kind="dir")
    r = run_report(run_dirs, out, title=title)
    if json_out:
        emit_json(r)
    else:
        stdout().print(
            f"wrote {r['report_md']} and {r['report_html']} ({len(r['figures'])} figures)"
        )
        for why in r["skipped"]:
            err().print(f"skipped {why}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("probe", cls=LengthsCommand)(command(ProbeOptions, probe))
    app.command()(report)


def _probe_models(o: ProbeOptions, progress: Any) -> dict[str, Any]:
    """`probe --drafter --target`: the probe with the models loaded here."""
    from eagle3kit.measure.probe import probe as run_probe
    from eagle3kit.model.loading import resolve_target

    reference = o.reference_target
    return run_probe(
        o.drafter,
        resolve_target(o.target),  # zoo names, local dirs, hub ids
        resolve_target(reference) if reference else None,
        o.data,
        **_shared(o),
        online_prompts=o.online_prompts,
        method=o.method,
        device=o.device,
        dtype=o.dtype,
        progress=progress,
    )


def _probe_stores(o: ProbeOptions, progress: Any) -> dict[str, Any]:
    """`probe --features-new [--features-old]`: the probe from feature stores."""
    from eagle3kit.measure.probe_features import probe_features

    return probe_features(
        o.drafter,
        o.features_new,
        o.features_old,
        target=o.target,
        reference=o.reference_target,
        **_shared(o),
        progress=progress,
    )


def _with_curve(r: dict, o: ProbeOptions, lengths: tuple[int, ...]) -> dict[str, Any]:
    """The probe's document with `by_length`: tau by context length on NEW and OLD, from
    `--online-prompts` prompts per length decoded on each (the pair loaded again)."""
    from eagle3kit.data.long_prompts import long_prompts
    from eagle3kit.measure.by_length import probe_curve, tau_curve
    from eagle3kit.model.loading import load_for

    max_new = o.max_new_tokens
    new, d = load_for(o.target, o.drafter, o.method, device=o.device)
    positions = getattr(new.config, "max_position_embeddings", None)
    ps, src = long_prompts(
        new.tokenizer,
        lengths,
        o.online_prompts,
        prompts_file=_path(o.documents),
        new_tokens=max_new,
        max_positions=positions,
    )
    curve_new = tau_curve(new, d, ps, o.depth, max_new)
    curve_old = None
    if o.reference_target:
        old, d_old = load_for(o.reference_target, o.drafter, o.method, device=o.device)
        curve_old = tau_curve(old, d_old, ps, o.depth, max_new)
    entries = probe_curve(curve_new, curve_old, o.online_prompts)
    return {**r, "lengths": list(lengths), "by_length": entries, "prompt_source": src}


def _path(p: str | None) -> Any:
    """--documents as typer gave it before (a Path), or None."""
    from pathlib import Path

    return None if p is None else Path(p)


def _shared(o: ProbeOptions) -> dict[str, Any]:
    """The options both probes take: the speeds behind break-even, depth and the sample."""
    keys = ("baseline_tps", "cycle_ms", "bench", "depth", "samples", "max_len")
    return {k: getattr(o, k) for k in keys}
