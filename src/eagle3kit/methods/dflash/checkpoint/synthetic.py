"""Hand-made tiny DFlash drafters with random values (numpy, torch-free), in z-lab's and
speculators' layouts (docs/formats.md "DFlash drafters"): what the tests and the docs'
examples use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from eagle3kit.checkpoint.io.arrays import TINY_DRAFTER, random_arrays, save_arrays
from eagle3kit.core.atomic import atomic_write_json
from eagle3kit.methods.dflash.checkpoint.layout import speculators_config, zlab_config
from eagle3kit.methods.dflash.checkpoint.spec import DFlashSpec


def tiny_dflash_spec(layout: str = "zlab", **over: Any) -> DFlashSpec:
    """A 2-layer DFlash drafter for an 8-layer target, H 32, vocab 96, B 4, mask token 95."""
    f: dict[str, Any] = dict(
        **TINY_DRAFTER,
        num_hidden_layers=2,
        block_size=4,
        mask_token_id=95,
        target_layer_ids=(1, 5),
        num_target_layers=8,
        layer_causal=(False, False),
        dtype="float32",
        layout=layout,
    )
    f.update(over)
    return DFlashSpec(**f)


def write_dflash(
    out: str | Path,
    spec: DFlashSpec,
    seed: int = 0,
    verifier: str | None = None,
    omit: tuple[str, ...] = (),
) -> Path:
    """`out/config.json` + `out/model.safetensors` of `spec` in its layout; speculators' as
    `convert --to speculators --embed-from TARGET` writes it, with embed_tokens and lm_head
    (and d2t when the draft vocabulary is reduced). speculators' own trainer writes neither
    for a full vocabulary: tests/fixtures/peers holds files it wrote."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    want = set(spec.required_tensors())
    if spec.layout == "speculators":
        want |= {"embed_tokens.weight", "lm_head.weight"}
    shapes = {n: s for n, s in spec.expected_shapes().items() if n in want}
    arrays = random_arrays({n: s for n, s in shapes.items() if n not in omit and n != "d2t"}, seed)
    if "d2t" in shapes:
        arrays["d2t"] = np.zeros(spec.draft_vocab_size, dtype=np.int64)
    save_arrays(out / "model.safetensors", arrays)
    cfg = zlab_config(spec) if spec.layout == "zlab" else speculators_config(spec, verifier)
    atomic_write_json(out / "config.json", cfg)
    return out
