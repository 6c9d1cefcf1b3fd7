"""DFlash block drafters at the checkpoint layer (torch-free): the part core/registry.py's
generic verbs ask for.

    spec.py       DFlashSpec, the canonical description
    layout.py     z-lab's and speculators' configs <-> DFlashSpec
    read.py       the one reader (headers; tensors on call)
    compat.py     its serving rules per engine release (data: checkpoint/engines/methods.py)
    convert.py    z-lab <-> speculators, byte for byte
    write.py      the writer (training, warm starts)
    synthetic.py  tiny fixtures
"""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.engines.methods import dflash_release_captures
from eagle3kit.checkpoint.engines.windows import rows_for
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.checkpoint.methods import MethodInspectResult, inspect_method
from eagle3kit.methods.dflash.checkpoint.compat import engine_findings, target_findings
from eagle3kit.methods.dflash.checkpoint.convert import LAYOUTS, convert_to, launch_commands
from eagle3kit.methods.dflash.checkpoint.layout import is_dflash_config
from eagle3kit.methods.dflash.checkpoint.read import dflash_header as header
from eagle3kit.methods.dflash.checkpoint.read import variant_of
from eagle3kit.methods.dflash.checkpoint.spec import DFlashSpec

__all__ = [
    "ENGINE_RULES",
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


ENGINE_RULES = rows_for("dflash")  # which window each engine release runs (sliding windows)


def detect(config: dict[str, Any], names: set[str]) -> tuple[str, int] | None:
    """A DFlash-family config (dflash_config, a DFlash architecture, or speculators' type):
    the variant it is, claimed by name (strength 3)."""
    return (variant_of(config), 3) if is_dflash_config(config) else None


def inspect_fields(spec: DFlashSpec) -> dict[str, Any]:
    """inspect's DFlash fields: block, mask token, proposals, causality, the layer ids in
    each convention and what each engine release captures for them as written."""
    ids = spec.target_layer_ids if spec.layout == "zlab" else spec.speculators_ids
    return {
        "variant": spec.variant,
        "block_size": spec.block_size,
        "mask_token_id": spec.mask_token_id,
        "num_proposals": spec.num_proposals,
        "sample_from_anchor": spec.sample_from_anchor,
        "layer_causal": list(spec.causal),
        "target_layers": {
            "zlab": list(spec.target_layer_ids),  # layer outputs
            "speculators": list(spec.speculators_ids),  # h-indices
            "h": list(spec.aux_layers),
            "engines": dflash_release_captures(spec.layout, ids),
        },
    }


def inspect(ckpt: Checkpoint) -> MethodInspectResult:
    head = header(ckpt)
    return inspect_method(head, inspect_fields(head.spec))


def summary_lines(r: dict[str, Any]) -> list[str]:
    """inspect's few lines about a DFlash drafter, for a person (cli/ prints them)."""
    s, tl = r["spec"], r["target_layers"]
    out = [
        f"{r['source']}: DFlash drafter ({r['variant']}), {r['format']} layout, "
        f"{s['num_hidden_layers']} layers, hidden {s['hidden_size']}, vocab "
        f"{s['draft_vocab_size']} of {s['vocab_size']}",
        f"  block {r['block_size']} ({r['num_proposals']} proposals"
        f"{', sample_from_anchor' if r['sample_from_anchor'] else ''}), mask token "
        f"{r['mask_token_id']}, causal layers "
        f"{[i for i, c in enumerate(r['layer_causal']) if c] or 'none'}",
        f"  target layers: z-lab {tl['zlab']} (layer outputs) = speculators {tl['speculators']}"
        f" = h{tl['h']}",
    ]
    for release, cap in tl["engines"].items():
        ok = "not served" if cap is None else f"captures h{cap}"
        off = cap is not None and cap != tl["h"]
        out.append(f"    {release}: {ok}{' (one layer off)' if off else ''}")
    return out + [f"  note: {n}" for n in r.get("notes") or []]
