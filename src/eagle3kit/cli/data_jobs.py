"""CLI verbs `eagle3kit data regenerate|capture`, added to the `data` group by cli/data.py.

torch/transformers are imported inside the commands only (`eagle3kit --help` stays fast).
"""

from __future__ import annotations

import typer


def register(data_app: typer.Typer) -> None:
    """Add `regenerate` and `capture` to the `data` group (created by cli/data.py)."""
