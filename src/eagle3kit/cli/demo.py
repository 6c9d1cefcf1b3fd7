"""`eagle3kit demo`: replay the user's story on the built-in zoo."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def demo() -> None:
        """Replay the Kimi-K2 -> K2.5 story on built-in tiny models (not built yet)."""
        from eagle3kit.cli._render import err

        err().print("eagle3kit demo is not built yet: the verbs it replays are still landing.")
