"""P-EAGLE drafters at the checkpoint layer (torch-free): the part core/registry.py's generic
verbs ask for.

    spec.py       PEagleSpec (an EAGLE-3 DraftSpec, more layers, the mask token and state)
    read.py       the one reader (speculators `peagle`, vLLM native); detection keys
    compat.py     its serving rules per engine release (data: checkpoint/engines/methods.py)
    convert.py    speculators <-> vLLM native, byte for byte
    write.py      the writer and its configs
    synthetic.py  tiny fixtures
"""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.eagle3.layouts import is_drafter_config
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.checkpoint.methods import MethodInspectResult, inspect_method
from eagle3kit.methods.peagle.checkpoint.compat import engine_findings, target_findings
from eagle3kit.methods.peagle.checkpoint.convert import LAYOUTS, convert_to, launch_commands
from eagle3kit.methods.peagle.checkpoint.read import METHOD, is_peagle_config
from eagle3kit.methods.peagle.checkpoint.read import peagle_header as header
from eagle3kit.methods.peagle.checkpoint.spec import MASK_HIDDEN, PEagleSpec

__all__ = [
    "LAYOUTS",
    "convert_to",
    "detect",
    "engine_findings",
    "header",
    "inspect",
    "inspect_fields",
    "launch_commands",
    "summary_lines",
    "target_findings",
]


def detect(config: dict[str, Any], names: set[str]) -> tuple[str, int] | None:
    """A config that declares P-EAGLE, or an EAGLE-3 drafter config with `mask_hidden`
    among its tensors: claimed by name (strength 3, above EAGLE-3's)."""
    if is_peagle_config(config) or (MASK_HIDDEN in names and is_drafter_config(config, names)):
        return METHOD, 3
    return None


def inspect_fields(spec: PEagleSpec) -> dict[str, Any]:
    return {
        "num_hidden_layers": spec.num_hidden_layers,
        "mask_token_id": spec.mask_token_id,
        "mask_token_key": spec.token_key,
        "mask_hidden": list(spec.mask_hidden_shape) if spec.mask_hidden_shape else None,
        "aux_layers": list(spec.draft.aux_layers) if spec.draft.aux_layers else None,
        "num_speculative_tokens": spec.num_speculative_tokens,
    }


def inspect(ckpt: Checkpoint) -> MethodInspectResult:
    head = header(ckpt)
    return inspect_method(head, inspect_fields(head.spec))


def summary_lines(r: dict[str, Any]) -> list[str]:
    """inspect's few lines about a P-EAGLE drafter, for a person (cli/ prints them)."""
    d = r["spec"]["draft"]
    return [
        f"{r['source']}: P-EAGLE drafter, {r['format']} layout, {r['num_hidden_layers']} "
        f"layers, hidden {d['hidden_size']} (target {d['target_hidden_size']}), vocab "
        f"{d['draft_vocab_size']} of {d['vocab_size']}",
        f"  mask token {r['mask_token_id']} ({r['mask_token_key']}), mask_hidden "
        f"{r['mask_hidden'] or 'missing'}, aux layers {r['aux_layers']} (h-indices), K "
        f"{r['num_speculative_tokens'] or 'not recorded'}",
    ]
