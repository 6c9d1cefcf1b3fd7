"""Hand-made tiny checkpoints of the newer methods, with random values (numpy, torch-free):
DFlash drafters (z-lab, speculators), P-EAGLE drafters (speculators, vLLM native), and
targets carrying MTP heads (DeepSeek-V3 style, Qwen3-Next style). Tests and the docs'
examples use them; their configs follow the upstream layouts in docs/formats.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from eagle3kit.checkpoint.dflash_layout import speculators_config, zlab_config
from eagle3kit.checkpoint.eagle3.layouts import canonical_to_file
from eagle3kit.checkpoint.method_writers import peagle_config
from eagle3kit.core.atomic import atomic_write_json, atomic_write_with
from eagle3kit.core.method_spec import DFlashSpec, PEagleSpec
from eagle3kit.core.spec import DraftSpec


def _save(path: Path, arrays: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    atomic_write_with(path, lambda tmp: save_file(arrays, tmp, {"format": "pt"}))


def _random(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in sorted(shapes.items())}


# the tiny DFlash and P-EAGLE drafters' sizes: H 32, 4 heads of 8 (2 KV), vocab 96
_TINY_DRAFTER: dict[str, Any] = dict(
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    vocab_size=96,
    draft_vocab_size=96,
    target_hidden_size=32,
)


def tiny_dflash_spec(layout: str = "zlab", **over: Any) -> DFlashSpec:
    """A 2-layer DFlash drafter for an 8-layer target, H 32, vocab 96, B 4, mask token 95."""
    f: dict[str, Any] = dict(
        **_TINY_DRAFTER,
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
    """`out/config.json` + `out/model.safetensors` of `spec` in its layout; speculators' carries
    embed_tokens and lm_head (and d2t/t2d when the draft vocabulary is reduced)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shapes = {n: s for n, s in spec.expected_shapes().items() if n in spec.required_tensors()}
    arrays = _random({n: s for n, s in shapes.items() if n not in omit and n != "d2t"}, seed)
    if "d2t" in shapes:
        arrays["d2t"] = np.zeros(spec.draft_vocab_size, dtype=np.int64)
    _save(out / "model.safetensors", arrays)
    cfg = zlab_config(spec) if spec.layout == "zlab" else speculators_config(spec, verifier)
    atomic_write_json(out / "config.json", cfg)
    return out


def tiny_peagle_spec(layout: str = "speculators", layers: int = 2, **over: Any) -> PEagleSpec:
    """A P-EAGLE drafter (`layers` layers, K 4) of the same sizes, mask token 95."""
    draft = DraftSpec(**_TINY_DRAFTER, aux_layers=(2, 4, 5), dtype="float32")
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
    arrays = _random({n: s for n, s in shapes.items() if n not in omit}, seed)
    stored = {canonical_to_file(n, "vllm"): a for n, a in arrays.items()}
    _save(out / "model.safetensors", stored)
    atomic_write_json(out / "config.json", peagle_config(spec))
    return out


_BLOCK = {  # a tiny decoder block's tensors (names after the layer prefix) for H 16
    "input_layernorm.weight": (16,),
    "post_attention_layernorm.weight": (16,),
    "self_attn.q_proj.weight": (16, 16),
    "self_attn.k_proj.weight": (8, 16),
    "self_attn.v_proj.weight": (8, 16),
    "self_attn.o_proj.weight": (16, 16),
    "mlp.gate_proj.weight": (32, 16),
    "mlp.up_proj.weight": (32, 16),
    "mlp.down_proj.weight": (16, 32),
}


def _write_shards(out: Path, shards: dict[str, dict[str, tuple[int, ...]]], seed: int) -> None:
    wmap: dict[str, str] = {}
    total = 0
    for i, (fname, shapes) in enumerate(shards.items()):
        arrays = _random(shapes, seed + i)
        _save(out / fname, arrays)
        wmap.update({n: fname for n in arrays})
        total += sum(a.nbytes for a in arrays.values())
    if len(shards) > 1:
        atomic_write_json(
            out / "model.safetensors.index.json",
            {"metadata": {"total_size": total}, "weight_map": wmap},
        )


# the two MTP targets' sizes (H 16, 2 layers, vocab 64, one MTP layer), after their model type
_MTP_TARGET = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "vocab_size": 64,
    "num_nextn_predict_layers": 1,
    "torch_dtype": "float32",
}


def write_deepseek_mtp_target(out: str | Path, seed: int = 0) -> Path:
    """A 2-layer DeepSeek-V3-style target (H 16, vocab 64) with one MTP layer at
    model.layers.2 (num_nextn_predict_layers 1), in 3 shards: the MTP layer is split between
    a shard it shares with layer 1 and a shard of its own."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    layer = lambda i: {f"model.layers.{i}.{k}": s for k, s in _BLOCK.items()}  # noqa: E731
    mtp = {f"model.layers.2.{k}": s for k, s in _BLOCK.items()}
    mtp.update(
        {
            "model.layers.2.enorm.weight": (16,),
            "model.layers.2.hnorm.weight": (16,),
            "model.layers.2.eh_proj.weight": (16, 32),
            "model.layers.2.shared_head.norm.weight": (16,),
            "model.layers.2.shared_head.head.weight": (64, 16),
            "model.layers.2.embed_tokens.weight": (64, 16),
        }
    )
    mixed = dict(sorted(mtp.items())[:6])
    own = {k: v for k, v in mtp.items() if k not in mixed}
    shards = {
        "model-00001-of-00003.safetensors": {"model.embed_tokens.weight": (64, 16), **layer(0)},
        "model-00002-of-00003.safetensors": {
            **layer(1),
            "model.norm.weight": (16,),
            "lm_head.weight": (64, 16),
            **mixed,
        },
        "model-00003-of-00003.safetensors": own,
    }
    _write_shards(out, shards, seed)
    atomic_write_json(
        out / "config.json",
        {
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            **_MTP_TARGET,
        },
    )
    return out


def write_qwen3_next_mtp_target(out: str | Path, seed: int = 0, text_config: bool = False) -> Path:
    """A 2-layer Qwen3-Next-style target (H 16, vocab 64) with `mtp.*` (one MTP layer), one
    file; `text_config=True` nests the config as multimodal wrappers do (Qwen3.5)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shapes = {
        "model.embed_tokens.weight": (64, 16),
        "model.norm.weight": (16,),
        "lm_head.weight": (64, 16),
    }
    for i in range(2):
        shapes.update({f"model.layers.{i}.{k}": s for k, s in _BLOCK.items()})
    shapes.update({f"mtp.layers.0.{k}": s for k, s in _BLOCK.items()})
    shapes.update(
        {
            "mtp.fc.weight": (16, 32),
            "mtp.pre_fc_norm_embedding.weight": (16,),
            "mtp.pre_fc_norm_hidden.weight": (16,),
            "mtp.norm.weight": (16,),
        }
    )
    _write_shards(out, {"model.safetensors": shapes}, seed)
    text = {"model_type": "qwen3_next", **_MTP_TARGET}
    if text_config:
        text = {**text, "model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1}
        text.pop("num_nextn_predict_layers")
        cfg = {
            "architectures": ["Qwen3_5ForConditionalGeneration"],
            "model_type": "qwen3_5",
            "text_config": text,
        }
    else:
        cfg = {"architectures": ["Qwen3NextForCausalLM"], **text}
    atomic_write_json(out / "config.json", cfg)
    return out
