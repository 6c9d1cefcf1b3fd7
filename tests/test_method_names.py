"""One method, one place (docs/ARCHITECTURE.md, "How to add a method").

A draft method's code lives in its package (src/eagle3kit/methods/<package>/) and its names in
its record (core/registry.py). Everywhere else, the code (read as an AST) must not
- compare a value with a method's name, or an engine's name for one (`x == "dflash"`,
  `m in ("dflash", "mtp")`, `algo == "NEXTN"`, a `match` case);
- list method names (a tuple, list or set literal holding two or more): the one list is the
  registry's;
- key a dict by method names (a dict literal with two or more such keys): the one map from an
  engine's name to ours is the registry's;
- ask a drafter for its method with `getattr(d, "method", ...)`: every drafter names itself
  (model/protocols.py `Drafter.method`);
- write a launch line (`--speculative-algorithm`, `sglang.launch_server`, `--speculative-config`
  bodies): the one source of launch lines is the registry's.
Docstrings are prose and are not read. "eagle" / "EAGLE" also name the original EAGLE code's
layout and writer (checkpoint/eagle3/layouts.py LAYOUTS, writers.py), so those two words are
left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "eagle3kit"
OWN = {SRC / "core" / "registry.py"}  # the registry: the one place names are written
HOMONYMS = {"eagle", "EAGLE"}  # engines' aliases of eagle3; the original EAGLE code's names
LAUNCH = ("--speculative-algorithm", "sglang.launch_server", '{"method": ')


def _names() -> set[str]:
    from eagle3kit.core import registry

    out = set(registry.names()) | set(registry.engine_names())
    for m in registry.METHODS:
        out |= set(m.variants)
        for engine in (m.vllm, m.sglang):
            if engine is not None:
                first = engine.method if engine is m.vllm else engine.algorithm
                out |= {first, *(a for a in engine.aliases if "*" not in a)}
    return out - HOMONYMS


NAMES = _names()


def _generic_files() -> list[Path]:
    return [
        p
        for p in sorted(SRC.rglob("*.py"))
        if "methods" not in p.relative_to(SRC).parts[:1] and p not in OWN
    ]


def _is_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES


def _names_in(node: ast.AST) -> int:
    """How many method names a tuple/list/set literal holds (0 for anything else)."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return sum(_is_name(e) for e in node.elts)
    return 0


def _docstrings(tree: ast.AST) -> set[int]:
    """id() of every docstring node (module, class, function)."""
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                out.add(id(body[0].value))
    return out


def hits(source: str) -> list[tuple[int, str]]:
    """(line, what) of every use of a method name the module docstring forbids."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if _is_name(side) or _names_in(side):
                    out.append((node.lineno, "compares with a method name"))
                    break
        elif isinstance(node, ast.MatchValue) and _is_name(node.value):
            out.append((node.lineno, "matches a method name"))
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and _names_in(node) >= 2:
            out.append((node.lineno, "lists method names"))
        elif isinstance(node, ast.Dict) and sum(_is_name(k) for k in node.keys if k) >= 2:
            out.append((node.lineno, "keys a dict by method names"))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
            if len(node.args) > 1 and getattr(node.args[1], "value", None) == "method":
                out.append((node.lineno, 'getattr(..., "method")'))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docs and any(s in node.value for s in LAUNCH):
                out.append((node.lineno, "writes a launch line"))
    return sorted(set(out))


def test_method_names_live_in_the_registry_and_the_packages():
    bad = [
        f"{p.relative_to(SRC.parents[1])}:{line}: {what}"
        for p in _generic_files()
        for line, what in hits(p.read_text())
    ]
    assert not bad, "method names outside methods/ and core/registry.py:\n" + "\n".join(bad)


def test_the_check_finds_each_kind_of_use():
    """The AST reading catches each form (so the test above can fail)."""
    code = (
        'if x == "dflash": pass\n'
        'if m in ("eagle3", "mtp"): pass\n'
        'if algo.upper() != "NEXTN": pass\n'
        'METHODS = ("peagle", "ngram")\n'
        'MAP = {"eagle3": 1, "dflash": 2}\n'
        'm = getattr(d, "method", None)\n'
        'line = f"--speculative-algorithm {a}"\n'
        "match x:\n"
        '    case "mtp":\n'
        "        pass\n"
        'ok = {"mtp": 1}  # one JSON field named after a method\n'
        'layout = "eagle"\n'
        'doc = "the EAGLE-3 drafter"\n'
    )
    found = sorted({line for line, _ in hits(code)})
    assert found == [1, 2, 3, 4, 5, 6, 7, 9], hits(code)


def test_the_names_are_the_registrys():
    from eagle3kit.core import registry

    assert {"eagle3", "eagle3.1", "peagle", "dflash", "mtp", "ngram"} <= NAMES
    assert {"EAGLE3", "DFLASH", "NEXTN", "NGRAM", "nextn"} <= NAMES
    assert set(registry.names()) <= NAMES
