"""The one reader of drafter checkpoints: every verb that opens a drafter enters here.

    drafter_header(path or Checkpoint) -> DrafterHeader    headers only (inspect, compat)
    read_drafter(path) -> (DraftSpec, tensors, DrafterHeader)   the weights too (convert,
                                                             Eagle3Drafter.from_pretrained,
                                                             probe)

The path: safetensors_io.load_checkpoint reads config.json and the safetensors headers (local
dir, file or Hub repo id); layouts.read_spec tells the layout, builds the DraftSpec and maps
each stored tensor name to its canonical name (SGLang's names: `midlayer.*`, `fc.weight`,
`d2t`, ...; docs/formats.md "Drafter layouts"); then, for read_drafter only, the tensors are
read under their canonical names. Only safetensors and JSON are read, never a pickle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eagle3kit.checkpoint.eagle3.layouts import read_spec
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint, load_checkpoint
from eagle3kit.checkpoint.io.tensor_read import local_copy, read_tensors  # noqa: F401
from eagle3kit.core.spec import DraftSpec


@dataclass
class DrafterHeader:
    """A drafter read from its config and headers: no tensor bytes (but d2t/t2d on demand)."""

    ckpt: Checkpoint
    layout: str  # sglang | vllm | eagle
    spec: DraftSpec
    names: dict[str, str]  # canonical name -> stored name

    @property
    def source(self) -> str:
        return self.ckpt.source

    @property
    def tensor_file(self) -> str:
        """The file a finding about a missing tensor names (the first weights file)."""
        return self.ckpt.files[0] if self.ckpt.files else self.ckpt.source


def drafter_header(where: str | Checkpoint) -> DrafterHeader:
    """Layout, DraftSpec and canonical names of a drafter, from config.json and headers."""
    ckpt = where if isinstance(where, Checkpoint) else load_checkpoint(where)
    ckpt.require_complete()  # a drafter is read whole: every shard its index lists
    layout, spec, names = read_spec(ckpt)
    return DrafterHeader(ckpt, layout, spec, names)


def read_drafter(path: str) -> tuple[DraftSpec, dict[str, Any], DrafterHeader]:
    """(spec, canonical name -> torch tensor, header) of a drafter in any layout."""
    ckpt = load_checkpoint(path)
    if ckpt.repo_id is not None:
        ckpt = local_copy(ckpt)
    head = drafter_header(ckpt)
    return head.spec, read_tensors(ckpt, head.names), head
