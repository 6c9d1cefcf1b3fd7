"""The Rich side of eagle3kit.core.progress: one bar per stage on stderr, with rate and ETA."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from eagle3kit.core.progress import Event, Progress


@contextlib.contextmanager
def bar(enabled: bool = True) -> Iterator[Progress | None]:
    """`with bar(not json_) as progress: library_fn(..., progress=progress)`."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.progress import (
        Progress as RichProgress,
    )

    p = RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[unit]} {task.fields[info]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(file=sys.stderr),
        transient=False,
    )
    tasks: dict[str, int] = {}

    def on_event(e: Event) -> None:
        if not tasks:
            p.start()  # lazily: a command that fails before any progress prints nothing here
        info = " ".join(
            f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in e.info.items()
        )
        if e.stage not in tasks:
            tasks[e.stage] = p.add_task(e.stage, total=e.total, unit=e.unit, info=info)
        p.update(tasks[e.stage], completed=e.done, total=e.total, info=info)

    try:
        yield on_event
    except BaseException:
        if tasks:  # an error: erase the bars (no final newline), the error line stands alone
            p.live.transient = True
            p.live.stop()
        raise
    if tasks:
        p.stop()
