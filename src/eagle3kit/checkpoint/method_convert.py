"""convert for a drafter its method's part reads (DFlash: z-lab <-> speculators; P-EAGLE:
speculators <-> vLLM native): losslessly or refused, nothing written on refusal.

Every tensor is copied byte for byte (io/raw_tensors.py), so no dtype is changed and a round
trip is bit-exact; the part rewrites the config (`convert_to`) and says how to serve the
result (`launch_commands`). The source layout's own keys are stashed under
`eagle3kit.converted_from` (`stash`), so converting back restores the config exactly
(`restored`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.io.raw_tensors import write_raw
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint, TensorInfo
from eagle3kit.checkpoint.methods import MethodHeader, tensor_findings
from eagle3kit.core import registry
from eagle3kit.core.artifacts import stamp
from eagle3kit.core.atomic import atomic_dir, atomic_write_json
from eagle3kit.core.errors import Eagle3Error, bad


@dataclass
class MethodConvertResult:
    source: str
    method: str
    from_layout: str
    to_layout: str
    out: str
    launch: dict[str, str]
    notes: list[str] = field(default_factory=list)
    embed_from: str | None = None

    def to_json(self) -> dict[str, Any]:
        return stamp(
            {
                "source": self.source,
                "method": self.method,
                "from": self.from_layout,
                "to": self.to_layout,
                "out": self.out,
                "embed_from": self.embed_from,
                "launch_commands": self.launch,
                "notes": self.notes,
            },
            "convert",
        )


def body(head: MethodHeader) -> dict[str, TensorInfo]:
    return {c: head.ckpt.tensors[s] for c, s in head.names.items()}


def stash(cfg: dict[str, Any], layout: str, src_cfg: dict[str, Any], **extra: Any) -> None:
    """Record the source config (minus an older stash) so converting back restores it."""
    src = copy.deepcopy(src_cfg)
    ours = src.get("eagle3kit") if isinstance(src.get("eagle3kit"), dict) else {}
    ours.pop("converted_from", None)
    if not ours:
        src.pop("eagle3kit", None)
    keep = {k: v for k, v in ours.items() if k != "vocab_from_target"}
    cfg["eagle3kit"] = {**keep, **extra, "converted_from": {"layout": layout, "config": src}}


def restored(cfg: dict[str, Any], to: str) -> dict[str, Any] | None:
    """The config this file was converted from, when it was in layout `to`."""
    stash = (cfg.get("eagle3kit") or {}).get("converted_from") or {}
    return copy.deepcopy(stash["config"]) if stash.get("layout") == to else None


def convert_method(
    head: MethodHeader,
    to: str,
    out: str,
    *,
    embed_from: str | None = None,
    verifier: str | None = None,
    dtype: str | None = None,
) -> MethodConvertResult:
    """Rewrite the drafter `head` (checkpoint/methods.py) in layout `to` at `out`. `dtype`
    ("auto" or the drafter's own, `convert --dtype`): the dtype a tensor borrowed from the
    target (`embed_from`) is cast to when the target stores another; the drafter's own
    tensors are copied byte for byte whatever it says."""
    part = registry.part(head.method, "checkpoint")
    layouts = part.LAYOUTS
    if to not in layouts:
        raise Eagle3Error(
            f"--to: a {head.method} drafter converts to {' or '.join(layouts)}, found {to!r}"
        )
    if to == head.layout:
        raise Eagle3Error(f"--to {to}: {head.source} is already in that layout")
    _local(head.ckpt)
    defects = [f for f in tensor_findings(head) if f.severity == "error"]
    if defects:
        more = (
            f" (and {len(defects) - 1} more: run `eagle3kit inspect`)" if len(defects) > 1 else ""
        )
        raise bad(head.ckpt.config_file, defects[0].message + more)
    cast = cast_to(head, dtype)
    cfg, tensors, notes = part.convert_to(
        head, to, embed_from=embed_from, verifier=verifier, dtype=cast
    )
    _write(Path(out), cfg, tensors, head.method, to)
    target = verifier or embed_from or head.spec.verifier
    launch = part.launch_commands(head.spec, to, str(out), target)
    return MethodConvertResult(
        head.source, head.method, head.layout, to, str(out), launch, notes, embed_from
    )


def cast_to(head: MethodHeader, dtype: str | None) -> str | None:
    """The safetensors dtype `--dtype` asks borrowed tensors in (None: no cast asked): "auto"
    or a name of the drafter's own dtype (that of its `fc.weight`, else its first tensor)."""
    if dtype is None:
        return None
    from eagle3kit.core.dtypes import NAME_TO_SAFETENSORS, SAFETENSORS_TO_NAME

    tensors = body(head)
    own = (tensors.get("fc.weight") or next(iter(tensors.values()))).dtype
    want = own if dtype == "auto" else NAME_TO_SAFETENSORS.get(dtype, dtype.upper())
    if want != own:
        raise bad(
            "--dtype",
            f"expected auto or the drafter's own dtype ({SAFETENSORS_TO_NAME.get(own, own)}: "
            f"its tensors are copied byte for byte), found {dtype!r}",
        )
    return own


def _local(ckpt: Checkpoint) -> None:
    if ckpt.repo_id is not None:
        raise bad(ckpt.source, "convert reads a local drafter directory (download it first)")


def _write(out: Path, cfg: dict[str, Any], tensors: list, method: str, layout: str) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise bad(str(out), "expected a new or empty output directory, found one that is not empty")
    meta = {"format": "pt", "eagle3kit_method": method, "eagle3kit_layout": layout}
    with atomic_dir(out) as tmp:
        write_raw(tmp / "model.safetensors", tensors, meta)
        atomic_write_json(tmp / "config.json", cfg)
