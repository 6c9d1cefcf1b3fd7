"""The built-in zoo: small target models trained on the Python standard library, shipped
with the package.

Members (all with the same byte-level BPE tokenizer recipe and chat template):

========  ============  ===========================================================
name      architecture  trained on
========  ============  ===========================================================
llama-v1  Llama         stdlib library source (the ``lib`` slice)
llama-v2  Llama         llama-v1, trained further on the stdlib ``test/`` package
dsv3-v1   DeepSeek-V3   stdlib library source (MLA + MoE: Kimi-K2's architecture)
dsv3-v2   DeepSeek-V3   dsv3-v1, trained further on the stdlib ``test/`` package
========  ============  ===========================================================

v1 -> v2 is the Kimi-K2 -> K2.5 situation in miniature: same architecture and tokenizer,
weights moved by further training on shifted data. ``size="tiny"`` gives the same members
with a much smaller config and recipe (for tests), labelled ``<name>-tiny``.

``get`` returns a shipped member's folder inside the package (``zoo/shipped/<label>``: a
Hugging Face dir in bf16 plus ``zoo.json``; ``shipping.py``), its files checked against
their sha256 on first use; it never trains. ``build`` reproduces a member from its recipe
into a folder of your choice (``eagle3kit zoo build NAME -o DIR``); a v2's parent is built
(float32, as the recipe trains it) into ``$EAGLE3KIT_HOME/zoo/<label>`` and reused. Builds
are deterministic on one machine (fixed seeds, sorted files, fixed thread count) and atomic
(a temp dir renamed into place); another CPU or Python gives other bytes (docs/zoo.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eagle3kit.core.atomic import atomic_dir, atomic_write_json
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.progress import Progress
from eagle3kit.zoo.members import (  # noqa: F401  (the zoo's public names)
    BUILD_SECONDS,
    BUILD_THREADS,
    MANIFEST,
    MEMBERS,
    RECIPE_VERSION,
    RECIPES,
    SIZES,
    Member,
    check_size,
    member,
    names,
    recipe,
    recipe_digest,
)
from eagle3kit.zoo.shipping import label, parse_label  # noqa: F401


def home() -> Path:
    """``$EAGLE3KIT_HOME`` or ``~/.cache/eagle3kit``."""
    return Path(os.environ.get("EAGLE3KIT_HOME") or Path.home() / ".cache" / "eagle3kit")


def path(name: str, *, size: str = "full") -> Path:
    """Where the shipped member ``name`` lives in the package (shipped or not)."""
    from eagle3kit.zoo.shipping import location

    member(name)
    return location(label(name, size))


def cache_path(name: str, *, size: str = "full") -> Path:
    """Where ``build`` keeps a member it builds as a parent: ``$EAGLE3KIT_HOME/zoo/<label>``."""
    member(name)
    return home() / "zoo" / label(name, size)


def manifest(name: str, *, size: str = "full") -> dict[str, Any] | None:
    """The shipped member's ``zoo.json``, or None when the package does not ship it."""
    from eagle3kit.zoo.shipping import read_manifest

    return read_manifest(path(name, size=size))


def _built(folder: Path, name: str, size: str) -> bool:
    """Whether ``folder`` holds a complete build of the code's current recipe."""
    from eagle3kit.zoo.shipping import read_manifest

    doc = read_manifest(folder)
    return doc is not None and doc.get("recipe_digest") == recipe_digest(name, size)


def signed_requests(model_dir: str | Path | None) -> bool:
    """Whether the zoo member in ``model_dir`` was trained on requests that carry the
    function's signature (its zoo.json recipe's ``chat_signature``): the chat prompts to use
    on it. False for any other directory (not a zoo member, or no such file)."""
    if not model_dir:
        return False
    try:
        doc = json.loads((Path(model_dir) / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return bool(doc.get("recipe", {}).get("chat_signature")) if isinstance(doc, dict) else False


def is_shipped(name: str, *, size: str = "full") -> bool:
    return manifest(name, size=size) is not None


def chat_warning(name: str, *, size: str = "full") -> str | None:
    """The shipped member's warning that its chat answers fall below the zoo's bar (from
    zoo.json; None when they meet ``builder.CHAT_BAR`` or the member is not shipped)."""
    return folder_warning(path(name, size=size), name, size)


def resolve_target(name_or_path: str) -> str:
    """A local model dir (as given), a zoo member name (``dsv3-v2``, ``llama-v1-tiny``: its
    folder shipped in the package, never built here; Eagle3Error saying how to build one the
    package lacks), else the string itself, for the hub to resolve. (The one rule for
    ``--target``; model/loading.py re-exports it.)"""
    if Path(name_or_path).expanduser().exists():
        return name_or_path
    found = parse_label(name_or_path)
    if found is None:
        return name_or_path
    name, size = found
    return str(get(name, size=size))


def get(name: str, *, size: str = "full") -> Path:
    """The shipped member's folder, its files checked against zoo.json's sha256 (once per
    process). Never builds: a member the package lacks raises Eagle3Error saying how to build
    it (``eagle3kit zoo build NAME -o DIR``)."""
    from eagle3kit.zoo.shipping import shipped

    member(name)
    return shipped(label(name, size))


@contextlib.contextmanager
def _lock(target: Path) -> Iterator[None]:
    """An exclusive file lock beside ``target`` (POSIX), so two processes never build it twice."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows: atomic rename still protects the cache
        yield
        return
    with open(target.parent / f".{target.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _remove_stale(dest: Path) -> None:
    """Temp/old dirs left by a build killed by a signal (atomic_dir's and the older naming)."""
    n = re.escape(dest.name)
    stale = re.compile(rf"\.(tmp|old)-{n}-\d+|\.{n}\.(.+\.tmp|old-\d+)")
    for p in dest.parent.iterdir():
        if p.is_dir() and stale.fullmatch(p.name):
            shutil.rmtree(p, ignore_errors=True)


def build(
    name: str,
    *,
    size: str = "full",
    out: str | Path | None = None,
    parent: str | Path | None = None,
    progress: Progress | None = None,
    force: bool = False,
    strict: bool = False,
) -> Path:
    """Build member ``name`` from its recipe into ``out`` (default ``cache_path``) unless a
    build of the current recipe is already there; returns the folder (float32, as trained).

    A v2 starts from ``parent``, a build of its v1 (an earlier ``zoo build -o``), else from
    its v1 built into the cache first; never from the shipped bf16 v1, which the recipe does
    not train from. ``out`` must be absent, empty or an earlier build of this member: nothing
    else is overwritten. ``progress`` (eagle3kit.core.progress) receives one event stream per
    build stage. The folder appears complete or not at all (core.atomic.atomic_dir).
    ``strict``: refuse (Eagle3Error) a member whose chat answers fall below
    ``builder.CHAT_BAR`` instead of recording it in zoo.json."""
    progress = progress if callable(progress) else None  # older callers passed a bool
    m = member(name)
    check_size(size)
    parent_dir = None
    if m.parent:
        parent_dir = Path(parent) if parent else build(m.parent, size=size, progress=progress)
        _check_parent(parent_dir, m.parent, size)
    dest = Path(out) if out is not None else cache_path(name, size=size)
    lock = _lock(dest) if out is None else contextlib.nullcontext()
    with lock:
        if not force and _built(dest, name, size):
            if strict and (w := folder_warning(dest, name, size)):
                raise Eagle3Error(f"{w}; built before without --strict, refused now")
            return dest
        _check_out(dest, name, size)
        _remove_stale(dest)
        from eagle3kit.zoo.builder import build_into
        from eagle3kit.zoo.shipping import git_commit

        with atomic_dir(dest) as tmp:
            build_into(m, size, recipe(name, size), tmp, parent_dir, progress, strict=strict)
            doc = json.loads((tmp / MANIFEST).read_text())
            doc["recipe_digest"] = recipe_digest(name, size)
            doc["commit"] = git_commit()
            atomic_write_json(tmp / MANIFEST, doc)
    return dest


def _check_parent(folder: Path, name: str, size: str) -> None:
    """``folder`` must be a float32 build of ``name`` at ``size`` with the current recipe."""
    from eagle3kit.zoo.shipping import read_manifest

    doc = read_manifest(folder) or {}
    where = str(folder / MANIFEST)
    if doc.get("member") != name or doc.get("size") != size:
        found = f"{doc.get('member')} ({doc.get('size')})" if doc else "no zoo.json"
        raise bad(where, f"expected a build of {label(name, size)} as the parent, found {found}")
    if "shipped" in doc:
        raise bad(where, "expected a float32 build (zoo build -o), found a shipped bf16 member")
    if doc.get("recipe_digest") != recipe_digest(name, size):
        raise bad(
            where,
            f"recipe_digest: expected {recipe_digest(name, size)} (this code's), "
            f"found {doc.get('recipe_digest')}",
        )


def _check_out(dest: Path, name: str, size: str) -> None:
    """Refuse to replace a folder that is neither empty nor an earlier build of this member."""
    from eagle3kit.zoo.shipping import read_manifest

    if not dest.exists() or (dest.is_dir() and not any(dest.iterdir())):
        return
    doc = read_manifest(dest) or {}
    if doc.get("member") != name or doc.get("size") != size or "shipped" in doc:
        raise bad(
            str(dest),
            f"expected an absent or empty folder (or an earlier build of "
            f"{label(name, size)}) to build into; found other files, left as they are",
        )


def folder_warning(folder: Path, name: str, size: str) -> str | None:
    """The chat-bar warning recorded in ``folder``'s zoo.json (None when it meets the bar)."""
    from eagle3kit.zoo.shipping import read_manifest

    chat = ((read_manifest(folder) or {}).get("metrics") or {}).get("chat") or {}
    if not chat.get("bar", {}).get("below"):
        return None
    from eagle3kit.zoo.builder import chat_bar_warning

    return chat_bar_warning(label(name, size), chat)


def describe(name: str, *, size: str = "full") -> dict[str, Any]:
    """One row of ``zoo list``: name, architecture, lineage, where it ships, whether this
    package has it, its size in bytes, its weights' sha256, its manifest (figures in
    ``manifest.metrics``), and whether it was built by the code's current recipe."""
    m = member(name)
    doc = manifest(name, size=size)
    files = (doc or {}).get("shipped", {}).get("files", {})
    return {
        "name": name,
        "size": size,
        "label": label(name, size),
        "architecture": {"llama": "LlamaForCausalLM", "dsv3": "DeepseekV3ForCausalLM"}[m.arch],
        "version": m.version,
        "parent": m.parent,
        "slice": m.slice,
        "path": str(path(name, size=size)),
        "shipped": doc is not None,
        "bytes": sum(f["bytes"] for f in files.values()) if doc else None,
        "sha256": files.get("model.safetensors", {}).get("sha256"),
        "recipe_current": doc is not None and doc.get("recipe_digest") == recipe_digest(name, size),
        "manifest": doc,
    }
