"""A verb's options as one typed object: a dataclass whose fields carry their help text and
their checks, read by the command line (cli/_command.py builds the typer command from it) and
by a config file (core/config_file.py) alike.

    @dataclass
    class PrepareOptions:
        output: str | None = option(None, "The DATA directory to write.", short="-o",
                                    required=True)
        max_length: int = option(2048, "Truncate samples to this many tokens.", min=2)

A field's CLI name is its name with `-` for `_` (`max_length` -> `--max-length`; a trailing
`_` is dropped: `json_` -> `--json`). `config_file.merge` puts the values given on the
command line over a config file's and checks each against its field (type, range, choices),
naming where it came from: `--max-length: expected an integer >= 2, found 1` or
`run.toml: key 'max-length': expected an integer >= 2, found 1`.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable
from typing import Any

from eagle3kit.core.errors import bad

META = "eagle3kit"  # the key of a field's metadata this module reads


def cli_name(field: str) -> str:
    """`batch_size` -> `batch-size` (the option is `--batch-size`); `json_` -> `json`."""
    return field.rstrip("_").replace("_", "-")


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    factory: Callable[[], Any] | None = None,
    **meta: Any,
) -> Any:
    """A dataclass field that is an option of a verb. `meta` (all optional):

    short     a short flag ("-o")
    flags     the declarations as typer takes them ("--fc-norm/--no-fc-norm"; a tuple for
              more than one name: ("--features-old", "--reference-features"))
    metavar   how --help shows the value ("[LENGTHS]")
    argument  a positional argument, not an option
    required  needed from the command line or the file (the field may default to None)
    min, above, max   a number >= min, > above, <= max
    choices   the values a string may take
    record    False: how to run, not what runs (left out of a run's config.toml)
    cli       False: not on the command line nor in a file (set in code only)
    """
    info = {"help": help, **meta}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={META: info})
    return dataclasses.field(default=default, metadata={META: info})


def meta(f: dataclasses.Field) -> dict[str, Any]:
    """The field's option metadata ({} for a plain field: an option with no help)."""
    return dict(f.metadata.get(META, {}))


def fields(options: type) -> list[dataclasses.Field]:
    """The fields of `options` that are options (those not marked `cli=False`)."""
    return [f for f in dataclasses.fields(options) if meta(f).get("cli", True)]


def required(f: dataclasses.Field) -> bool:
    no_default = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    return no_default or bool(meta(f).get("required"))


def flag(f: dataclasses.Field) -> str:
    """How a message names the field on the command line (`--batch-size`; an argument by its
    name in capitals)."""
    return cli_name(f.name).upper() if meta(f).get("argument") else "--" + cli_name(f.name)


def hints(options: type) -> dict[str, Any]:
    return typing.get_type_hints(options)


def check_field(where: str, value: Any, f: dataclasses.Field) -> None:
    """The field's range and choices (its type is checked by `config_file.check_value` or the
    command line's parser); bad(where, ...) naming what was expected and found."""
    m = meta(f)
    if value is None or isinstance(value, bool):
        return
    choices = m.get("choices")
    if choices is not None:
        items = value if isinstance(value, list | tuple) else [value]
        for v in items:
            if v not in choices:
                one = ", ".join(str(c) for c in choices)
                raise bad(where, f"expected one of {one}, found {v!r}")
    if not isinstance(value, int | float):
        return
    kind = "an integer" if isinstance(value, int) else "a number"
    if isinstance(value, float) and not math.isfinite(value):
        raise bad(where, f"expected a finite number, found {value}")
    lo, above, hi = m.get("min"), m.get("above"), m.get("max")
    if lo is not None and value < lo:
        raise bad(where, f"expected {kind} >= {lo:g}, found {value:g}")
    if above is not None and value <= above:
        raise bad(where, f"expected {kind} > {above:g}, found {value:g}")
    if hi is not None and value > hi:
        raise bad(where, f"expected {kind} <= {hi:g}, found {value:g}")


def check(obj: Any) -> None:
    """Every option of the object `obj` in its range (messages name the command-line flag)."""
    for f in fields(type(obj)):
        check_field(flag(f), getattr(obj, f.name), f)


def recorded(obj: Any) -> dict[str, Any]:
    """{field: value} of the options that say what runs (not `record=False`), for a run
    directory's config.toml, in field order."""
    return {f.name: getattr(obj, f.name) for f in fields(type(obj)) if meta(f).get("record", True)}
