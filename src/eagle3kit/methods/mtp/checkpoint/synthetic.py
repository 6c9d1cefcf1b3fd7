"""Hand-made tiny targets carrying MTP heads, with random values (numpy, torch-free):
DeepSeek-V3 style (`model.layers.L.*`) and Qwen3-Next style (`mtp.*`), as docs/formats.md
"MTP heads" describes them."""

from __future__ import annotations

from pathlib import Path

from eagle3kit.checkpoint.io.arrays import random_arrays, save_arrays
from eagle3kit.core.atomic import atomic_write_json

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
        arrays = random_arrays(shapes, seed + i)
        save_arrays(out / fname, arrays)
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
