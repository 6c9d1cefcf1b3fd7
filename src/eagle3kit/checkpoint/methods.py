"""Which method a checkpoint belongs to, and what every method drafter's checkpoint shares.

    detect_method(config, names) -> a method (or variant) name, or None for a plain target
    method_header_of(ckpt) -> MethodHeader | None   a drafter its method's own part reads
    inspect_method(head) -> MethodInspectResult      inspect's answer for such a drafter
    tensor_findings(head) -> [Finding]               its tensors against its spec

Detection asks each method's checkpoint part (core/registry.py `parts`): `detect(config,
names)` returns (name, strength) or None, and the strongest claim wins (3: the config names
the method; 2: a drafter config of the method's shape; 1: a target that ships the drafter),
ties going to the registry's order. A part reads its drafters into a `MethodHeader` (a spec
with `expected_shapes`, `required_tensors`, `accepts_shape` and `to_json`; canonical tensor
names mapped to the stored ones); EAGLE-3 drafters keep their own reader
(checkpoint/eagle3/reader.py). Torch-free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from eagle3kit.checkpoint.findings import Finding, error
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint, load_checkpoint
from eagle3kit.checkpoint.io.tensor_read import local_copy
from eagle3kit.core import registry
from eagle3kit.core.artifacts import stamp


def detect_method(config: dict[str, Any], names: Any = ()) -> str | None:
    """The method of a checkpoint from its config (and tensor names): a drafter's method (or
    a variant a method reads, such as "dspark"), a target-head method for a target that ships
    its drafter, None for a plain target."""
    names = set(names)
    best: tuple[str, int] | None = None
    for _, part in registry.parts("checkpoint"):
        claim = part.detect(config, names)
        if claim is not None and (best is None or claim[1] > best[1]):
            best = claim
    return best[0] if best else None


@dataclass
class MethodHeader:
    """A drafter read by its method's part from config and headers (no tensor bytes)."""

    ckpt: Checkpoint
    method: str
    layout: str
    spec: Any  # the method's spec (methods/<package>/checkpoint)
    names: dict[str, str]  # canonical name -> stored name
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def source(self) -> str:
        return self.ckpt.source


def part_of(ckpt: Checkpoint) -> tuple[str | None, Any]:
    """(the checkpoint's method, its method's checkpoint part) from its config and names."""
    name = detect_method(ckpt.config, ckpt.tensors)
    return name, (registry.part(name, "checkpoint") if name else None)


def method_header_of(ckpt: Checkpoint) -> MethodHeader | None:
    """The header of a drafter its method's own part reads, else None (EAGLE-3 drafters keep
    their reader, checkpoint/eagle3/reader.py; targets are never read whole here)."""
    _, part = part_of(ckpt)
    header = getattr(part, "header", None)
    return header(ckpt) if header is not None else None


def opened(where: str | Checkpoint) -> Checkpoint:
    """A whole checkpoint (every shard its index lists), from a path or as given."""
    ckpt = where if isinstance(where, Checkpoint) else load_checkpoint(where)
    ckpt.require_complete()
    return ckpt


def local(path: str) -> Checkpoint:
    """A checkpoint whose tensors can be read here (a Hub repo downloaded first)."""
    ckpt = load_checkpoint(path)
    return local_copy(ckpt) if ckpt.repo_id is not None else ckpt


def tensor_findings(head: MethodHeader) -> list[Finding]:
    """Required tensors present, shapes as the config says (the drafter on its own)."""
    spec, ckpt, out = head.spec, head.ckpt, []
    expected = spec.expected_shapes()
    for name in spec.required_tensors():
        if name not in head.names:
            out.append(error("missing-tensor", f"{name}: missing (a servable drafter needs it)"))
    for canon, stored in head.names.items():
        shape = tuple(ckpt.tensors[stored].shape)
        want = expected.get(canon)
        if want is not None and not spec.accepts_shape(canon, shape):
            out.append(
                error(
                    "shape", f"{stored}: expected {list(want)} from the config, found {list(shape)}"
                )
            )
    return out


@dataclass
class MethodInspectResult:
    """inspect's answer for a drafter its method's part reads (`to_json()` is `inspect
    --json`): the EAGLE-3 drafter's keys (`role`, `source`, `format`, `spec`, `tensors`,
    `missing`, `unexpected`, `shape_mismatches`) plus `method` and the method's own
    `fields`."""

    head: MethodHeader
    tensors: list[dict[str, Any]]
    missing: list[str]
    unexpected: list[str]
    shape_mismatches: list[dict[str, Any]]
    fields: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        h = self.head
        doc = {
            "role": "drafter",
            "method": h.method,
            "source": h.source,
            "format": h.layout,
            "spec": h.spec.to_json(),
            **self.fields,
            "tensors": self.tensors,
            "total_bytes": sum(t["bytes"] for t in self.tensors),
            "missing": self.missing,
            "unexpected": self.unexpected,
            "shape_mismatches": self.shape_mismatches,
            "notes": h.notes,
            "has_tokenizer": h.ckpt.has_tokenizer,
        }
        return stamp(doc, "inspect")

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_json().get(key, default)


def inspect_method(head: MethodHeader, fields: dict[str, Any]) -> MethodInspectResult:
    """Tensors with canonical names, missing/unexpected/mismatched against the spec; `fields`:
    the method's own (its part's `inspect_fields`)."""
    spec, ckpt = head.spec, head.ckpt
    expected = spec.expected_shapes()
    rows, bad_shapes = [], []
    for canon in sorted(head.names):
        t = ckpt.tensors[head.names[canon]]
        rows.append(
            {
                "name": t.name,
                "canonical": canon,
                "shape": list(t.shape),
                "dtype": t.dtype,
                "bytes": t.nbytes,
            }
        )
        want = expected.get(canon)
        if want is not None and not spec.accepts_shape(canon, tuple(t.shape)):
            bad_shapes.append({"name": t.name, "expected": list(want), "found": list(t.shape)})
    return MethodInspectResult(
        head,
        rows,
        missing=[n for n in spec.required_tensors() if n not in head.names],
        unexpected=[head.names[n] for n in sorted(head.names) if n not in expected],
        shape_mismatches=bad_shapes,
        fields=fields,
    )


__all__ = [
    "MethodHeader",
    "MethodInspectResult",
    "detect_method",
    "inspect_method",
    "local",
    "method_header_of",
    "opened",
    "part_of",
    "tensor_findings",
]
