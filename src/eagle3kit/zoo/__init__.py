"""The built-in zoo: small target models built on first use from the Python standard library.

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
with a much smaller config and recipe (seconds to build; for tests), stored as
``<name>-tiny``.

Models are normal Hugging Face dirs (config.json, model.safetensors, tokenizer files) plus a
``zoo.json`` manifest, under ``$EAGLE3KIT_HOME/zoo/<name>`` (default home
``~/.cache/eagle3kit``). Builds are deterministic (fixed seeds, sorted files, fixed thread
count): deleting the cache and rebuilding on the same machine and Python gives bit-identical
weights. A build writes into a temp dir that is renamed into place when complete, so an
interrupted build is never mistaken for a cached one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from eagle3kit.core.atomic import atomic_dir, atomic_write_json
from eagle3kit.core.errors import Eagle3Error
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
)
from eagle3kit.zoo.training import ARCHS


def home() -> Path:
    """``$EAGLE3KIT_HOME`` or ``~/.cache/eagle3kit``."""
    return Path(os.environ.get("EAGLE3KIT_HOME") or Path.home() / ".cache" / "eagle3kit")


def path(name: str, *, size: str = "full") -> Path:
    """Where member ``name`` lives (built or not)."""
    member(name)
    check_size(size)
    return home() / "zoo" / (name if size == "full" else f"{name}-{size}")


def recipe_digest(name: str, size: str = "full") -> str:
    """A hash of everything in the code that determines the member's weights."""
    m = member(name)
    doc = {
        "version": RECIPE_VERSION,
        "member": asdict(m),
        "arch": ARCHS[m.arch][size],
        "recipe": _digested(recipe(name, size)),
        "parent": recipe_digest(m.parent, size) if m.parent else None,
        "threads": BUILD_THREADS[size],
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


# Recipe fields added after a member's recipe was fixed: left out of its digest while at their
# default, so a member whose weights they do not change keeps its digest (the tiny members).
_LATER_FIELDS = {"chat_unsigned": 0.0, "pretokenizer": "bytelevel"}


def _digested(r) -> dict[str, Any]:
    doc = asdict(r)
    return {k: v for k, v in doc.items() if _LATER_FIELDS.get(k, object()) != v}


def manifest(name: str, *, size: str = "full") -> dict[str, Any] | None:
    """The ``zoo.json`` of a built member, or None when it is not built (or stale)."""
    f = path(name, size=size) / MANIFEST
    try:
        doc = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    return doc if doc.get("recipe_digest") == recipe_digest(name, size) else None


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


def is_built(name: str, *, size: str = "full") -> bool:
    return manifest(name, size=size) is not None


def chat_warning(name: str, *, size: str = "full") -> str | None:
    """The built member's warning that its chat answers fall below the zoo's bar (from
    zoo.json; None when they meet ``builder.CHAT_BAR`` or the member is not built)."""
    doc = manifest(name, size=size)
    chat = (doc or {}).get("metrics", {}).get("chat", {})
    below = chat.get("bar", {}).get("below")
    if not below:
        return None
    from eagle3kit.zoo.builder import chat_bar_warning

    return chat_bar_warning(name if size == "full" else f"{name}-{size}", chat)


def get(name: str, *, size: str = "full", progress: Progress | None = None) -> Path:
    """The member's model dir, building it first when it is missing."""
    return build(name, size=size, progress=progress)


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
    progress: Progress | None = None,
    force: bool = False,
    strict: bool = False,
) -> Path:
    """Build member ``name`` (and its parent first) unless it is already cached; returns its dir.

    ``progress`` (eagle3kit.core.progress) receives one event stream per build stage; the CLI draws
    it as Rich bars. The folder appears complete or not at all
    (eagle3kit.core.atomic.atomic_dir). ``strict``: refuse (Eagle3Error) a member whose chat
    answers fall below ``builder.CHAT_BAR`` instead of recording it in zoo.json."""
    progress = progress if callable(progress) else None  # older callers passed a bool
    m = member(name)
    check_size(size)
    parent_dir = build(m.parent, size=size, progress=progress, strict=strict) if m.parent else None
    dest = path(name, size=size)
    with _lock(dest):
        if not force and is_built(name, size=size):
            if strict and (w := chat_warning(name, size=size)):
                raise Eagle3Error(f"{w}; cached without --strict, refused now")
            return dest
        _remove_stale(dest)
        from eagle3kit.zoo.builder import build_into

        with atomic_dir(dest) as tmp:
            build_into(m, size, recipe(name, size), tmp, parent_dir, progress, strict=strict)
            doc = json.loads((tmp / MANIFEST).read_text())
            doc["recipe_digest"] = recipe_digest(name, size)
            atomic_write_json(tmp / MANIFEST, doc)
    return dest


def describe(name: str, *, size: str = "full") -> dict[str, Any]:
    """One row of ``zoo list``: name, architecture, lineage, path, its state, its manifest.

    ``state``: "built" (a current zoo.json), "stale" (a zoo.json of another recipe: rebuilt on
    next use) or "absent". ``build_seconds``: the measured build time of a built member (its
    zoo.json), else the estimate of what building it costs now (its parent's build included
    when that is not built either; ``BUILD_SECONDS``)."""
    m = member(name)
    doc = manifest(name, size=size)
    state = "built" if doc is not None else _absent_or_stale(name, size)
    if doc is not None:
        cost = doc.get("build_seconds")
    else:
        cost = BUILD_SECONDS[size][name]
        if m.parent and not is_built(m.parent, size=size):
            cost += BUILD_SECONDS[size][m.parent]
    return {
        "name": name,
        "size": size,
        "architecture": {"llama": "LlamaForCausalLM", "dsv3": "DeepseekV3ForCausalLM"}[m.arch],
        "version": m.version,
        "parent": m.parent,
        "slice": m.slice,
        "path": str(path(name, size=size)),
        "built": doc is not None,
        "state": state,
        "build_seconds": cost,
        "build_measured": doc is not None and cost is not None,
        "manifest": doc,
    }


def _absent_or_stale(name: str, size: str) -> str:
    return "stale" if (path(name, size=size) / MANIFEST).is_file() else "absent"
