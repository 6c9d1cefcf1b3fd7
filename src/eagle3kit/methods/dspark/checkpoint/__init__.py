"""DSpark drafters at the checkpoint layer (torch-free): the part core/registry.py's generic
verbs ask for.

    spec.py       DSparkSpec: a DFlash backbone and the Markov and confidence heads
    read.py       the one reader (speculators' `dspark`, SpecForge's `DSparkDraftModel`)
    compat.py     its serving rules per engine release (`ENGINE_RULES`, with their sources)
    convert.py    speculators <-> SpecForge, byte for byte
    write.py      the configs and the writer
    synthetic.py  tiny fixtures
"""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.checkpoint.methods import MethodInspectResult, inspect_method
from eagle3kit.methods.dspark.checkpoint.compat import (
    ENGINE_RULES,
    engine_findings,
    target_findings,
)
from eagle3kit.methods.dspark.checkpoint.convert import LAYOUTS, convert_to, launch_commands
from eagle3kit.methods.dspark.checkpoint.read import METHOD, is_dspark_config
from eagle3kit.methods.dspark.checkpoint.read import dspark_header as header
from eagle3kit.methods.dspark.checkpoint.spec import DSparkSpec

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


def detect(config: dict[str, Any], names: set[str]) -> tuple[str, int] | None:
    """A DSpark config: claimed above DFlash's claim on its family (strength 4 > 3)."""
    return (METHOD, 4) if is_dspark_config(config) else None


def inspect_fields(spec: DSparkSpec) -> dict[str, Any]:
    """inspect's DSpark fields: the block, the heads, causality, the layer ids."""
    return {
        "variant": METHOD,
        "block_size": spec.block_size,
        "mask_token_id": spec.mask_token_id,
        "num_proposals": spec.num_proposals,
        "sample_from_anchor": spec.sample_from_anchor,
        "layer_causal": list(spec.causal),
        "markov_rank": spec.markov_rank,
        "markov_head_type": spec.markov_head_type,
        "confidence_head": spec.enable_confidence_head,
        "confidence_head_with_markov": spec.confidence_head_with_markov,
        "target_layers": {
            "zlab": list(spec.target_layer_ids),
            "speculators": list(spec.speculators_ids),
            "h": list(spec.aux_layers),
        },
    }


def inspect(ckpt: Checkpoint) -> MethodInspectResult:
    head = header(ckpt)
    return inspect_method(head, inspect_fields(head.spec))


def summary_lines(r: dict[str, Any]) -> list[str]:
    """inspect's few lines about a DSpark drafter, for a person (cli/ prints them)."""
    b, tl = r["spec"]["backbone"], r["target_layers"]
    conf = "confidence head" + (" over [h; e]" if r["confidence_head_with_markov"] else "")
    return [
        f"{r['source']}: DSpark drafter, {r['format']} layout, {b['num_hidden_layers']} layers, "
        f"hidden {b['hidden_size']}, vocab {b['draft_vocab_size']} of {b['vocab_size']}",
        f"  block {r['block_size']} ({r['num_proposals']} proposals"
        f"{', sample_from_anchor' if r['sample_from_anchor'] else ''}), mask token "
        f"{r['mask_token_id']}, Markov head {r['markov_head_type']} rank {r['markov_rank']}"
        f"{', ' + conf if r['confidence_head'] else ''}, causal layers "
        f"{[i for i, c in enumerate(r['layer_causal']) if c] or 'none'}",
        f"  target layers: z-lab {tl['zlab']} (layer outputs) = speculators {tl['speculators']}"
        f" = h{tl['h']}",
    ]
