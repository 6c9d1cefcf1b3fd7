"""Output helpers shared by the command modules: --json to stdout, tables via Rich."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console


def out() -> Console:
    """Console on the current stdout (resolved at call time, so tests can capture it)."""
    tty = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
    # Piped output (files, CI logs, tests) is not wrapped at 80 columns.
    return Console(file=sys.stdout, soft_wrap=False, width=None if tty else 160)


def err() -> Console:
    """Console on stderr: logs and progress bars go here."""
    return Console(file=sys.stderr)


def emit_json(doc: Any) -> None:
    """Print one JSON document to stdout."""
    sys.stdout.write(json.dumps(doc, indent=2, default=_default) + "\n")


def _default(o: Any) -> Any:
    if isinstance(o, tuple | set | frozenset):
        return list(o)
    if hasattr(o, "to_json"):
        return o.to_json()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
