"""Synthetic drafter checkpoints with real headers and sparse (all-zero) weights.

A Kimi-K2-shaped drafter is 2.2 GB; written sparse it costs a few KB of disk and a few
milliseconds, yet its headers, byte spans and index tensors (d2t, t2d) are exactly those of a
real checkpoint. The demo and the tests use these to exercise `inspect` and `compat` at full
scale without downloading anything.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from eagle3kit.checkpoint.eagle3.layouts import MLA_ARCH, canonical_to_file, config_for
from eagle3kit.checkpoint.io.safetensors_io import DTYPE_SIZES
from eagle3kit.checkpoint.io.safetensors_write import write_with_holes
from eagle3kit.core.atomic import atomic_write_json
from eagle3kit.core.dtypes import NAME_TO_SAFETENSORS
from eagle3kit.core.spec import DraftSpec

_WEIGHT_DTYPE = NAME_TO_SAFETENSORS


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

    Weights are zeros (a sparse file); d2t/t2d hold real mappings. The file is laid out as
    eagle3kit's own writer lays it out (convert.save_drafter: tensors in name order, metadata
    `eagle3kit_layout`), so a converted copy can be compared byte for byte. `config_overrides`
    set or (with value None) delete top-level config keys; `shape_overrides` and
    `extra_tensors` make deliberately broken checkpoints for tests."""
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
    header: dict[str, Any] = {"__metadata__": {"format": "pt", "eagle3kit_layout": layout}}
    blobs: list[tuple[int, bytes]] = []
    offset = 0
    for name in sorted(shapes, key=lambda n: canonical_to_file(n, layout)):  # as save_drafter
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
    write_with_holes(out / "model.safetensors", header, offset, blobs)
    atomic_write_json(out / "config.json", cfg)
    return out


def kimi_k2_spec(max_position_embeddings: int = 131072) -> DraftSpec:
    """The AQ-MedAI Kimi-K2 EAGLE-3 drafter's shapes (docs/formats.md "Drafter layouts"):
    H=7168, 64x128 heads,
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


# Kimi-K2.5 (moonshotai/Kimi-K2.5 text_config; DeepSeek-V3 architecture): 61 layers, H 7168,
# 64 heads, MLA q_lora 1536 / kv_lora 512 / nope 128 / rope 64 / v 128, yarn x64 over 4096.
KIMI_K25_YARN = {
    "type": "yarn",
    "factor": 64.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 1.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}
_KIMI_MLA = dict(
    q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128
)


def kimi_k25_mla_spec() -> DraftSpec:
    """lightseekorg/kimi-k2.5-eagle3-mla's shapes (docs/formats.md "MLA drafters"): one MLA layer
    in Kimi-K2.5's own dims, H 7168, MLP 18432, the full 163840 draft vocab, fc [7168, 21504];
    TorchSpec's native ids [1, 29, 57] (layer outputs) = h[2, 30, 58]."""
    return DraftSpec(
        hidden_size=7168,
        intermediate_size=18432,
        num_attention_heads=64,
        num_key_value_heads=64,
        head_dim=192,
        vocab_size=163840,
        draft_vocab_size=163840,
        target_hidden_size=7168,
        rms_norm_eps=1e-6,
        rope_theta=50000.0,
        rope_scaling=dict(KIMI_K25_YARN),
        max_position_embeddings=262144,
        aux_layers=(2, 30, 58),
        dtype="bfloat16",
        architecture=MLA_ARCH,
        attention="mla",
        model_type="kimi_k2",
        **_KIMI_MLA,
    )


def kimi_k25_target_config() -> dict[str, Any]:
    """The Kimi-K2.5 target's config.json, as far as eagle3kit reads it (text_config nested in
    the multimodal wrapper, as the Hub's file has it)."""
    text = dict(
        architectures=["DeepseekV3ForCausalLM"],
        model_type="kimi_k2",
        hidden_size=7168,
        intermediate_size=18432,
        moe_intermediate_size=2048,
        num_hidden_layers=61,
        num_attention_heads=64,
        num_key_value_heads=64,
        n_routed_experts=384,
        n_shared_experts=1,
        num_experts_per_tok=8,
        first_k_dense_replace=1,
        vocab_size=163840,
        rms_norm_eps=1e-6,
        rope_theta=50000.0,
        rope_scaling=dict(KIMI_K25_YARN),
        max_position_embeddings=262144,
        torch_dtype="bfloat16",
        tie_word_embeddings=False,
        **_KIMI_MLA,
    )
    return {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "text_config": text,
        "torch_dtype": "bfloat16",
    }


def write_target_config(out: str | Path, config: dict[str, Any]) -> Path:
    """A target directory holding only config.json (enough for inspect, compat and plan)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "config.json", config)
    return out
