"""CLI verbs: `eagle3kit zoo list|build|verify` (and the maintainers' hidden `zoo ship`): the
built-in targets (eagle3kit.zoo)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from eagle3kit.cli._options import JsonFlag

SIZE_HELP = "full (demo, benchmarks) or tiny (seconds to build; tests)."


def _row(d: dict) -> list[str]:
    man = d["manifest"] or {}
    met = man.get("metrics", {})
    chat = met.get("chat", {})
    quality = f"{met['heldout_loss']:.2f} / {met['distinct4_mean']:.2f}" if met else "-"
    answers = (
        f"{chat['names_function']:.2f} / {chat['distinct_openings']:.2f} / "
        f"{chat['pooled_distinct4']:.2f}"
        if "pooled_distinct4" in chat
        else "-"
    )
    params = f"{man['params'] / 1e6:.2f}M" if man else "-"
    return [
        d["label"],
        d["architecture"],
        d["parent"] or "-",
        d["slice"],
        params,
        f"{d['bytes'] / 1e6:.1f}" if d["bytes"] else "-",
        (d["sha256"] or "-")[:12],
        quality,
        answers,
        _state(d),
    ]


def _state(d: dict) -> str:
    """'yes', 'yes (recipe changed since)' or 'no: eagle3kit zoo build NAME -o DIR'."""
    if not d["shipped"]:
        size = "" if d["size"] == "full" else f" --size {d['size']}"
        return f"no: eagle3kit zoo build {d['name']}{size} -o DIR"
    return "yes" if d["recipe_current"] else "yes (the code's recipe changed since)"


def _check_size(size: str) -> str:
    sizes = ("full", "tiny")  # eagle3kit.zoo.SIZES, without importing the zoo (torch) here
    if size not in sizes:
        from eagle3kit.core.errors import bad

        raise bad("--size", f"expected one of {', '.join(sizes)}, found {size!r}")
    return size


Size = Annotated[str, typer.Option(help=SIZE_HELP, callback=_check_size)]


def _check_list_size(size: str) -> str:
    return size if size == "all" else _check_size(size)


ListSize = Annotated[
    str,
    typer.Option(help="full, tiny, or all (both sizes).", callback=_check_list_size),
]


def list_(size: ListSize = "all", json_: JsonFlag = False) -> None:
    """List the zoo's members at each size as shipped in this package: size on disk, the
    weights' sha256, and the figures their build measured."""
    from eagle3kit import zoo
    from eagle3kit.cli._render import emit_json, out
    from eagle3kit.core.artifacts import stamp
    from eagle3kit.zoo.shipping import ROOT

    sizes = zoo.SIZES if size == "all" else (size,)
    rows = [zoo.describe(n, size=s) for s in sizes for n in zoo.names()]
    if json_:
        emit_json(stamp({"shipped_in": str(ROOT), "size": size, "members": rows}, "zoo"))
        return
    from rich.table import Table

    t = Table(
        title=f"eagle3kit zoo ({size}), shipped in {ROOT}",
        caption="held-out loss / continuation distinct-4; answers: names the function / "
        "distinct openings / pooled distinct-4 (docs/zoo.md). Check: eagle3kit zoo verify",
    )
    for col in (
        "member",
        "architecture",
        "parent",
        "data",
        "params",
        "MB",
        "sha256",
        "loss / distinct-4",
        "answers",
        "shipped",
    ):
        t.add_column(col)
    for d in rows:
        t.add_row(*_row(d))
    out().print(t)


Name = Annotated[str, typer.Argument(help="Member to build (llama-v1, ..., dsv3-v2).")]
Out = Annotated[
    Path,
    typer.Option("-o", "--out", help="Folder to build into (absent, empty, or an earlier build)."),
]
Parent = Annotated[
    Path | None,
    typer.Option(
        help="A v2's v1, built before with `zoo build -o` (default: built into the cache).",
    ),
]
Force = Annotated[bool, typer.Option("--force", help="Rebuild even when OUT holds a build.")]
Strict = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Refuse (exit 2) a member whose chat answers fall below the zoo's bar.",
    ),
]


def build(
    *,
    name: Name,
    out_dir: Out,
    size: Size = "full",
    parent: Parent = None,
    force: Force = False,
    strict: Strict = False,
    json_: JsonFlag = False,
) -> None:
    """Reproduce a member from its recipe into OUT (float32, as trained); compare it with
    the shipped one with `zoo verify OUT`. A v2 starts from its v1 (--parent, else built into
    $EAGLE3KIT_HOME/zoo first). A member below the zoo's chat bar is built with a warning
    unless --strict."""
    from eagle3kit import zoo
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json, out
    from eagle3kit.core.artifacts import stamp
    from eagle3kit.zoo.shipping import read_manifest

    zoo.member(name)  # a bad name fails before any work
    t0 = time.time()
    with bar(True) as progress:  # stderr, so --json stays one document on stdout
        p = zoo.build(
            name,
            size=size,
            out=out_dir,
            parent=parent,
            force=force,
            progress=progress,
            strict=strict,
        )
    doc = read_manifest(p) or {}
    result = {
        "name": name,
        "size": size,
        "path": str(p),
        "seconds": round(time.time() - t0, 2),
        "manifest": doc,
        "warning": zoo.folder_warning(p, name, size),
    }
    if json_:
        emit_json(stamp(result, "zoo_build"))
        return
    took = doc.get("build_seconds")
    out().print(
        f"{zoo.label(name, size)}: {p} (built in {took} s; check: eagle3kit zoo verify {p})"
    )
    if result["warning"]:
        out().print(f"[yellow]warning:[/] {result['warning']}", markup=True, highlight=False)


Rebuild = Annotated[
    Path | None,
    typer.Argument(help="A rebuild (zoo build -o DIR); omitted: check the shipped files."),
]


def verify(rebuild: Rebuild = None, json_: JsonFlag = False) -> None:
    """Without DIR: every shipped file against its sha256 in zoo.json. With DIR: a rebuild's
    figures against the shipped member's within stated tolerances (its bytes differ on
    another CPU; the figures decide). Exit 1 when a check fails."""
    from eagle3kit.cli._render import emit_json
    from eagle3kit.core.artifacts import stamp
    from eagle3kit.zoo import verify as v

    if rebuild is None:
        rows = v.shipped_files()
        engine = v.engine_configs()
        doc = {
            "checked": "shipped files",
            "members": rows,
            "engine_config": engine,
            "ok": bool(rows)
            and all(r["ok"] for r in rows)
            and all(r["ok"] for r in engine["members"]),
        }
    else:
        doc = {"checked": "rebuild", **v.compare(rebuild)}
    if json_:
        emit_json(stamp(doc, "zoo_verify"))
    else:
        _print_verify(doc)
    if not doc["ok"]:
        raise typer.Exit(1)


def _print_verify(doc: dict) -> None:
    from eagle3kit.cli._render import out

    if doc["checked"] == "shipped files":
        for r in doc["members"]:
            out().print(f"{r['label']}: {'sha256 ok' if r['ok'] else r['error']}", highlight=False)
        eng = doc["engine_config"]
        if not eng["checked"]:
            out().print(f"real vLLM config check skipped: {eng['reason']}", highlight=False)
        for r in eng["members"]:
            said = f"built ({r.get('architecture')})" if r["ok"] else r["error"]
            out().print(f"{r['dir']}: vLLM config {said}", highlight=False)
        return
    o = out()
    o.print(f"{doc['member']}: rebuild {doc['rebuild']} against {doc['shipped']}", highlight=False)
    o.print(f"  recipe: {'same' if doc['recipe_same'] else 'DIFFERENT'}", highlight=False)
    py = doc["python"]
    o.print(
        f"  data: {'same' if doc['data_same'] else 'different'} (Python {py['shipped']} "
        f"shipped, {py['rebuild']} rebuild)",
        highlight=False,
    )
    o.print(
        f"  weights identical: {doc['weights_identical']} ({doc['bytes_note']})", highlight=False
    )
    for f in doc["figures"]:
        mark = "ok" if f["ok"] else "OUT OF TOLERANCE"
        o.print(
            f"  {f['figure']}: shipped {f['shipped']}, rebuild {f['rebuild']}, "
            f"difference {f['difference']} (tolerance {f['tolerance']}) {mark}",
            highlight=False,
        )
    o.print("verified: figures within tolerance" if doc["ok"] else "not verified", highlight=False)


Srcs = Annotated[
    list[Path],
    typer.Argument(help="Builds (zoo build -o DIR), or the K2 drafter's run or cache dir."),
]


def ship(
    srcs: Srcs,
    commit: Annotated[str | None, typer.Option(help="The commit that built SRC.")] = None,
    name: Annotated[
        str | None,
        typer.Option(help="k2-drafter[-tiny] for a drafter SRC (default: SRC's folder name)."),
    ] = None,
    json_: JsonFlag = False,
) -> None:
    """(maintainers) Put each build SRC into the package (src/eagle3kit/zoo/shipped/<label>):
    weights in bf16 (full) or float32 (tiny), zoo.json with the commit and every file's
    sha256. A member's build must carry this code's recipe."""
    import json

    from eagle3kit.cli._render import emit_json, out
    from eagle3kit.core.artifacts import stamp
    from eagle3kit.zoo.shipping import ship as ship_

    rows = []
    for src in srcs:
        dest = ship_(src, commit=commit, name=name or src.name)
        shipped = json.loads((dest / "zoo.json").read_text())["shipped"]
        size = sum(f["bytes"] for f in shipped["files"].values())
        rows.append({"src": str(src), "path": str(dest), "bytes": size, **shipped})
        if not json_:
            out().print(f"{dest}: {size / 1e6:.2f} MB, {len(shipped['files'])} files")
    if json_:
        emit_json(stamp({"shipped": rows}, "zoo_ship"))


MemberDir = Annotated[
    Path, typer.Argument(help="A DeepSeek-architecture member's build (zoo build -o DIR).")
]


def add_mtp(
    *,
    src: MemberDir,
    out_dir: Out,
    steps: Annotated[int, typer.Option(help="FastMTP training steps.")] = 240,
    samples: Annotated[int, typer.Option(help="Chat samples of the member's slice.")] = 400,
    max_len: Annotated[int, typer.Option(help="Tokens per sample.")] = 128,
    seed: Annotated[int, typer.Option(help="Seed of the head's init, split and batches.")] = 0,
    json_: JsonFlag = False,
) -> None:
    """(maintainers) Train one MTP layer for the DeepSeek-architecture member build SRC (its
    weights frozen; FastMTP, distilling the member's own law; 1 torch thread) and write the
    member plus the layer to OUT: every main tensor unchanged, zoo.json's `mtp` block records
    the training. Then `zoo ship OUT` (docs/zoo.md)."""
    import torch

    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json, out
    from eagle3kit.core import registry
    from eagle3kit.core.artifacts import stamp
    from eagle3kit.zoo.shipping import read_manifest

    heads = registry.part(registry.target_head().name, "train")  # the MTP layer's training

    before, t0 = torch.get_num_threads(), time.time()
    torch.set_num_threads(1)  # a build's figures should not depend on the machine's cores
    try:
        with bar(True) as progress:
            heads.add_mtp_layer(
                src, out_dir, steps, samples=samples, max_len=max_len, seed=seed, progress=progress
            )
    finally:
        torch.set_num_threads(before)
    mtp = (read_manifest(out_dir) or {}).get("mtp", {})
    doc = {"src": str(src), "path": str(out_dir), "seconds": round(time.time() - t0, 1)}
    if json_:
        emit_json(stamp({**doc, "mtp": mtp}, "zoo_add_mtp"))
        return
    out().print(
        f"{out_dir}: MTP layer at {mtp.get('prefix')} ({steps} steps, {doc['seconds']} s); "
        f"held-out tau {mtp.get('tau_before', 0):.3f} -> {mtp.get('tau_after', 0):.3f}",
        highlight=False,
    )


DrafterName = Annotated[
    str, typer.Argument(help="k2-drafter (EAGLE-3) or k2-dflash (DFlash), as the demo uses them.")
]


def train_drafter(
    name: DrafterName,
    out_dir: Out,
    size: Size = "full",
    target: Annotated[
        Path | None,
        typer.Option(help="The dsv3-v1 build to train on (default: the shipped dsv3-v1)."),
    ] = None,
    json_: JsonFlag = False,
) -> None:
    """(maintainers) Train the demo's K2 drafter NAME on dsv3-v1 by the demo's recipe (seed 0,
    1 torch thread) into OUT (data/, run/, run/best the servable dir, demo-drafter.json the
    recipe). Then `zoo ship OUT --name NAME[-tiny]` (docs/zoo.md)."""
    import json

    import torch

    from eagle3kit import zoo
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json, out
    from eagle3kit.core.artifacts import stamp
    from eagle3kit.core.errors import bad
    from eagle3kit.demo.dflash_arm import build_k2_dflash
    from eagle3kit.demo.steps import PAIR, build_k2_eagle3

    builders = {"k2-drafter": build_k2_eagle3, "k2-dflash": build_k2_dflash}
    if name not in builders:
        raise bad("NAME", f"expected one of {', '.join(builders)}, found {name!r}")
    p1 = target or zoo.get(PAIR[0], size=size)
    before, t0 = torch.get_num_threads(), time.time()
    torch.set_num_threads(1)
    try:
        with bar(True) as progress:
            best = builders[name](out_dir, p1, size, progress)
    finally:
        torch.set_num_threads(before)
    s = json.loads((best.parent / "summary.json").read_text())
    doc = {"name": name, "size": size, "target": str(p1), "path": str(out_dir)}
    doc.update(best=str(best), seconds=round(time.time() - t0, 1))
    doc["tau_every_position"] = s.get("tau_every_position")
    if json_:
        emit_json(stamp(doc, "zoo_train_drafter"))
        return
    out().print(
        f"{name} ({size}) on {p1}: {best} in {doc['seconds']} s, held-out tau "
        f"{doc['tau_every_position']:.3f} (every position); ship: eagle3kit zoo ship {out_dir} "
        f"--name {name}{'' if size == 'full' else '-' + size}",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    zoo_app = typer.Typer(
        help="The built-in small targets (Llama and DeepSeek-V3, v1/v2), shipped with the "
        "package; build reproduces one, verify compares.",
        no_args_is_help=True,
    )
    app.add_typer(zoo_app, name="zoo")
    zoo_app.command("list")(list_)
    zoo_app.command("build")(build)
    zoo_app.command("verify")(verify)
    zoo_app.command("ship", hidden=True)(ship)
    zoo_app.command("add-mtp", hidden=True)(add_mtp)
    zoo_app.command("train-drafter", hidden=True)(train_drafter)
