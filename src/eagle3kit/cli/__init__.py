"""The `eagle3kit` command line: parse, call one library function, render (Rich) or --json.

Each verb lives in a small module of this package and registers itself on `app`. Command
modules import only typer/rich at module level; torch and transformers are imported inside the
commands that need them, so `eagle3kit --help` starts fast.
"""

from __future__ import annotations

import sys

import typer

from eagle3kit.errors import Eagle3Error

app = typer.Typer(
    name="eagle3kit",
    help="Make EAGLE-3 speculative decoding pay. Add --debug anywhere to see tracebacks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)



@app.callback()
def _root() -> None:
    """Make EAGLE-3 speculative decoding pay. Add --debug anywhere to see tracebacks."""


# Registration order is the order in --help.
from eagle3kit.cli import checkpoint as _checkpoint  # noqa: E402
from eagle3kit.cli import demo as _demo  # noqa: E402
from eagle3kit.cli import plan as _plan  # noqa: E402
from eagle3kit.cli import zoo as _zoo  # noqa: E402

for _mod in (_checkpoint, _plan, _zoo, _demo):
    _mod.register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point. Exits 0 ok, 1 when a check ran and failed, 2 on bad input or usage.

    Commands signal "check failed" with `raise typer.Exit(1)`; bad input raises Eagle3Error,
    which becomes one line on stderr (the traceback only with --debug).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    try:
        app(args=args, prog_name="eagle3kit")  # standalone: usage errors exit 2 by themselves
    except Eagle3Error as e:
        if debug:
            raise
        print(f"eagle3kit: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("eagle3kit: interrupted", file=sys.stderr)
        sys.exit(130)
