"""Tiny checkpoints of random numpy arrays (torch-free), as the synthetic fixtures of every
method write them, and the sizes the tiny drafters share (so a DFlash and a P-EAGLE fixture
fit the same tiny target)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from eagle3kit.core.atomic import atomic_write_with


def save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    atomic_write_with(path, lambda tmp: save_file(arrays, tmp, {"format": "pt"}))


def random_arrays(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in sorted(shapes.items())}


# the tiny DFlash and P-EAGLE drafters' sizes: H 32, 4 heads of 8 (2 KV), vocab 96
TINY_DRAFTER: dict[str, Any] = dict(
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    vocab_size=96,
    draft_vocab_size=96,
    target_hidden_size=32,
)
