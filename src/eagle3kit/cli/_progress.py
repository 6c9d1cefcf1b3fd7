"""The CLI side of eagle3kit.core.progress: one line of progress per stage on stderr.

On a terminal, a Rich bar per stage with rate and ETA. Elsewhere (a pipe, a log file, `nohup`),
a redrawn bar would land as truncated fragments, so whole plain lines are printed instead:
nothing during a stage's first `PLAIN_QUIET_S` seconds (a short command, or one that fails
early, prints no progress before its result or its one error line), then one line each time
the stage crosses another tenth of its total and at least every `PLAIN_EVERY_S` seconds, and
one line when it ends.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import IO

from eagle3kit.core.progress import Event, Progress

PLAIN_QUIET_S = 10.0  # no plain line before a stage has run this long (except its end)
PLAIN_EVERY_S = 60.0  # then at most this long between two lines of a running stage
PLAIN_STEPS = 10  # and a line each time a stage crosses another 1/PLAIN_STEPS of its total


@contextlib.contextmanager
def bar(enabled: bool = True, stream: IO[str] | None = None) -> Iterator[Progress | None]:
    """`with bar(not json_) as progress: library_fn(..., progress=progress)`."""
    if not enabled:
        yield None
        return
    out = sys.stderr if stream is None else stream
    isatty = getattr(out, "isatty", None)
    if isatty is not None and isatty():
        with _rich_bar(out) as on_event:
            yield on_event
    else:
        yield PlainLines(out)


def _info(e: Event) -> str:
    return " ".join(
        f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in e.info.items()
    )


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class PlainLines:
    """A Progress printing whole lines: `train 40/100 step (40%) 0:00:12 ETA 0:00:18`."""

    def __init__(self, out: IO[str], clock: Callable[[], float] | None = None) -> None:
        self.out, self.clock = out, clock or (lambda: time.monotonic())
        self.started: dict[str, float] = {}  # stage -> when its first event came
        self.printed: dict[str, tuple[float, int, int]] = {}  # stage -> (time, step, done)

    def __call__(self, e: Event) -> None:
        now = self.clock()
        step = e.done * PLAIN_STEPS // e.total if e.total else 0
        start = self.started.setdefault(e.stage, now)
        last = self.printed.get(e.stage)
        if e.total is not None and e.done >= e.total:
            due = last is None or last[2] < e.done  # the end: always, once
        elif now - start < PLAIN_QUIET_S:
            due = False
        else:
            due = last is None or step > last[1] or now - last[0] >= PLAIN_EVERY_S
        if due:
            self.printed[e.stage] = (now, step, e.done)
            self.out.write(self.line(e, now - start) + "\n")
            self.out.flush()

    @staticmethod
    def line(e: Event, elapsed: float) -> str:
        count = f"{e.done}/{e.total}" if e.total is not None else f"{e.done}"
        parts = [e.stage, count, e.unit]
        if e.total:
            parts.append(f"({100 * e.done // e.total}%)")
        if e.info:
            parts.append(_info(e))
        parts.append(_clock(elapsed))
        if e.total and 0 < e.done < e.total:
            parts.append("ETA " + _clock(elapsed / e.done * (e.total - e.done)))
        return " ".join(parts)


@contextlib.contextmanager
def _rich_bar(out: IO[str]) -> Iterator[Progress]:
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
        console=Console(file=out),
        transient=False,
    )
    tasks: dict[str, int] = {}

    def on_event(e: Event) -> None:
        if not tasks:
            p.start()  # lazily: a command that fails before any progress prints nothing here
        info = _info(e)
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
