"""Synthetic drafter checkpoints with real headers and sparse (all-zero) weights.

A Kimi-K2-shaped drafter is 2.2 GB; written sparse it costs a few KB of disk and a few
milliseconds, yet its headers, byte spans and index tensors (d2t, t2d) are exactly those of a
real checkpoint. The demo and the tests use these to exercise `inspect` and `compat` at full
scale without downloading anything.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from eagle3kit.formats.layouts import canonical_to_file, config_for
from eagle3kit.formats.safetensors_io import DTYPE_SIZES, write_json
from eagle3kit.spec import DraftSpec

_WEIGHT_DTYPE = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}


def default_vocab_map(spec: DraftSpec) -> tuple[np.ndarray, np.ndarray]:
    """A valid d2t/t2d pair: the draft vocab is every (V // Vd)-th target id."""
    step = max(1, spec.vocab_size // spec.draft_vocab_size)
    used = np.arange(spec.draft_vocab_size, dtype=np.int64) * step  # sorted target ids
    d2t = used - np.arange(spec.draft_vocab_size, dtype=np.int64)
    t2d = np.zeros(spec.vocab_size, dtype=np.bool_)
    t2d[used] = True
    return d2t, t2d


def write_sparse_drafter(
    out: str | Path,
    spec: DraftSpec,
    layout: str = "sglang",
    *,
    omit: tuple[str, ...] = ("embed_tokens.weight",),
    d2t: np.ndarray | None = None,
    t2d: np.ndarray | None = None,
    config_overrides: dict[str, Any] | None = None,
    shape_overrides: dict[str, tuple[int, ...]] | None = None,
    extra_tensors: dict[str, tuple[int, ...]] | None = None,
) -> Path:
    """Write `out/config.json` + `out/model.safetensors` for `spec` in `layout`.

    Weights are zeros (a sparse file); d2t/t2d hold real mappings. `config_overrides` set or
    (with value None) delete top-level config keys; `shape_overrides` and `extra_tensors` make
    deliberately broken checkpoints for tests."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = config_for(spec, layout)
    for k, v in (config_overrides or {}).items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    if d2t is None or t2d is None:
        dd, tt = default_vocab_map(spec)
        d2t = dd if d2t is None else d2t
        t2d = tt if t2d is None else t2d
    wdt = _WEIGHT_DTYPE.get(spec.dtype, "BF16")
    shapes = {n: s for n, s in spec.expected_shapes().items() if n not in omit}
    shapes.update(shape_overrides or {})
    shapes.update(extra_tensors or {})
    small = {
        "d2t": np.ascontiguousarray(d2t, dtype=np.int64),
        "t2d": np.ascontiguousarray(t2d, dtype=np.bool_),
    }
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs: list[tuple[int, bytes]] = []
    offset = 0
    for name in sorted(shapes, key=lambda n: (n not in small, n)):  # index tensors first
        if name in small:
            arr = small[name]
            dtype, shape, raw = ("I64" if name == "d2t" else "BOOL"), list(arr.shape), arr.tobytes()
        else:
            dtype, shape, raw = wdt, list(shapes[name]), None
        size = math.prod(shape) * DTYPE_SIZES[dtype]
        header[canonical_to_file(name, layout)] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [offset, offset + size],
        }
        if raw is not None:
            blobs.append((offset, raw))
        offset += size
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    path = out / "model.safetensors"
    with open(path, "wb") as f:
        f.write(len(hjson).to_bytes(8, "little"))
        f.write(hjson)
        base = 8 + len(hjson)
        for off, raw in blobs:
            f.seek(base + off)
            f.write(raw)
        f.truncate(base + offset)
    write_json(out / "config.json", cfg)
    return out


def kimi_k2_spec(max_position_embeddings: int = 131072) -> DraftSpec:
    """The AQ-MedAI Kimi-K2 EAGLE-3 drafter's shapes (FORMATS.md): H=7168, 64x128 heads,
    I=18432, V=163840, Vd=32000, aux layers [2, 30, 58] of a 61-layer target."""
    return DraftSpec(
        hidden_size=7168,
        intermediate_size=18432,
        num_attention_heads=64,
        num_key_value_heads=64,
        head_dim=128,
        vocab_size=163840,
        draft_vocab_size=32000,
        target_hidden_size=7168,
        rms_norm_eps=1e-5,
        rope_theta=50000.0,
        max_position_embeddings=max_position_embeddings,
        aux_layers=(2, 30, 58),
        dtype="bfloat16",
    )
