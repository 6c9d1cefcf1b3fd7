"""Hand-made tiny DSpark drafters with random values (numpy, torch-free), in speculators' and
SpecForge's layouts: for the variants no peer writes (SpecForge's layout, the heads' kinds);
tests/fixtures/peers holds files speculators' own code wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from eagle3kit.checkpoint.io.arrays import random_arrays, save_arrays
from eagle3kit.core.atomic import atomic_write_json
from eagle3kit.methods.dflash.checkpoint.synthetic import tiny_dflash_spec
from eagle3kit.methods.dspark.checkpoint.spec import DSparkSpec
from eagle3kit.methods.dspark.checkpoint.write import dspark_config


def tiny_dspark_spec(layout: str = "speculators", backbone: dict | None = None, **over: Any):
    """A 2-layer DSpark drafter for an 8-layer target (DFlash's tiny shapes: H 32, vocab 96,
    B 4, mask token 95), Markov rank 8, a confidence head over [h; e]."""
    b = tiny_dflash_spec("speculators" if layout == "speculators" else "zlab", **(backbone or {}))
    f: dict[str, Any] = dict(backbone=b.replace(variant="dspark"), markov_rank=8, layout=layout)
    f.update(over)
    return DSparkSpec(**f)


def write_dspark(
    out: str | Path, spec: DSparkSpec, seed: int = 0, omit: tuple[str, ...] = ()
) -> Path:
    """`out/config.json` + `out/model.safetensors` of `spec` in its layout: what its own
    trainer saves (no embed_tokens; lm_head and d2t only with a reduced vocabulary)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    want = set(spec.required_tensors())
    shapes = {n: s for n, s in spec.expected_shapes().items() if n in want and n not in omit}
    arrays = random_arrays({n: s for n, s in shapes.items() if n != "d2t"}, seed)
    if "d2t" in shapes:  # draft id j -> target id 2j (a vocabulary of every other token)
        arrays["d2t"] = np.arange(spec.draft_vocab_size, dtype=np.int64)
    save_arrays(out / "model.safetensors", arrays)
    atomic_write_json(out / "config.json", dspark_config(spec))
    return out
