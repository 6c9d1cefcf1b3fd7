"""The package's shape, read from its imports (AST, every import including those inside
functions): no cycle, no import from a lower layer to a higher one, no `_private` name taken
across packages. The layer order is written here and in docs/ARCHITECTURE.md (checked too)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "eagle3kit"
ROOT = SRC.parents[1]

# Low -> high. A module may import its own layer and the layers before it, never after.
LAYERS = [
    "core",
    "plan",
    "checkpoint",
    "zoo",
    "model",
    "data",
    "decode",
    "train",
    "measure",
    "live",
    "report",
    "demo",
    "cli",
]
TORCH_FREE = ["core", "plan", "checkpoint"]  # never import torch at import time
METHODS = "methods"  # one package per draft method, its parts named after their layers


def _modules() -> dict[str, Path]:
    mods = {}
    for p in SRC.rglob("*.py"):
        rel = p.relative_to(SRC).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(["eagle3kit", *parts])] = p
    return mods


MODULES = _modules()


def _package(mod: str) -> str:
    """The layer a module belongs to: its top package, or for a method package's part
    (`eagle3kit.methods.<name>.<layer>[.<module>]`) the layer the part is named after; the
    method packages' own `__init__` modules sit at the bottom (they import nothing)."""
    parts = mod.split(".")
    if len(parts) > 1 and parts[1] == METHODS:
        return parts[3] if len(parts) > 3 else LAYERS[0]
    return parts[1] if len(parts) > 1 else ""


def _owner(mod: str) -> str:
    """Who may share private names with `mod`: its top package, or its method package."""
    parts = mod.split(".")
    if len(parts) > 1 and parts[1] == METHODS:
        return ".".join(parts[1:3])
    return _package(mod)


def _resolve(mod: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".")
    is_pkg = MODULES[mod].name == "__init__.py"
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(mod: str) -> list[tuple[str, str, int]]:
    """(imported module, imported name or '', line) for every eagle3kit import in `mod`."""
    tree = ast.parse(MODULES[mod].read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, "", node.lineno) for a in node.names if a.name.startswith("eagle3kit")]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(mod, node)
            if not target.startswith("eagle3kit"):
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in MODULES:  # `from pkg import module`
                    out.append((sub, "", node.lineno))
                else:
                    out.append((target, a.name, node.lineno))
    return out


def _layer(mod: str) -> int:
    pkg = _package(mod)
    return LAYERS.index(pkg) if pkg in LAYERS else -1


def test_every_package_has_a_layer():
    pkgs = {_package(m) for m in MODULES} - {"", "__main__"}
    assert pkgs <= set(LAYERS), f"packages without a layer: {sorted(pkgs - set(LAYERS))}"
    assert set(LAYERS) - {"live"} <= pkgs | {"live"}


def test_imports_point_downward():
    bad = []
    for mod in MODULES:
        if _package(mod) in ("", "__main__"):
            continue
        for target, _name, line in _imports(mod):
            if target == "eagle3kit":
                continue
            if _layer(target) > _layer(mod):
                bad.append(f"{mod}:{line} imports {target} (a higher layer)")
    assert not bad, "\n".join(bad)


def test_no_private_names_across_packages():
    bad = []
    for mod in MODULES:
        for target, name, line in _imports(mod):
            if _owner(target) == _owner(mod):
                continue
            private_mod = any(p.startswith("_") and p != "__init__" for p in target.split("."))
            if private_mod or (name.startswith("_") and not name.startswith("__")):
                bad.append(f"{mod}:{line} imports {target} {name}".rstrip())
    assert not bad, "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_between_modules_or_packages():
    mods: dict[str, set[str]] = {m: set() for m in MODULES}
    pkgs: dict[str, set[str]] = {}
    for mod in MODULES:
        for target, _name, _line in _imports(mod):
            if target in MODULES and target != mod:
                mods[mod].add(target)
            a, b = _package(mod), _package(target)
            if a and b and a != b:
                pkgs.setdefault(a, set()).add(b)
    assert not _cycles(mods), f"module import cycles: {_cycles(mods)}"
    assert not _cycles(pkgs), f"package import cycles: {_cycles(pkgs)}"


def test_architecture_doc_states_the_same_layer_order():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    m = re.search(r"Layer order \(low -> high\): (.+)", doc)
    assert m, "docs/ARCHITECTURE.md must state 'Layer order (low -> high): a < b < ...'"
    assert [x.strip().rstrip("/").removesuffix(".py") for x in m.group(1).split("<")] == LAYERS


@pytest.mark.parametrize("pkg", TORCH_FREE)
def test_torch_free_layers_do_not_import_torch(pkg):
    mods = sorted(m for m in MODULES if _package(m) == pkg and not m.endswith("plots"))
    code = (
        "import sys, importlib\n"
        f"for m in {mods!r}: importlib.import_module(m)\n"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def _registry():
    from eagle3kit.core import registry

    return registry


def test_method_parts_are_the_registrys():
    """methods/<package>/ holds one part per layer the registry lists for it (a module
    `<layer>.py` or a package `<layer>/`), and nothing else."""
    registry = _registry()
    found = set()
    for mod in MODULES:
        parts = mod.split(".")
        if len(parts) > 3 and parts[1] == METHODS:
            found.add((parts[2], parts[3]))
    declared = {(m.package, layer) for m in registry.METHODS for layer in m.parts}
    assert found == declared, (
        f"parts not in core/registry.py: {sorted(found - declared)}; "
        f"declared, not found: {sorted(declared - found)}"
    )
    assert {layer for _, layer in found} <= set(registry.LAYER_PARTS) <= set(LAYERS)


def _part_calls(source: str) -> list[tuple[str | None, int]]:
    """(layer asked for, line) of every `registry.part(name, LAYER)` / `registry.parts(LAYER)`
    call in `source` (None: the layer is not a string literal)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        f = node.func
        if f.attr not in ("part", "parts") or getattr(f.value, "id", None) != "registry":
            continue
        args = node.args[1:] if f.attr == "part" else node.args[:1]
        args += [k.value for k in node.keywords if k.arg == "layer"]
        lit = args[0].value if args and isinstance(args[0], ast.Constant) else None
        out.append((lit if isinstance(lit, str) else None, node.lineno))
    return out


def test_method_parts_are_asked_for_by_their_layer_or_above():
    """Generic code reaches a method's part through the registry; a module asks only for a
    part of its own layer or below (the layer order, as imports keep it), named literally."""
    bad = []
    for mod in MODULES:
        for layer, line in _part_calls(MODULES[mod].read_text()):
            if layer is None or layer not in LAYERS:
                bad.append(f"{mod}:{line} asks for a part by a non-literal layer")
            elif LAYERS.index(layer) > _layer(mod):
                bad.append(f"{mod}:{line} asks for the {layer} part (a higher layer)")
    assert not bad, "\n".join(bad)


def test_the_part_check_reads_every_ask():
    code = 'x = registry.part("dflash", "measure")\ny = registry.parts(LAYER)\nz = part("a", "b")\n'
    assert _part_calls(code) == [("measure", 1), (None, 2)]
