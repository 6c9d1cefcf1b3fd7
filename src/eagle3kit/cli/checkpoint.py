"""CLI verbs: checkpoint (placeholder until its issue lands)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    pass
