"""Hand-made tiny P-EAGLE drafters with random values (numpy, torch-free), in speculators'
`peagle` layout and vLLM's native one (docs/formats.md "P-EAGLE drafters")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.eagle3.layouts import canonical_to_file
from eagle3kit.checkpoint.io.arrays import TINY_DRAFTER, random_arrays, save_arrays
from eagle3kit.core.atomic import atomic_write_json
from eagle3kit.core.spec import DraftSpec
from eagle3kit.methods.peagle.checkpoint.spec import PEagleSpec
from eagle3kit.methods.peagle.checkpoint.write import peagle_config


def tiny_peagle_spec(layout: str = "speculators", layers: int = 2, **over: Any) -> PEagleSpec:
    """A P-EAGLE drafter (`layers` layers, K 4) of the same sizes, mask token 95."""
    draft = DraftSpec(**TINY_DRAFTER, aux_layers=(2, 4, 5), dtype="float32")
    f: dict[str, Any] = dict(
        draft=draft,
        num_hidden_layers=layers,
        mask_token_id=95,
        layout=layout,
        num_speculative_tokens=4,
    )
    f.update(over)
    return PEagleSpec(**f)


def write_peagle(
    out: str | Path, spec: PEagleSpec, seed: int = 0, omit: tuple[str, ...] = ()
) -> Path:
    """A P-EAGLE drafter in `spec.layout` (tensor names `layers.{i}.*` in both: vLLM loads
    speculators' names)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shapes = {n: s for n, s in spec.expected_shapes().items() if n in spec.required_tensors()}
    shapes["embed_tokens.weight"] = spec.draft.expected_shapes()["embed_tokens.weight"]
    arrays = random_arrays({n: s for n, s in shapes.items() if n not in omit}, seed)
    stored = {canonical_to_file(n, "vllm"): a for n, a in arrays.items()}
    save_arrays(out / "model.safetensors", stored)
    atomic_write_json(out / "config.json", peagle_config(spec))
    return out
