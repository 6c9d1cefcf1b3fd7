"""`eagle3kit inspect` for DFlash and P-EAGLE drafters, and the MTP heads of a target.

The JSON document has the EAGLE-3 drafter's keys (`role`, `source`, `format`, `spec`,
`tensors`, `missing`, `unexpected`, `shape_mismatches`) plus `method` and the method's own
fields: DFlash `block_size`, `mask_token_id`, `num_proposals`, `sample_from_anchor`,
`layer_causal` and `target_layers` in each convention; P-EAGLE `num_hidden_layers`,
`mask_token_id` (and the key that held it), `mask_hidden`, `aux_layers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eagle3kit.checkpoint.engines.methods import dflash_release_captures
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.checkpoint.methods import MethodHeader
from eagle3kit.checkpoint.mtp_layout import MtpHead, find_mtp_heads, mtp_count
from eagle3kit.core.artifacts import stamp
from eagle3kit.core.method_spec import DFlashSpec, PEagleSpec


@dataclass
class MethodInspectResult:
    """inspect's answer for a DFlash or P-EAGLE drafter (`to_json()` is `inspect --json`)."""

    head: MethodHeader
    tensors: list[dict[str, Any]]
    missing: list[str]
    unexpected: list[str]
    shape_mismatches: list[dict[str, Any]]
    fields: dict[str, Any] = field(default_factory=dict)

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


def dflash_fields(spec: DFlashSpec) -> dict[str, Any]:
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
            # what each engine release captures for the ids as this file writes them
            "engines": dflash_release_captures(
                spec.layout,
                spec.target_layer_ids if spec.layout == "zlab" else spec.speculators_ids,
            ),
        },
    }


def peagle_fields(spec: PEagleSpec) -> dict[str, Any]:
    return {
        "num_hidden_layers": spec.num_hidden_layers,
        "mask_token_id": spec.mask_token_id,
        "mask_token_key": spec.token_key,
        "mask_hidden": list(spec.mask_hidden_shape) if spec.mask_hidden_shape else None,
        "aux_layers": list(spec.draft.aux_layers) if spec.draft.aux_layers else None,
        "num_speculative_tokens": spec.num_speculative_tokens,
    }


def inspect_method(head: MethodHeader) -> MethodInspectResult:
    """Tensors with canonical names, missing/unexpected/mismatched against the spec."""
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
        same_values = (
            canon == "mask_hidden" and want and t.numel == spec.expected_shapes()["mask_hidden"][-1]
        )
        if want is not None and tuple(t.shape) != want and not same_values:
            bad_shapes.append({"name": t.name, "expected": list(want), "found": list(t.shape)})
    fields = dflash_fields(spec) if isinstance(spec, DFlashSpec) else peagle_fields(spec)
    return MethodInspectResult(
        head,
        rows,
        missing=[n for n in spec.required_tensors() if n not in head.names],
        unexpected=[head.names[n] for n in sorted(head.names) if n not in expected],
        shape_mismatches=bad_shapes,
        fields=fields,
    )


def mtp_summary(ckpt: Checkpoint) -> dict[str, Any] | None:
    """The target's MTP heads (None when it declares and carries none)."""
    heads: list[MtpHead] = find_mtp_heads(ckpt)
    declared = mtp_count(ckpt.config)
    if not heads and not declared:
        return None
    return {
        "declared": declared,
        "heads": [h.to_json() for h in heads],
        "missing": max(0, declared - len(heads)),
    }
