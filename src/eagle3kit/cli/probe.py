"""`eagle3kit probe` (Phase 0: reuse a sibling's drafter?) and `eagle3kit report` (the game
plan)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from eagle3kit.cli._checks import above_zero, check_device
from eagle3kit.cli._options import ByLength, Documents, JsonFlag, LengthsCommand


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


LIVE_NEW = "Live: the server of the NEW target running the drafter (SGLang or vLLM)."
LIVE_OLD = "Live: the server of the target the drafter was trained for, same drafter."
LIVE_BASE = "Live: the NEW target's plain server (the speedup then counts in the verdict)."
LIVE_SUITE = "Live: mt-bench,gsm8k,humaneval,math-500,chat or NAME=FILE; --samples caps each."


Drafter = Annotated[
    str | None, typer.Option("--drafter", help="The drafter to reuse (any layout).")
]
Method = Annotated[
    str,
    typer.Option(
        "--method",
        help="eagle3 or dflash (--drafter: the drafter dir; its layout tells which) or mtp "
        "(an MTP head: the reference target's own, or --drafter HEAD_DIR; docs/probe.md).",
    ),
]
Target = Annotated[
    str | None,
    typer.Option("--target", help="The new target: a model dir, a hub id or a zoo member name."),
]
Reference = Annotated[
    str | None,
    typer.Option(
        "--reference-target",
        help="The target the drafter was trained for (dir, hub id or zoo name).",
    ),
]
Data = Annotated[
    str | None,
    typer.Option("--data", help="Prepared data dir (default: built-in stdlib conversations)."),
]
BaselineTps = Annotated[
    float | None, typer.Option(callback=above_zero, help="Plain decoding tok/s.")
]
CycleMs = Annotated[
    float | None, typer.Option(callback=above_zero, help="One speculative cycle, ms.")
]
Bench = Annotated[
    str | None,
    typer.Option(
        help="bench JSON (bench --json, bench --url --json, or baseline_tps and cycle_ms)."
    ),
]
Depth = Annotated[int, typer.Option(min=1, help="Draft steps scored.")]
Samples = Annotated[int, typer.Option(min=1, help="Sequences to probe on.")]
OnlinePrompts = Annotated[
    int, typer.Option(min=0, help="Prompts decoded for the online accept length (0: none).")
]
Device = Annotated[str, typer.Option(callback=check_device, help="cpu, cuda, cuda:1 ...")]
Dtype = Annotated[str, typer.Option(help="float32 or bfloat16.")]
Url = Annotated[str | None, typer.Option("--url", help=LIVE_NEW)]
ReferenceUrl = Annotated[str | None, typer.Option("--reference-url", help=LIVE_OLD)]
BaselineUrl = Annotated[str | None, typer.Option("--baseline-url", help=LIVE_BASE)]
Suite = Annotated[str | None, typer.Option("--suite", help=LIVE_SUITE)]
MaxNewTokens = Annotated[int, typer.Option("--max-new-tokens", help="Live.")]
Repeats = Annotated[int, typer.Option("--repeats", help="Live: rounds.")]
Endpoint = Annotated[
    str,
    typer.Option(
        "--endpoint",
        help="Live: chat|completions|generate (with --by-length: completions or generate).",
    ),
]
Timeout = Annotated[float, typer.Option("--timeout", help="Live: bound on the run, s.")]
FeaturesNew = Annotated[
    str | None,
    typer.Option(
        "--features-new",
        help="A feature store of the new target (`data capture`, e.g. --engine vllm): "
        "probe without loading it (--target, --reference-target: where embeddings and "
        "config are read by header; default: the stores' own record).",
    ),
]
FeaturesOld = Annotated[
    str | None,
    typer.Option(
        "--features-old",
        "--reference-features",
        help="The reference target's store of the same DATA (no target loaded).",
    ),
]
MaxLen = Annotated[int, typer.Option(help="Tokens per sequence.")]


@dataclass(frozen=True)
class LocalProbe:
    """The options of a probe run here (models or feature stores), as given."""

    drafter: str | None
    target: str | None
    reference: str | None
    data: str | None
    features_new: str | None
    features_old: str | None
    online_prompts: int
    device: str
    dtype: str
    baseline_tps: float | None
    cycle_ms: float | None
    bench: str | None
    depth: int
    samples: int
    max_len: int
    method: str = "eagle3"


def _from_stores(drafter, target, data, features_new, features_old) -> bool:
    """Whether the local probe reads feature stores (else it loads the models); exit 2 on a
    combination of options it cannot run."""
    if drafter is None or (target is None and features_new is None):
        raise typer.BadParameter(
            "expected --drafter and --target (or --features-new STORE, or --url and "
            "--reference-url)"
        )
    from eagle3kit.core.errors import Eagle3Error

    stores = features_new is not None or features_old is not None
    if stores and (features_new is None or data is not None):
        raise Eagle3Error(
            "probe: --features-old (--reference-features) goes with --features-new, not --data"
        )
    if not stores and target is None:
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


def probe(
    *,
    drafter: Drafter = None,
    target: Target = None,
    reference: Reference = None,
    data: Data = None,
    baseline_tps: BaselineTps = None,
    cycle_ms: CycleMs = None,
    bench: Bench = None,
    depth: Depth = 3,
    samples: Samples = 16,
    online_prompts: OnlinePrompts = 4,
    device: Device = "cpu",
    dtype: Dtype = "float32",
    json_out: JsonFlag = False,
    url: Url = None,
    reference_url: ReferenceUrl = None,
    baseline_url: BaselineUrl = None,
    suite: Suite = None,
    max_new_tokens: MaxNewTokens = 128,
    repeats: Repeats = 3,
    endpoint: Endpoint = None,
    timeout: Timeout = 600.0,
    features_new: FeaturesNew = None,
    features_old: FeaturesOld = None,
    max_len: MaxLen = 256,
    method: Method = "eagle3",
    by_length: ByLength = None,
    documents: Documents = None,
) -> None:
    """Phase 0: can a drafter trained for one target serve a sibling? Similarity, acceptance,
    verdict.

    Exit 0 with a verdict (plug-in, fine-tune, from-scratch); 2 on bad input. With --url and
    --reference-url: the online half against two running servers (docs/live.md). With
    --by-length, also the tau-by-context-length curve on NEW and OLD."""
    from eagle3kit.data.long_prompts import parse_lengths

    lengths = None if by_length is None else parse_lengths(by_length)
    if url or reference_url:
        from eagle3kit.cli import live

        opts = live.LiveOptions(
            urls=[u for u in (url, reference_url) if u],
            baseline_url=baseline_url,
            suite=suite,
            data=data,
            prompts=samples,
            max_new_tokens=max_new_tokens,
            repeats=repeats,
            endpoint=endpoint,
            timeout=timeout,
            json_=json_out,
            depth=depth,
            lengths=lengths,
            target=target,
            documents=documents,
        )
        return live.run_probe(opts, url, reference_url)
    _check_method(method, target)
    stores = not _target_head(method) and _from_stores(
        drafter, target, data, features_new, features_old
    )
    if lengths and (stores or _target_head(method)):
        from eagle3kit.core.errors import bad

        raise bad(
            "--by-length",
            "expected a drafter dir and the models (the prompts are "
            "decoded), found feature stores or a target's own head",
        )
    a = LocalProbe(
        drafter=drafter,
        target=target,
        reference=reference,
        data=data,
        features_new=features_new,
        features_old=features_old,
        online_prompts=online_prompts,
        device=device,
        dtype=dtype,
        baseline_tps=baseline_tps,
        cycle_ms=cycle_ms,
        bench=bench,
        depth=depth,
        samples=samples,
        max_len=max_len,
        method=method,
    )
    _run_local(a, stores, lengths, max_new_tokens, documents, json_out)


def _run_local(a: LocalProbe, stores: bool, lengths, max_new_tokens, documents, json_out) -> None:
    """The in-process probe (from the models or from feature stores), with its curve by
    context length when asked; printed or as JSON."""
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json

    with bar(not json_out) as progress:
        r = (_probe_stores if stores else _probe_models)(a, progress)
        if lengths:
            r = _with_curve(r, a, lengths, max_new_tokens, documents)
    if json_out:
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
    app.command(cls=LengthsCommand)(probe)
    app.command()(report)


def _probe_models(a: LocalProbe, progress: Any) -> dict[str, Any]:
    """`probe --drafter --target`: the probe with the models loaded here (``a``: the command's
    arguments)."""
    from eagle3kit.measure.probe import probe as run_probe
    from eagle3kit.model.loading import resolve_target

    reference = a.reference
    return run_probe(
        a.drafter,
        resolve_target(a.target),  # zoo names, local dirs, hub ids
        resolve_target(reference) if reference else None,
        a.data,
        **_shared(a),
        online_prompts=a.online_prompts,
        method=a.method,
        device=a.device,
        dtype=a.dtype,
        progress=progress,
    )


def _probe_stores(a: LocalProbe, progress: Any) -> dict[str, Any]:
    """`probe --features-new [--features-old]`: the probe from feature stores (``a``: the
    command's arguments)."""
    from eagle3kit.measure.probe_features import probe_features

    return probe_features(
        a.drafter,
        a.features_new,
        a.features_old,
        target=a.target,
        reference=a.reference,
        **_shared(a),
        progress=progress,
    )


def _with_curve(r: dict, a: LocalProbe, lengths, max_new: int, documents) -> dict[str, Any]:
    """The probe's document with `by_length`: tau by context length on NEW and OLD, from
    `--online-prompts` prompts per length decoded on each (the pair loaded again)."""
    from eagle3kit.data.long_prompts import long_prompts
    from eagle3kit.measure.by_length import probe_curve, tau_curve
    from eagle3kit.model.loading import load_for

    new, d = load_for(a.target, a.drafter, a.method, device=a.device)
    positions = getattr(new.config, "max_position_embeddings", None)
    ps, src = long_prompts(
        new.tokenizer,
        lengths,
        a.online_prompts,
        prompts_file=documents,
        new_tokens=max_new,
        max_positions=positions,
    )
    curve_new = tau_curve(new, d, ps, a.depth, max_new)
    curve_old = None
    if a.reference:
        old, d_old = load_for(a.reference, a.drafter, a.method, device=a.device)
        curve_old = tau_curve(old, d_old, ps, a.depth, max_new)
    entries = probe_curve(curve_new, curve_old, a.online_prompts)
    return {**r, "lengths": list(lengths), "by_length": entries, "prompt_source": src}


def _shared(a: LocalProbe) -> dict[str, Any]:
    """The options both probes take: the speeds behind break-even, depth and the sample."""
    keys = ("baseline_tps", "cycle_ms", "bench", "depth", "samples", "max_len")
    return {k: getattr(a, k) for k in keys}
