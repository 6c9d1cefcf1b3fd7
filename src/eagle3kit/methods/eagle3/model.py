"""EAGLE-3 / EAGLE 3.1 drafters at the model layer: the part core/registry.py asks for. The
module is model/drafter.py's `Eagle3Drafter` (the base P-EAGLE extends)."""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.eagle3.reader import read_drafter
from eagle3kit.model.drafter import Eagle3Drafter
from eagle3kit.model.loading import LoadedDrafter
from eagle3kit.model.target import parse_dtype


def load_drafter(path: str, *, device: str = "cpu", dtype: Any = "float32") -> LoadedDrafter:
    """An EAGLE-3 drafter in any layout (SGLang, speculators/vLLM, EAGLE), its checkpoint read
    once (checkpoint/eagle3/reader.py)."""
    spec, tensors, head = read_drafter(str(path))
    cfg = head.ckpt.config
    d = Eagle3Drafter.from_read(spec, tensors, cfg, device, parse_dtype(dtype), str(path))
    return LoadedDrafter(d.eval().requires_grad_(False), spec, head.layout)
