"""A typer command built from a verb's options object (core/options.py), with `--config FILE`.

    def train(o: TrainOptions) -> None: ...
    app.command("train")(command(TrainOptions, train))

Every field of the dataclass is one option (or argument), named and helped by the field; the
command's signature is built from the fields, so the command line and the config file read
one list. A flag given on the command line wins over the file (click's parameter source tells
a flag given from a default); the merged object is checked before the verb runs
(`config_file.merge`): a bad value, a wrong type or an unknown key is one line, exit 2, with
nothing written.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer

from eagle3kit.core import options as O
from eagle3kit.core.config_file import merge, parse_text

CONFIG = "config"  # the parameter that names the file (not a field of any options object)
CONFIG_HELP = (
    "TOML or YAML file of options by their CLI names (batch-size = 8); options given on the "
    "command line override it."
)
_given_argv: list[str] = []  # the command line main() ran (cli/__init__.py sets it)


def set_argv(argv: list[str]) -> None:
    """Remember the command line (for a run directory's provenance)."""
    _given_argv[:] = argv


def argv() -> list[str]:
    """The command line this process runs: what main() was given, else sys.argv."""
    import sys

    return list(_given_argv) or list(sys.argv)


def command(options: type, run: Callable[[Any], Any], *, config: bool = True) -> Callable:
    """A function typer registers as the verb: its parameters are `options`' fields (and
    `--config`), its body merges them into an `options` object and calls `run(obj)`."""

    @functools.wraps(run)
    def verb(ctx: typer.Context, **kw: Any) -> Any:
        file = kw.pop(CONFIG, None)
        return run(resolve(options, ctx, kw, file))

    kind = inspect.Parameter.KEYWORD_ONLY
    ctx = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
    )
    params = [ctx]
    params += [_parameter(f, O.hints(options)[f.name]) for f in O.fields(options)]
    if config:
        opt = typer.Option("--config", help=CONFIG_HELP, metavar="FILE")
        params.append(inspect.Parameter(CONFIG, kind, default=None, annotation=Annotated[str, opt]))
    verb.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    verb.__annotations__ = {}
    del verb.__wrapped__  # typer reads the signature above, not run's
    return verb


def resolve(options: type, ctx: Any, values: dict[str, Any], file: str | None) -> Any:
    """The options object from the parsed values: those the command line gave (not those left
    at their default) over the file's."""
    hints = O.hints(options)
    given = {}
    for f in O.fields(options):
        if not _given(ctx, f.name):
            continue
        v = values[f.name]
        if isinstance(v, str) and _several(hints[f.name]):
            v = parse_text(O.flag(f), v, hints[f.name])
        elif isinstance(v, tuple) and typing.get_origin(_base(hints[f.name])) is list:
            v = list(v)
        given[f.name] = v
    return merge(options, given, file)


def _given(ctx: Any, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT", "PROMPT")


def _parameter(f: Any, hint: Any) -> inspect.Parameter:
    m = O.meta(f)
    base = _base(hint)
    cli_type = str if _several(hint) else base
    if f.default is not dataclasses.MISSING and f.default is not None:
        default = f.default
    else:
        default = None
    help_text = m.get("help", "") + (" (required)" if O.required(f) else "")
    if m.get("argument"):
        info = typer.Argument(help=help_text, show_default=default is not None)
    else:
        flags = m.get("flags", "--" + O.cli_name(f.name))
        decls = [flags] if isinstance(flags, str) else list(flags)
        decls += [m["short"]] if "short" in m else []
        show = default is not None and default is not False  # 0 and 0.0 are shown
        info = typer.Option(*decls, help=help_text, show_default=show, metavar=m.get("metavar"))
    kind = inspect.Parameter.KEYWORD_ONLY
    return inspect.Parameter(f.name, kind, default=default, annotation=Annotated[cli_type, info])


def _base(hint: Any) -> Any:
    """The hint without None (`str | None` -> str)."""
    kinds = [k for k in _kinds(hint) if k is not type(None)]
    return kinds[0] if len(kinds) == 1 else hint


def _several(hint: Any) -> bool:
    return len([k for k in _kinds(hint) if k is not type(None)]) > 1


def _kinds(hint: Any) -> tuple[Any, ...]:
    import types

    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)
