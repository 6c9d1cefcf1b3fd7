"""`eagle3kit inspect`: describe a drafter or a target from its config and headers only."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.eagle3.inspect import (
    eagle_variant,
    order,
    tensor_role,
    vocab_map_summary,
)
from eagle3kit.checkpoint.eagle3.layouts import is_drafter_config, method_of
from eagle3kit.checkpoint.eagle3.reader import drafter_header
from eagle3kit.checkpoint.io.hub_files import open_checkpoint
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.checkpoint.methods import MethodInspectResult, part_of
from eagle3kit.core import registry
from eagle3kit.core.artifacts import stamp
from eagle3kit.core.errors import bad
from eagle3kit.core.spec import DraftSpec, default_aux_layers


@dataclass
class TargetInfo:
    architecture: str
    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int | None

    @property
    def default_aux_layers(self) -> tuple[int, int, int]:
        return default_aux_layers(self.num_layers)

    def to_json(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "model_type": self.model_type,
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "default_aux_layers": list(self.default_aux_layers),
        }


def target_info(ckpt: Checkpoint) -> TargetInfo:
    """Layers, hidden size and vocab of a causal LM (reads the nested text_config of
    multimodal models)."""
    cfg, where = ckpt.config, ckpt.config_file
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    if text is not cfg:
        where = f"{where}: text_config"
    vals = {}
    for key in ("num_hidden_layers", "hidden_size", "vocab_size"):
        v = text.get(key, cfg.get(key))
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise bad(
                where,
                f"{key}: expected a positive int, found {v!r}"
                if key in text or key in cfg
                else f"{key}: missing (expected a positive int)",
            )
        vals[key] = v
    archs = cfg.get("architectures") or ["?"]
    mpe = text.get("max_position_embeddings", cfg.get("max_position_embeddings"))
    return TargetInfo(
        architecture=str(archs[0]) if isinstance(archs, list) and archs else str(archs),
        model_type=str(text.get("model_type", cfg.get("model_type", "?"))),
        num_layers=vals["num_hidden_layers"],
        hidden_size=vals["hidden_size"],
        vocab_size=vals["vocab_size"],
        max_position_embeddings=mpe if isinstance(mpe, int) else None,
    )


def is_drafter(ckpt: Checkpoint) -> bool:
    return is_drafter_config(ckpt.config, set(ckpt.names()))


@dataclass
class InspectResult:
    """What `inspect` found: a drafter (layout, spec, tensors with roles, what is missing or
    unexpected, the vocab map) or a target (its layers). `to_json()` is `inspect --json`;
    `result["key"]` reads the same document (for callers written against the dict form)."""

    kind: str  # "drafter" | "target"
    source: str
    format: str  # "sglang" | "vllm" | "eagle" | "target"
    spec: DraftSpec | None
    target: TargetInfo | None
    tensors: list[dict[str, Any]]
    total_bytes: int
    has_tokenizer: bool
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    shape_mismatches: list[dict[str, Any]] = field(default_factory=list)
    vocab_map: dict[str, Any] = field(default_factory=dict)
    variant: str | None = None  # EAGLE-3 / EAGLE 3.1 naming, from the norm flags
    absent: dict[str, Any] | None = None  # a partial target: shards its index lists, not here
    # a target: the fields of each method whose drafter it ships (MTP heads: "mtp")
    extras: dict[str, Any] = field(default_factory=dict)
    ships: str | None = None  # ... and the method it ships a drafter of

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "role": self.kind,  # drafter | target
            "source": self.source,
            "format": self.format,
            "spec": self.spec.to_json() if self.spec else None,
            "target": self.target.to_json() if self.target else None,
            "tensors": self.tensors,
            "total_bytes": self.total_bytes,
            "missing": self.missing,
            "unexpected": self.unexpected,
            "has_tokenizer": self.has_tokenizer,
        }
        if self.kind == "target":
            doc["partial"] = self.absent
            doc.update(self.extras)
            doc["method"] = self.ships
        if self.kind == "drafter" and self.spec is not None:
            doc["method"] = method_of(self.spec)
            doc.update(
                shape_mismatches=self.shape_mismatches,
                vocab_map=self.vocab_map,
                variant=self.variant,
            )
        return stamp(doc, "inspect")

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_json().get(key, default)


def _require_config(ckpt: Checkpoint) -> None:
    """A local .safetensors file without config.json beside it: say that, not `hidden_size:
    missing` for a file that does not exist."""
    if ckpt.repo_id is None and not Path(ckpt.config_file).exists():
        raise bad(
            ckpt.config_file,
            f"missing: inspect reads the config.json beside {Path(ckpt.source).name} "
            "(expected the drafter's or target's config.json in that folder)",
        )


def _target_extras(ckpt: Checkpoint) -> tuple[dict[str, Any], str | None]:
    """Each method part's fields about a target (`target_fields`: MTP heads), and the method
    whose drafter the target ships, if any."""
    extras, ships = {}, None
    for m, part in registry.parts("checkpoint"):
        fields = getattr(part, "target_fields", None)
        if fields is not None:
            found, shipped = fields(ckpt)
            extras.update(found)
            ships = ships or (m.name if shipped else None)
    return extras, ships


def _inspect_target(ckpt: Checkpoint) -> InspectResult:
    info = target_info(ckpt)
    extras, ships = _target_extras(ckpt)
    rows = [
        {"name": n, "shape": list(t.shape), "dtype": t.dtype, "bytes": t.nbytes}
        for n, t in sorted(ckpt.tensors.items())
    ]
    return InspectResult(
        "target",
        ckpt.source,
        "target",
        None,
        info,
        rows,
        sum(r["bytes"] for r in rows),
        ckpt.has_tokenizer,
        absent=_absent(ckpt),
        extras=extras,
        ships=ships,
    )


def _absent(ckpt: Checkpoint) -> dict[str, Any] | None:
    """A partial target: how many tensors are in shards that are not here, and which shards."""
    if not ckpt.absent:
        return None
    return {"tensors": len(ckpt.absent), "shards": ckpt.missing_shards()}


def inspect_checkpoint(path_or_repo: str) -> InspectResult | MethodInspectResult:
    """Describe a drafter (format, spec, tensors with roles, missing/unexpected) or a target;
    a drafter its method's part reads (DFlash, P-EAGLE, ...) by that part's `inspect`."""
    ckpt = open_checkpoint(path_or_repo)  # a partial target is read from its present shards
    _require_config(ckpt)
    _, part = part_of(ckpt)
    if getattr(part, "inspect", None) is not None:
        return part.inspect(ckpt)
    if not is_drafter(ckpt):
        return _inspect_target(ckpt)
    head = drafter_header(ckpt)
    layout, spec, names = head.layout, head.spec, head.names
    expected = spec.expected_shapes()
    rows, mismatches = [], []
    for canon in sorted(names, key=order):
        t = ckpt.tensors[names[canon]]
        rows.append(
            {
                "name": names[canon],
                "canonical": canon,
                "shape": list(t.shape),
                "dtype": t.dtype,
                "bytes": t.nbytes,
                "role": tensor_role(canon, spec),
            }
        )
        if canon in expected and tuple(t.shape) != expected[canon]:
            mismatches.append(
                {"name": names[canon], "expected": list(expected[canon]), "found": list(t.shape)}
            )
    vm = {k: v for k, v in vocab_map_summary(ckpt, spec, names).items() if not k.startswith("_")}
    return InspectResult(
        "drafter",
        ckpt.source,
        layout,
        spec,
        None,
        rows,
        sum(r["bytes"] for r in rows),
        ckpt.has_tokenizer,
        missing=[n for n in spec.required_tensors() if n not in names],
        unexpected=[names[n] for n in sorted(names) if n not in expected],
        shape_mismatches=mismatches,
        vocab_map=vm,
        variant=eagle_variant(spec),
    )
