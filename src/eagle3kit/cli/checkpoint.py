"""CLI verbs on checkpoints: inspect, compat, convert (headers only, except convert)."""

from __future__ import annotations

from typing import Annotated

import typer

from eagle3kit.cli._options import JsonFlag
from eagle3kit.cli._render import emit_json, err, out
from eagle3kit.core import registry
from eagle3kit.core.errors import bad


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def _inspect_failures(r: dict) -> list[str]:
    """What makes `inspect` exit 1: a broken vocab map, shapes that disagree with the config,
    a tensor a servable drafter must carry."""
    if r.get("role") != "drafter":
        return []
    out = [p["message"] for p in (r.get("vocab_map") or {}).get("problems", [])]
    out += [
        f"{m['name']}: expected shape {m['expected']} from the config, found {m['found']}"
        for m in r.get("shape_mismatches", [])
    ]
    out += [f"{n}: missing (a servable drafter needs it)" for n in r.get("missing", [])]
    return out


def _render_target(r: dict) -> None:
    con = out()
    t = r["target"]
    con.print(
        f"[bold]{r['source']}[/]: target model [cyan]{t['architecture']}[/] ({t['model_type']})"
    )
    con.print(
        f"  layers {t['num_layers']}, hidden size {t['hidden_size']}, vocab {t['vocab_size']}, "
        f"max positions {t['max_position_embeddings']}"
    )
    con.print(f"  default EAGLE-3 aux layers (HF hidden-state indices): {t['default_aux_layers']}")
    con.print(
        f"  {len(r['tensors'])} tensors, {_fmt_bytes(r['total_bytes'])}; tokenizer: "
        f"{'yes' if r['has_tokenizer'] else 'no'}"
    )
    for _, part in registry.parts("checkpoint"):  # the drafters a target ships (MTP heads)
        for line in getattr(part, "target_lines", lambda r: [])(r):
            con.print(line, markup=False, highlight=False)
    part = r.get("partial")
    if part:
        sh = part["shards"]
        con.print(
            f"  partial: {part['tensors']} more tensors are in {len(sh)} shard(s) not here "
            f"({', '.join(sh[:3])}{', ...' if len(sh) > 3 else ''}); commands that read only "
            "the embedding, final norm and lm_head use it as is"
        )


def _render_spec(con, r: dict) -> None:
    """A drafter's DraftSpec in a few lines."""
    from eagle3kit.core.spec import NORM_FLAGS

    s = r["spec"]
    con.print(
        f"[bold]{r['source']}[/]: EAGLE-3 drafter, [cyan]{r['format']}[/] layout "
        f"({s['architecture']})"
    )
    aux = s["aux_layers"]
    aux_s = (
        f"{aux} (HF hidden-state indices"
        + (
            f"; file says {s['aux_layers_raw']} in SGLang's convention)"
            if s["aux_convention"] == "sglang"
            else ")"
        )
        if aux
        else "not recorded: engines use (2, L//2, L-3)"
    )
    con.print(
        f"  hidden {s['hidden_size']} (target {s['target_hidden_size']}), intermediate "
        f"{s['intermediate_size']}, "
        f"heads {s['num_attention_heads']}/{s['num_key_value_heads']} x {s['head_dim']}, vocab "
        f"{s['draft_vocab_size']} of {s['vocab_size']}"
    )
    con.print(
        f"  aux layers: {aux_s}; dtype {s['dtype']}; max positions {s['max_position_embeddings']}"
    )
    flags = [f for f in (*NORM_FLAGS, "qk_norm") if s[f]]
    con.print(f"  flags: {', '.join(flags) if flags else 'none'} -> {r['variant']}")
    if s.get("sliding_window"):
        con.print(f"  sliding window: {s['sliding_window']} positions (`compat` per engine)")
    if s["attention"] == "mla":
        con.print(
            f"  attention: MLA (q_lora {s['q_lora_rank']}, kv_lora {s['kv_lora_rank']}, nope "
            f"{s['qk_nope_head_dim']} "
            f"+ rope {s['qk_rope_head_dim']}, v {s['v_head_dim']}, rope_scaling "
            f"{s['rope_scaling']})"
        )


def _method_lines(r: dict) -> list[str] | None:
    """The few lines a drafter's method part writes about it (None: EAGLE-3's own render)."""
    from eagle3kit.core import registry

    found = registry.family(r.get("method"))
    part = registry.part(found.name, "checkpoint") if found else None
    lines = getattr(part, "summary_lines", None)
    return lines(r) if lines is not None else None


def _render_drafter(r: dict) -> None:
    """The spec in a few lines, the tensor table, the vocab map, mismatches, errors."""
    from rich.table import Table

    con = out()
    lines = _method_lines(r)
    if lines is None:
        _render_spec(con, r)
    for line in lines or ():
        con.print(line, markup=False, highlight=False)
    table = Table(show_lines=False)
    for col in ("name", "shape", "dtype", "bytes", "role"):
        table.add_column(col, overflow="fold")
    for t in r["tensors"]:
        role = t.get("role") or t.get("canonical", "")
        table.add_row(t["name"], str(t["shape"]), t["dtype"], _fmt_bytes(t["bytes"]), role)
    con.print(table)
    con.print(f"  total {_fmt_bytes(r['total_bytes'])}")
    if r.get("vocab_map"):
        vm = r["vocab_map"]
        parts = []
        if "d2t" in vm:
            parts.append(
                f"d2t -> target ids {vm['d2t']['target_min']}..{vm['d2t']['target_max']}, "
                f"{vm['d2t']['out_of_range']} out of range"
            )
        if "t2d" in vm:
            parts.append(f"t2d marks {vm['t2d']['count']} ids")
        con.print("  vocab map: " + "; ".join(parts))
    for m in r["shape_mismatches"]:
        con.print(
            f"  [red]shape mismatch[/] {m['name']}: expected {m['expected']}, found {m['found']}"
        )
    con.print(f"  missing: {', '.join(r['missing']) or 'none'}")
    con.print(f"  unexpected: {', '.join(r['unexpected']) or 'none'}")
    for f in _inspect_failures(r):
        con.print(f"  [red]error[/] {f}", markup=True, highlight=False)


def _render_compat(r) -> None:
    """compat's findings for a person: tables of config and tensor differences, what each
    engine captures, the findings (engine or drafter in brackets), the verdict."""
    from rich.markup import escape
    from rich.table import Table

    from eagle3kit.checkpoint.findings import trained_on_words

    con = out()
    con.print(f"[bold]compat[/] ({r.mode}): A = {r.a}, B = {r.b}")
    if r.config_diff:
        t = Table(title="config differences")
        for col in ("key", "A", "B", "kind"):
            t.add_column(col, overflow="fold")
        for row in r.config_diff:
            t.add_row(row["key"], repr(row["a"]), repr(row["b"]), row["kind"])
        con.print(t)
    if r.tensors:
        t = Table(title="tensors")
        for col in ("name", "A", "B", "status"):
            t.add_column(col, overflow="fold")
        for row in r.tensors:
            fa = f"{row['a']['shape']} {row['a']['dtype']}" if row["a"] else "-"
            fb = f"{row['b']['shape']} {row['b']['dtype']}" if row["b"] else "-"
            style = "green" if row["status"] == "match" else "yellow"
            t.add_row(row["name"], fa, fb, f"[{style}]{row['status']}[/]")
        con.print(t)
    for e in r.engines.values():
        con.print(
            escape(
                f"  {e['label']}: captures h{e['captures']} ({e['why']}); "
                f"drafter trained on {trained_on_words(e['trained_on'])}"
            )
        )
    colour = {"error": "red", "warning": "yellow", "info": "blue"}
    for f in r.findings:
        tags = [t for t in (f.drafter, f.engine) if t]
        tag = escape(f" [{', '.join(tags)}]") if tags else ""
        con.print(f"  [{colour[f.severity]}]{f.severity:7}[/] {f.code}{tag}: {escape(f.message)}")
    con.print(f"[bold {'green' if r.compatible else 'red'}]verdict: {escape(r.verdict)}[/]")


CheckpointPath = Annotated[
    str,
    typer.Argument(help="Drafter or target: a local dir, a .safetensors file, or a Hub repo id."),
]


def inspect(path: CheckpointPath, json_out: JsonFlag = False) -> None:
    """Format, DraftSpec and every tensor of a drafter (or a target's layers), from headers.

    Exit 1 when the drafter is broken (vocab map, shapes vs config, a required tensor
    missing)."""
    from eagle3kit.checkpoint.inspection import inspect_checkpoint

    r = inspect_checkpoint(path)
    if json_out:
        emit_json(r)
    elif r["role"] == "target":
        _render_target(r)
        return
    else:
        _render_drafter(r)
    if _inspect_failures(r):
        raise typer.Exit(1)


Drafter = Annotated[str, typer.Argument(metavar="DRAFTER", help="A drafter (or a target).")]
Other = Annotated[
    str,
    typer.Argument(
        metavar="OTHER",
        help="Another drafter (fine-tuning question) or the target (serving question).",
    ),
]
Engine = Annotated[
    str,
    typer.Option(
        help="sglang, vllm or both, each optionally @VERSION (sglang@0.5.12, vllm@0.21); "
        "without a version, the latest rules plus a warning naming older releases that "
        "differ.",
    ),
]


NumSpecTokens = Annotated[
    int | None,
    typer.Option(
        "--num-speculative-tokens",
        min=1,
        help="DFlash: the K you will serve with, checked against the drafter's block "
        "(B - 1 proposals, B with sample_from_anchor).",
    ),
]


def compat(
    a: Drafter,
    b: Other,
    engine: Engine = "both",
    num_speculative_tokens: NumSpecTokens = None,
    json_out: JsonFlag = False,
) -> None:
    """Drafter vs drafter: drop-in for fine-tuning? Drafter vs target: served right?

    A drafter of any method that reads checkpoints (inspect names it). Exit 0 when no error
    is found, 1 when any is, 2 on bad input."""
    from eagle3kit.checkpoint.compat import compat as run_compat

    r = run_compat(a, b, engine, num_speculative_tokens)
    if json_out:
        emit_json(r.to_json())
    else:
        _render_compat(r)
    if not r.compatible:
        raise typer.Exit(1)


Src = Annotated[
    str,
    typer.Argument(
        help="Drafter to convert (any layout), or a target with --extract-mtp / --stitch-mtp."
    ),
]
To = Annotated[
    str | None,
    typer.Option(
        "--to",
        help="EAGLE-3: sglang, vllm or eagle. DFlash: zlab or speculators. P-EAGLE: "
        "speculators or vllm.",
    ),
]
Output = Annotated[
    str | None,
    typer.Option("-o", "--output", help="Output directory (must not exist or be empty)."),
]
ExtractMtp = Annotated[
    bool,
    typer.Option("--extract-mtp", help="Write the target's MTP head (--mtp-index) to -o."),
]
StitchMtp = Annotated[
    str | None,
    typer.Option(
        "--stitch-mtp",
        metavar="DRAFTER",
        help="Put this extracted (fine-tuned) MTP head back into the target SRC, in place.",
    ),
]
MtpIndex = Annotated[int, typer.Option("--mtp-index", min=0, help="Which MTP head (0 = first).")]
Verifier = Annotated[
    str | None,
    typer.Option(
        metavar="TARGET",
        help="Target model name/path, recorded in the config and the launch command "
        "(default: the one the source names).",
    ),
]
EmbedFrom = Annotated[
    str | None,
    typer.Option(
        "--embed-from",
        metavar="TARGET",
        help="Copy this target's input embedding into the drafter file.",
    ),
]

CastDtype = Annotated[
    str | None,
    typer.Option(
        "--dtype",
        help="With --embed-from: cast the target's embedding/lm_head to the drafter's dtype "
        "when the target stores another ('auto', or the drafter's dtype by name); the "
        "drafter's own tensors are copied byte for byte.",
    ),
]


def _print_launch(lines: dict[str, str] | str) -> None:
    con = out()
    con.print("serve it with:")
    for line in lines.values() if isinstance(lines, dict) else [lines]:
        con.print(line, soft_wrap=True, markup=False, highlight=False)


def _convert_mtp(src: str, output: str | None, stitch: str | None, index: int, js: bool) -> None:
    from eagle3kit.cli._checks import check_output

    head = registry.target_head()  # the method whose drafter ships inside the target
    heads = registry.part(head.name, "checkpoint")
    if stitch is not None:
        r = heads.stitch_mtp(src, stitch)
    else:
        if output is None:
            raise bad("-o", "missing: --extract-mtp writes the head to a new directory")
        check_output(output, "-o", src, kind="dir")
        r = heads.extract_mtp(src, output, index)
    if js:
        emit_json(r.to_json())
        return
    doc = r.to_json()
    if doc["action"] == "extract":
        h = doc["head"]
        out().print(
            f"extracted MTP head {h['index']} ({h['style']}, {h['prefix']}*, "
            f"{doc['tensors']} tensors) of {src} -> {doc['out']}"
        )
        return
    out().print(
        f"stitched {stitch} into {src}: new shard {doc['new_shard']}; rewritten "
        f"{doc['rewritten'] or 'none'}; untouched {len(doc['untouched'])} shard(s)"
    )
    _print_launch({"vllm": registry.launch_lines(head.name, 1, src, None)["vllm"]})


def convert(
    *,
    src: Src,
    to: To = None,
    output: Output = None,
    verifier: Verifier = None,
    embed_from: EmbedFrom = None,
    dtype: CastDtype = None,
    extract_mtp: ExtractMtp = False,
    stitch_mtp: StitchMtp = None,
    mtp_index: MtpIndex = 0,
    json_out: JsonFlag = False,
) -> None:
    """Rewrite a drafter in another layout with every flag explicit; extract or stitch an
    MTP head of a target.

    Refuses (exit 2, nothing written) a drafter with a broken config, shapes or vocab map, and
    any conversion the destination cannot represent."""
    from eagle3kit.checkpoint.eagle3.convert import convert as run_convert
    from eagle3kit.checkpoint.io.hub_files import open_checkpoint
    from eagle3kit.checkpoint.method_convert import convert_method
    from eagle3kit.checkpoint.methods import method_header_of
    from eagle3kit.cli._checks import check_output

    if extract_mtp or stitch_mtp is not None:
        if to is not None or (extract_mtp and stitch_mtp is not None):
            raise bad("--extract-mtp/--stitch-mtp", "expected one of them, without --to")
        return _convert_mtp(src, output, stitch_mtp, mtp_index, json_out)
    if to is None or output is None:
        raise bad("--to" if to is None else "-o", "missing (expected --to LAYOUT -o DIR)")
    check_output(output, "-o", src, embed_from, verifier, kind="dir")
    head = method_header_of(open_checkpoint(src))
    if head is not None:
        r = convert_method(head, to, output, embed_from=embed_from, verifier=verifier, dtype=dtype)
    else:
        if dtype is not None:  # EAGLE-3's --embed-from embedding takes the drafter's dtype
            raise bad("--dtype", "expected none for an EAGLE-3 drafter (--embed-from casts)")
        r = run_convert(src, to, output, verifier=verifier, embed_from=embed_from)
    if json_out:
        emit_json(r.to_json())
        return
    con = out()
    con.print(f"converted {r.source} ({r.from_layout}) -> {r.out} ({r.to_layout})")
    for n in r.notes:
        err().print(f"note: {n}")
    _print_launch(r.launch)


def register(app: typer.Typer) -> None:
    app.command()(inspect)
    app.command()(compat)
    app.command()(convert)
