"""The one reader of DFlash drafters (z-lab's and speculators' layouts), from config.json and
the safetensors headers; the tensors too for `read_dflash`.

    dflash_header(path or Checkpoint) -> MethodHeader     headers only (inspect, compat)
    read_dflash(path) -> (DFlashSpec, {canonical name: torch tensor}, MethodHeader)

Canonical tensor names (docs/formats.md "DFlash drafters"), the module's parameter names:
z-lab's (`fc.weight`, `hidden_norm.weight`, `norm.weight`, `layers.{i}.*`, optional
`embed_tokens.weight`, `lm_head.weight`, `d2t`, `t2d`); a leading `model.` dropped. Only
safetensors and JSON are read; `read_dflash` imports torch on call.
"""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.checkpoint.io.tensor_read import read_tensors
from eagle3kit.checkpoint.methods import MethodHeader, local, opened
from eagle3kit.core.errors import bad
from eagle3kit.methods.dflash.checkpoint.layout import is_dflash_config, read_dflash_config
from eagle3kit.methods.dflash.checkpoint.spec import DFlashSpec

METHOD = "dflash"


def variant_of(config: dict[str, Any]) -> str:
    """Which of the DFlash family a DFlash config is: "dflash", or one of the variants read
    here but not built (core/registry.py's `variants`: "dflash2", "dspark", "domino")."""
    dfc = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    proj = dfc.get("projector_type") or config.get("projector_type")
    if proj in ("dspark", "domino"):
        return str(proj)
    smt = config.get("speculators_model_type")
    if smt in ("dflash2", "dspark"):
        return str(smt)
    archs = " ".join(str(a) for a in config.get("architectures") or [])
    return "dflash2" if "DFlash2" in archs else "dspark" if "DSpark" in archs else METHOD


def _canonical(name: str) -> str:
    return name[len("model.") :] if name.startswith("model.") else name


def dflash_header(where: str | Checkpoint) -> MethodHeader:
    """Layout, DFlashSpec and canonical names of a DFlash drafter (z-lab or speculators)."""
    ckpt = opened(where)
    if not is_dflash_config(ckpt.config):
        raise bad(
            ckpt.config_file,
            "not a DFlash drafter (no dflash_config, DFlash architecture "
            "or speculators_model_type 'dflash')",
        )
    names = {_canonical(n): n for n in ckpt.tensors}
    spec = read_dflash_config(ckpt.config, ckpt.config_file, set(names))
    if "lm_head.weight" in names and spec.draft_vocab_size == spec.vocab_size:
        rows = ckpt.tensors[names["lm_head.weight"]].shape[0]
        spec = spec.replace(draft_vocab_size=int(rows))
    notes = []
    dfc = ckpt.config.get("dflash_config") or {}
    if spec.layout == "zlab" and "target_layer_ids" not in dfc:
        notes.append(f"no target_layer_ids: z-lab's default {list(spec.target_layer_ids)} used")
    return MethodHeader(ckpt, METHOD, spec.layout, spec, names, notes)


def read_dflash(path: str) -> tuple[DFlashSpec, dict[str, Any], MethodHeader]:
    """(spec, canonical name -> torch tensor, header) of a DFlash drafter in either layout."""
    head = dflash_header(local(path))
    return head.spec, read_tensors(head.ckpt, head.names), head
