"""The one loader of a target and a drafter: resolve the target's name, read the drafter's
checkpoint once, and check that the two fit (aux layers, vocabulary, hidden size)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle3kit.core.errors import bad
from eagle3kit.model.target import parse_dtype
from eagle3kit.zoo import resolve_target

if TYPE_CHECKING:
    from eagle3kit.core.spec import DraftSpec
    from eagle3kit.model.drafter import Eagle3Drafter

__all__ = [
    "LoadedDrafter",
    "drafter_method",
    "load_drafter",
    "load_for",
    "load_pair",
    "load_target",
    "parse_dtype",
    "resolve_target",
]


@dataclass
class LoadedDrafter:
    """A drafter as read from its checkpoint: the module, its spec and the file's layout."""

    drafter: Eagle3Drafter  # eval mode, no grad
    spec: DraftSpec
    layout: str


def load_drafter(path: str, *, device: str = "cpu", dtype: Any = "float32") -> LoadedDrafter:
    """Read a drafter of any method and layout once: its method (checkpoint/methods.py
    `detect_method`, from its config) picks the model part that builds it."""
    from eagle3kit.core import registry

    part = registry.part(drafter_method(path) or registry.DEFAULT, "model")
    if not hasattr(part, "load_drafter"):  # a target (its own MTP head is no drafter dir)
        part = registry.part(registry.DEFAULT, "model")  # whose reader says what is wrong
    return part.load_drafter(path, device=device, dtype=dtype)


def drafter_method(path: str | Path) -> str | None:
    """The method a drafter's config.json declares (a local dir's, else the Hub repo's by
    header; None when there is none to read)."""
    import json

    from eagle3kit.checkpoint.methods import detect_method

    try:
        cfg = json.loads((Path(str(path)).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        cfg = _hub_config(str(path))
    return detect_method(cfg) if isinstance(cfg, dict) else None


def _hub_config(path: str) -> dict[str, Any] | None:
    """A Hub repo's config.json, by header (None: not a Hub id, or it cannot be read: the
    reader then says why)."""
    from eagle3kit.checkpoint.io.safetensors_io import load_checkpoint, looks_like_repo_id
    from eagle3kit.core.errors import Eagle3Error

    if Path(path).expanduser().exists() or not looks_like_repo_id(path):
        return None
    try:
        return load_checkpoint(path).config
    except Eagle3Error:
        return None


def load_for(
    target: str, drafter: str | None, method: str, *, device: str = "cpu", dtype: Any = "float32"
) -> tuple[Any, Any]:
    """(TargetModel, drafter) for `generate`, `eval` and `bench`: a drafter dir read as its
    own method says (`load_pair`); for a method whose drafter ships inside the target (or a
    standalone head dir given as the drafter), the target's head by its method's model part."""
    from eagle3kit.core import registry

    rec = registry.get(method)
    if not rec.target_head and drafter is not None:
        found = registry.family(drafter_method(drafter))
        rec = found if found is not None and found.target_head else rec
    if rec.target_head:
        part = registry.part(rec.name, "model")
        return part.load_pair(target, drafter, device=device, dtype=dtype)
    return load_pair(target, drafter, device=device, dtype=dtype)


def load_target(
    name_or_path: str,
    *,
    device: str = "cpu",
    dtype: Any = "float32",
    aux_layers: Any = None,
    trust_remote_code: bool = False,
) -> Any:
    """A TargetModel from a zoo name, a local dir or a hub id (`resolve_target`)."""
    from eagle3kit.model.target import TargetModel

    return TargetModel.from_pretrained(
        resolve_target(name_or_path),
        device=device,
        dtype=parse_dtype(dtype),
        aux_layers=aux_layers,
        trust_remote_code=trust_remote_code,
    )


def load_pair(
    target: str,
    drafter: str | None,
    *,
    device: str = "cpu",
    dtype: Any = "float32",
    trust_remote_code: bool = False,
) -> tuple[Any, Any]:
    """(TargetModel, Eagle3Drafter | None) on one device and dtype.

    The target captures the drafter's aux layers when its checkpoint records them; the drafter
    gets the target's input embedding when its checkpoint has none. Shapes that do not fit
    (vocabulary, hidden size of the aux states) are refused with the field named.
    """
    d = load_drafter(drafter, device=device, dtype=dtype).drafter if drafter is not None else None
    aux = d.spec.aux_layers if d is not None else None
    tm = load_target(
        target, device=device, dtype=dtype, aux_layers=aux, trust_remote_code=trust_remote_code
    )
    if d is None:
        return tm, None
    if d.spec.vocab_size != tm.vocab_size:
        raise bad(
            f"{drafter}/config.json",
            f"vocab_size: expected the target's {tm.vocab_size}, found {d.spec.vocab_size}",
        )
    if d.spec.target_hidden_size != tm.hidden_size:
        raise bad(
            f"{drafter}/config.json",
            f"target_hidden_size: expected the target's {tm.hidden_size}, "
            f"found {d.spec.target_hidden_size}",
        )
    if not d.embed_loaded:
        d.attach_target(tm)  # the target's embedding (and a DFlash drafter's, its lm_head)
    return tm, d
