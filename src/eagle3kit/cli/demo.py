"""`eagle3kit demo`: replay the user's story on built-in data, offline."""

from __future__ import annotations

from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(
        out: Annotated[
            str, typer.Option("-o", "--out", help="Directory for the demo's files.")
        ] = "eagle3kit-demo",
        json_out: Annotated[
            bool, typer.Option("--json", help="Print one JSON summary; narration goes to stderr.")
        ] = False,
        size: Annotated[
            str,
            typer.Option(help="Zoo size: full (minutes to build once) or tiny (seconds; tests)."),
        ] = "full",
    ) -> None:
        """Replay the Kimi-K2 -> K2.5 story: plan, inspect, compat, and the zoo's v1 -> v2 pair."""
        from eagle3kit.cli._render import emit_json, err
        from eagle3kit.cli._render import out as stdout
        from eagle3kit.demo import run_demo

        con = err() if json_out else stdout()
        summary = run_demo(
            out, say=lambda s: con.print(s, markup=False, highlight=False), size=size
        )
        if json_out:
            emit_json(summary)
