"""The `eagle3kit` command line: parse, call one library function, render (Rich) or --json.

Each verb lives in a small module of this package and registers itself on `app`. Command
modules import only typer/rich at module level; torch and transformers are imported inside the
commands that need them, so `eagle3kit --help` starts fast.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from eagle3kit.core import registry
from eagle3kit.core.errors import Eagle3Error

_HELP = (  # the methods as core/registry.py lists them
    f"Make speculative decoding pay ({', '.join(m.display for m in registry.METHODS)}). "
    "Add --debug anywhere to see tracebacks."
)
app = typer.Typer(
    name="eagle3kit",
    help=_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    debug: bool = typer.Option(
        False,
        "--debug",
        help="Show the full traceback (with its causes) instead of one error line. "
        "Accepted anywhere on the command line.",
    ),
) -> None:
    """The root: its help is the app's (`_HELP`, the methods from core/registry.py)."""


def _reflow(text: str) -> str:
    """A docstring's paragraphs as one line each, so the terminal wraps them (typer keeps the
    source's line breaks, which break a paragraph raggedly at 80 columns). Lines that start
    a list item or are indented stay on their own line."""
    import inspect

    out = []
    for para in inspect.cleandoc(text).split("\n\n"):
        lines: list[str] = []
        for line in para.split("\n"):
            if lines and not line.startswith((" ", "- ", "* ", "\b")) and not para.startswith("\b"):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line)
        out.append("\n".join(lines))
    return "\n\n".join(out)


def _tidy_help(cmd: Any) -> Any:
    """Help without typer's type tags on flags (`--json <bool>`) and with argument names
    as written (`compat [OPTIONS] DRAFTER OTHER`, not `{a} {b}`), for every subcommand."""
    for p in getattr(cmd, "params", []):
        if getattr(p, "is_flag", False) and p.metavar is None:
            p.metavar = ""  # shown as nothing: a flag takes no value
        if getattr(p, "param_type_name", "") == "argument":
            if p.metavar is None:
                p.metavar = (p.name or "").upper()
            p._usage_display_name = lambda p=p: (
                (p.display_name_raw if p.required else f"[{p.display_name_raw}]")
                + ("..." if p.nargs != 1 else "")
            )
    if isinstance(getattr(cmd, "help", None), str):
        cmd.help = _reflow(cmd.help)
    make_help = cmd.get_help_option

    def help_option(ctx: Any) -> Any:
        opt = make_help(ctx)
        if opt is not None and opt.metavar is None:
            opt.metavar = ""
        return opt

    cmd.get_help_option = help_option
    for sub in getattr(cmd, "commands", {}).values():
        _tidy_help(sub)
    return cmd


# Registration order is the order in --help.
from eagle3kit.cli import checkpoint as _checkpoint  # noqa: E402
from eagle3kit.cli import data as _data  # noqa: E402
from eagle3kit.cli import decode as _decode  # noqa: E402
from eagle3kit.cli import demo as _demo  # noqa: E402
from eagle3kit.cli import plan as _plan  # noqa: E402
from eagle3kit.cli import probe as _probe  # noqa: E402
from eagle3kit.cli import target as _target  # noqa: E402
from eagle3kit.cli import train as _train  # noqa: E402
from eagle3kit.cli import zoo as _zoo  # noqa: E402

for _mod in (_checkpoint, _plan, _zoo, _target, _data, _train, _decode, _probe, _demo):
    _mod.register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point. Exits 0 ok, 1 when a check ran and failed, 2 on bad input or usage.

    Commands signal "check failed" with `raise typer.Exit(1)`; bad input raises Eagle3Error.
    Both bad input and usage errors (an unknown option, a value that does not parse) become
    one line on stderr; `--debug` anywhere on the command line shows the traceback instead.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"] or ["--help"]
    from eagle3kit.cli._command import set_argv

    set_argv(["eagle3kit", *args])
    try:
        cmd = _tidy_help(typer.main.get_command(app))
        rv = cmd.main(args=args, prog_name="eagle3kit", standalone_mode=False)
    except Eagle3Error as e:
        if debug:
            raise
        print(f"eagle3kit: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("eagle3kit: interrupted", file=sys.stderr)
        sys.exit(130)
    except OSError as e:
        # a path the user gave that cannot be used (a file where a dir is expected, a full
        # disk, no permission): one line naming it, like any bad input
        if debug or e.filename is None:
            raise
        print(f"eagle3kit: error: {e.filename}: {e.strerror or e}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:
        # typer/click usage errors (vendored by typer >= 0.29, click before): duck-typed
        code = getattr(e, "exit_code", None)
        if debug or not isinstance(code, int):
            raise
        if hasattr(e, "format_message"):
            names = {c.name or c.callback.__name__ for c in app.registered_commands}
            verb = next((a for a in args if not a.startswith("-")), "")
            hint = f"eagle3kit {verb} --help" if verb in names else "eagle3kit --help"
            print(f"eagle3kit: error: {e.format_message()} (see '{hint}')", file=sys.stderr)
        sys.exit(code)
    sys.exit(rv if isinstance(rv, int) else 0)
