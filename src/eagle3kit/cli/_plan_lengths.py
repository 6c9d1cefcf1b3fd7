"""`plan` by context length (plan/by_length.py): read, price, print, plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def by_length(
    from_: Path | None, acceptance_file: Path | None, concurrency: int, depth: int | None
) -> dict[str, Any] | None:
    """The by-length plan's JSON when `--from` carries `by_length` with costs per length
    (None otherwise: the plan of the whole file alone); the acceptance per bucket from
    `--acceptance-file` when it carries one."""
    from eagle3kit.plan.by_length import plan_by_length, read_lengths

    if from_ is None:
        return None
    costs = read_lengths(from_, concurrency)
    if costs is None or not costs.costs:  # no costs per length (a probe, an offline eval)
        return None
    acc = read_lengths(acceptance_file, concurrency) if acceptance_file else None
    return plan_by_length(costs, acc, concurrency=concurrency, depth=depth).to_json()


def _f(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt)


def render(bl: dict[str, Any]) -> None:
    """One row per context length, then the answer."""
    from rich.table import Table

    from eagle3kit.cli._render import out

    c = bl["by_length_settings"]["concurrency"]
    t = Table(title=f"By context length, concurrency {c}", title_justify="left")
    cols = ("context", "τ", "τ needed", "cycle ms", "plain ms", "tok/s", "speedup", "request")
    for c in cols:
        t.add_column(c, justify="right")
    for p in bl["by_length"]:
        verdict = "[green]" if p["pays"] else "[red]"
        t.add_row(
            str(p["context_length"]),
            f"{verdict}{p['tau']:.3g}[/]",
            _f(p["break_even_tau"]),
            _f(p["cycle_ms"]),
            _f(p["plain_ms"]),
            _f(p["tokens_per_s"], ".4g"),
            f"{p['speedup']:.3f}×",
            "-" if p["request_speedup"] is None else f"{p['request_speedup']:.3f}×",
        )
    console = out()
    console.print(t)
    console.print(f"by context length: {bl['pays_up_to']['answer']}")


def plot(bl: dict[str, Any], plot_path: Path) -> Path:
    """`FILE-by-length.png` beside the plan's own plot."""
    from eagle3kit.plan.plots import plot_by_length

    path = plot_path.with_name(plot_path.stem + "-by-length.png")
    title = bl["pays_up_to"]["answer"]
    return plot_by_length(bl["by_length"], path, title)
