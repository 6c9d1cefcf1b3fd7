"""`eagle3kit demo`: replay the user's whole story on built-in data, offline."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(
        out: str | None = typer.Option(
            None,
            "-o",
            "--out",
            help="Directory for the demo's files [default: $EAGLE3KIT_HOME/demo].",
        ),
        quick: bool = typer.Option(
            False, "--quick", help="Tiny zoo members and a small recipe (about a minute; tests)."
        ),
        json_out: bool = typer.Option(
            False, "--json", help="Print one JSON summary; narration goes to stderr."
        ),
        threads: int = typer.Option(
            1, min=1, help="torch threads (1 is fastest for batch-1 decoding of the zoo)."
        ),
        size: str | None = typer.Option(
            None, help="Zoo size: full (default) or tiny (same as --quick)."
        ),
    ) -> None:
        """The whole story on the zoo's v1 -> v2 pair: bench, plan, compat, probe, fine-tune vs
        scratch, eval, report.

        Leaves DIR/report.html, DIR/report.md and the runs' JSON artefacts."""
        from eagle3kit.cli._checks import check_output
        from eagle3kit.cli._progress import bar
        from eagle3kit.cli._render import emit_json, err
        from eagle3kit.cli._render import out as stdout
        from eagle3kit.demo import run_demo

        def say(text: str) -> None:
            # a Console per line, on the current sys.stdout/stderr: while the progress bars are
            # live, Rich redirects both, so narration prints above the bars instead of through them
            (err() if json_out else stdout()).print(text, markup=False, highlight=False)

        if out is not None:
            check_output(out, "--out", kind="dir")
        chosen = size or ("tiny" if quick else "full")
        with bar(True) as progress:
            summary = run_demo(out, say=say, size=chosen, progress=progress, threads=threads)
        if json_out:
            emit_json(summary)
