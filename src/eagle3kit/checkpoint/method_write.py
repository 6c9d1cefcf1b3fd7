"""What the writers of every method's drafters share: the output folder checked and every
tensor checked against the spec's canonical shapes, then config.json + model.safetensors
written to a temporary sibling and renamed into place (core/atomic.atomic_dir). torch is
imported on call only (through core/atomic.save_safetensors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eagle3kit.core.atomic import atomic_dir, atomic_write_json, save_safetensors
from eagle3kit.core.errors import bad


def check_tensors(out: Path, spec: Any, tensors: dict[str, Any], what: str) -> None:
    """Refuse a non-empty `out`, a tensor `spec` has no canonical name for, or a shape it
    does not accept (`spec.accepts_shape`)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise bad(str(out), "expected a new or empty output directory, found one that is not empty")
    shapes = spec.expected_shapes()
    for name, t in tensors.items():
        want = shapes.get(name)
        if want is None:
            raise bad(what, f"tensor {name!r}: not a canonical name of this drafter")
        if not spec.accepts_shape(name, tuple(t.shape)):
            raise bad(what, f"tensor {name!r}: expected shape {list(want)}, found {list(t.shape)}")


def write_dir(out: Path, cfg: dict[str, Any], stored: dict[str, Any], meta: dict[str, str]) -> None:
    with atomic_dir(out) as tmp:
        save_safetensors(tmp / "model.safetensors", stored, {"format": "pt", **meta})
        atomic_write_json(tmp / "config.json", cfg)
