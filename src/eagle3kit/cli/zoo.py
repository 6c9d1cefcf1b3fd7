"""CLI verbs: `eagle3kit zoo list|build` — the built-in targets (eagle3kit.zoo)."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from eagle3kit.cli._options import JsonFlag

SIZE_HELP = "full (demo, benchmarks) or tiny (seconds to build; tests)."


def _row(d: dict) -> list[str]:
    man = d["manifest"] or {}
    met = man.get("metrics", {})
    quality = (
        f"{met['heldout_loss']:.2f} / {met['unigram_loss']:.2f} / {met['distinct4_mean']:.2f}"
        if met
        else "-"
    )
    if "chat" in met:
        quality += f", chat {met['chat']['distinct4_mean']:.2f}"
    params = f"{man['params'] / 1e6:.1f}M" if man else "-"
    shape = f"{man['num_layers']}x{man['hidden_size']}, V={man['vocab_size']}" if man else "-"
    return [
        d["name"],
        d["size"],
        d["architecture"],
        d["parent"] or "-",
        d["slice"],
        params,
        shape,
        quality,
        _built(d),
    ]


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min"


def _built(d: dict) -> str:
    """'yes (built in 6 s)', 'no: ~10 s to build', 'stale: rebuilt on use, ~4 min'."""
    cost = d["build_seconds"]
    if d["state"] == "built":
        return f"yes (built in {_duration(cost)})" if cost is not None else "yes"
    with_parent = f" with {d['parent']}" if d["parent"] and cost > _own_cost(d) else ""
    if d["state"] == "stale":
        return f"stale: rebuilt on use, ~{_duration(cost)}{with_parent}"
    return f"no: ~{_duration(cost)} to build{with_parent}"


def _own_cost(d: dict) -> float:
    from eagle3kit.zoo import BUILD_SECONDS

    return BUILD_SECONDS[d["size"]][d["name"]]


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
    """List the zoo's members at each size, where they live, whether they are built, and
    what a build costs."""
    from eagle3kit import zoo
    from eagle3kit.cli._render import emit_json, out
    from eagle3kit.core.artifacts import stamp

    sizes = zoo.SIZES if size == "all" else (size,)
    rows = [zoo.describe(n, size=s) for s in sizes for n in zoo.names()]
    if json_:
        emit_json(stamp({"home": str(zoo.home()), "size": size, "members": rows}, "zoo"))
        return
    from rich.table import Table

    t = Table(
        title=f"eagle3kit zoo ({size}) in {zoo.home() / 'zoo'}",
        caption="build: eagle3kit zoo build NAME [--size tiny] (times measured on 2 CPU cores)",
    )
    for col in (
        "name",
        "size",
        "architecture",
        "parent",
        "data",
        "params",
        "layers x hidden",
        "held-out / unigram loss / greedy distinct-4",
        "built",
    ):
        t.add_column(col)
    for d in rows:
        t.add_row(*_row(d))
    out().print(t)


Name = Annotated[str, typer.Argument(help="Member to build (default: all).")]
Force = Annotated[bool, typer.Option("--force", help="Rebuild even when cached.")]
Strict = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Refuse (exit 2) a member whose chat answers fall below the zoo's bar.",
    ),
]


def build(
    name: Name = None,
    size: Size = "full",
    force: Force = False,
    strict: Strict = False,
    json_: JsonFlag = False,
) -> None:
    """Build members (v2 builds its v1 first); cached members return at once. A member
    whose chat answers fall below the zoo's bar is cached with a warning (in zoo.json
    and here) unless --strict."""
    from eagle3kit import zoo
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json, out
    from eagle3kit.core.artifacts import stamp

    targets = [name] if name is not None else zoo.names()
    for n in targets:
        zoo.member(n)  # bad names fail before any work
    results = []
    for n in targets:
        cached = not force and zoo.is_built(n, size=size)
        t0 = time.time()
        with bar(True) as progress:  # stderr, so --json stays one document on stdout
            p = zoo.build(n, size=size, force=force, progress=progress, strict=strict)
        results.append(
            {
                "name": n,
                "size": size,
                "path": str(p),
                "cached": cached,
                "seconds": round(time.time() - t0, 2),
                "manifest": zoo.manifest(n, size=size),
                "warning": zoo.chat_warning(n, size=size),
            }
        )
    if json_:
        emit_json(stamp({"members": results}, "zoo_build"))
        return
    for r in results:
        how = "cached" if r["cached"] else f"built in {r['seconds']:.0f} s"
        out().print(f"{r['name']} ({size}): {r['path']} [{how}]")
        if r["warning"]:
            out().print(f"[yellow]warning:[/] {r['warning']}", markup=True, highlight=False)


def register(app: typer.Typer) -> None:
    zoo_app = typer.Typer(
        help="The built-in tiny targets (Llama and DeepSeek-V3, v1/v2), built from the stdlib.",
        no_args_is_help=True,
    )
    app.add_typer(zoo_app, name="zoo")
    zoo_app.command("list")(list_)
    zoo_app.command("build")(build)
