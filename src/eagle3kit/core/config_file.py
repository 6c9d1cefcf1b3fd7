"""A verb's options from a file: TOML or YAML, every key an option's CLI name, typed and checked.

    # train.toml                          # or train.yaml
    target = "dsv3-v2"                     target: dsv3-v2
    data = "runs/data"                     data: runs/data
    init-from = "drafters/k2"              init-from: drafters/k2
    steps = 300                            steps: 300
    fc-norm = true                         fc-norm: true

The options are one typed object per verb (a dataclass); the file names its fields by their
CLI names (`batch-size` for `batch_size`). Every value is checked against the field's type
before anything runs; a bad one is one line naming the file, the key, what was expected and
what was found, and an unknown key names the closest option. `write_config` writes the TOML
that `read_config` reads back, for a run directory's record of what ran.
"""

from __future__ import annotations

import difflib
import json
import math
import types
import typing
from pathlib import Path
from typing import Any

from eagle3kit.core.errors import bad
from eagle3kit.core.options import check_field, cli_name, fields, flag, required

SUFFIXES = (".toml", ".yaml", ".yml")


def read_config(path: str | Path, options: type) -> dict[str, Any]:
    """{field name: value} of the dataclass `options`, from the file at `path`, each value
    checked against its field's type (bad(): one line, exit 2, for any problem)."""
    path = Path(path)
    raw = _load(path)
    known = {cli_name(f.name): f for f in fields(options)}
    hints = typing.get_type_hints(options)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        f = known.get(key)
        if f is None:
            raise bad(
                f"{path}: key {key!r}", f"expected an option of this verb{_closest(key, known)}"
            )
        out[f.name] = check_value(f"{path}: key {key!r}", value, hints[f.name])
    return out


def merge(options: type, given: dict[str, Any], file: str | Path | None = None) -> Any:
    """The options object: defaults, then the file's values (`config_file.read_config`), then
    `given` (the values the command line gave, typed). Each value is checked where it came
    from; a required option found nowhere is one line. Nothing is run or written here."""
    values: dict[str, Any] = {}
    by_name = {f.name: f for f in fields(options)}
    if file is not None:
        for name, value in read_config(file, options).items():
            check_field(f"{file}: key {cli_name(name)!r}", value, by_name[name])
            values[name] = value
    for name, value in given.items():
        check_field(flag(by_name[name]), value, by_name[name])
        values[name] = value
    for f in by_name.values():
        if required(f) and values.get(f.name) is None:
            also = f" or the key {cli_name(f.name)!r} in {file}" if file is not None else ""
            raise bad(flag(f), f"expected a value (on the command line{also}), found none")
    return options(**values)


def _load(path: Path) -> dict[str, Any]:
    if path.suffix not in SUFFIXES:
        raise bad(str(path), f"expected a {' or '.join(SUFFIXES)} file, found {path.suffix!r}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise bad(str(path), f"expected a readable UTF-8 file ({type(e).__name__})") from None
    doc = _parse_toml(path, text) if path.suffix == ".toml" else _parse_yaml(path, text)
    if not isinstance(doc, dict):
        raise bad(str(path), f"expected a table of options, found {type(doc).__name__}")
    return doc


def _parse_toml(path: Path, text: str) -> Any:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            raise bad(
                str(path), "reading TOML needs Python >= 3.11 or `pip install tomli`"
            ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise bad(str(path), f"expected TOML, {e}") from None


def _parse_yaml(path: Path, text: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise bad(str(path), "reading YAML needs PyYAML (`pip install pyyaml`)") from None
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise bad(str(path), f"expected YAML, cannot parse it{at}") from None


def _closest(key: str, fields: dict[str, Any]) -> str:
    near = difflib.get_close_matches(cli_name(key), list(fields), n=1, cutoff=0.6)
    return f"; the closest is {near[0]!r}" if near else ""


def check_value(where: str, value: Any, hint: Any) -> Any:
    """`value` if it is of the type `hint` (int, float, str, bool, a list of one of those, or
    any of them | None), an int given for a float as a float; else bad(where, ...)."""
    kinds = _kinds(hint)
    if value is None:
        if type(None) in kinds:
            return None
        raise bad(where, f"expected {_describe(kinds)}, found nothing (null)")
    for kind in kinds:
        ok, got = _as(value, kind)
        if ok:
            return got
    raise bad(where, f"expected {_describe(kinds)}, found {_show(value)}")


def _kinds(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _as(value: Any, kind: Any) -> tuple[bool, Any]:
    if kind is bool:
        return isinstance(value, bool), value
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if kind is float:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return number and math.isfinite(value), float(value) if number else value
    if kind is str:
        return isinstance(value, str), value
    if typing.get_origin(kind) in (list, tuple):
        args = typing.get_args(kind)
        if not isinstance(value, list | tuple):
            return False, value
        fixed = typing.get_origin(kind) is tuple and Ellipsis not in args
        if fixed and len(value) != len(args):
            return False, value
        checked = [_as(v, args[0]) for v in value]
        got = [v for _, v in checked]
        return all(ok for ok, _ in checked), tuple(got) if fixed else got
    return False, value


def _describe(kinds: tuple[Any, ...]) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    plural = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}
    words = []
    for k in kinds:
        if k is type(None):
            continue
        if typing.get_origin(k) in (list, tuple):
            args = typing.get_args(k)
            n = f"{len(args)} " if typing.get_origin(k) is tuple and Ellipsis not in args else ""
            words.append(f"a list of {n}{plural.get(args[0], 'values')}")
        else:
            words.append(names.get(k, getattr(k, "__name__", str(k))))
    return " or ".join(words) + (" (or nothing)" if type(None) in kinds else "")


def _show(value: Any) -> str:
    kind = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
    }
    return f"{kind.get(type(value), type(value).__name__)} {json.dumps(value, default=str)}"


def write_config(path: str | Path, values: dict[str, Any], *, header: str = "") -> str:
    """TOML text of {field name: value} (None values left out: TOML has no null), written to
    `path` atomically; returns the text. `read_config` reads it back to the same values."""
    from eagle3kit.core.atomic import atomic_write_text

    lines = [f"# {x}" for x in header.splitlines()] if header else []
    for name, value in values.items():
        if value is not None:
            lines.append(f"{cli_name(name)} = {_toml_value(name, value)}")
    text = "\n".join(lines) + "\n"
    atomic_write_text(path, text)
    return text


def _toml_value(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # TOML basic strings: JSON escapes
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(name, v) for v in value) + "]"
    raise ValueError(f"{name}: cannot write {value!r} as TOML")


def parse_text(where: str, text: str, hint: Any) -> Any:
    """A command-line string for a field of several kinds (`int | float`: "8" -> 8, "0.05" ->
    0.05), read as the first kind it parses as; bad(where, ...) when none does."""
    kinds = [k for k in _kinds(hint) if k is not type(None)]
    for kind in kinds:
        try:
            value = {int: int, float: float, str: str}[kind](text)
        except (KeyError, ValueError):
            continue
        ok, got = _as(value, kind)
        if ok:
            return got
    raise bad(where, f"expected {_describe(tuple(kinds))}, found {text!r}")
