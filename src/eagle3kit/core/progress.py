"""Progress reporting for long library work, without any UI in the library.

Library functions take `progress: Progress | None` and call it; the CLI passes a Rich bar
(cli/_progress.py), tests pass a list-appending function, and None means silence.

    progress(Event(stage="train", done=120, total=1000, info={"loss": 2.31}))

`total` may be None (unknown length); `done` counts units of `unit` in this stage. A new
`stage` string starts a new bar. Events are cheap: call at most a few times a second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Event:
    stage: str
    done: int
    total: int | None = None
    unit: str = "it"
    info: dict[str, Any] = field(default_factory=dict)


Progress = Callable[[Event], None]


def emit(
    progress: Progress | None,
    stage: str,
    done: int,
    total: int | None = None,
    unit: str = "it",
    **info: Any,
) -> None:
    """Call `progress` if there is one."""
    if progress is not None:
        progress(Event(stage, done, total, unit, info))
