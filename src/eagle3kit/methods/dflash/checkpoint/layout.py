"""DFlash drafter configs <-> DFlashSpec, in z-lab's and speculators' layouts (torch-free).

docs/formats.md "DFlash drafters" has both layouts with their upstream sources:
- "zlab": z-lab/dflash `DFlashDraftModel`: a Qwen3 config plus `dflash_config.{mask_token_id,
  target_layer_ids}` and `block_size` (top-level in Qwen3/LLaMA checkpoints, inside
  `dflash_config` in Qwen3.5+ ones); no embedding or lm_head (the target's are used).
- "speculators": vllm-project/speculators `speculators_model_type: "dflash"`: the Qwen3 layer
  config nested in `transformer_layer_config`, `aux_hidden_state_layer_ids` (= z-lab ids + 1),
  `mask_token_id`, `block_size`, `draft_vocab_size`, `sliding_window_non_causal`,
  `sample_from_anchor`; speculators 0.9.0 saves no `embed_tokens`, and `lm_head` with d2t/t2d
  only for a reduced draft vocabulary (models/dflash/core.py `_keys_to_ignore_on_save`).
"""

from __future__ import annotations

import copy
from typing import Any

from eagle3kit.checkpoint.io.fields import config_value as _get
from eagle3kit.core.errors import bad
from eagle3kit.core.spec import rope_from_config
from eagle3kit.methods.dflash.checkpoint.spec import DFlashSpec

DFLASH_LAYOUTS = ("zlab", "speculators")
ZLAB_ARCH = "DFlashDraftModel"
SPECULATORS_ARCH = "DFlashSpeculator"
# speculators' converter: config keys that are not the Qwen3 layer's (convert/dflash/converter.py)
_ZLAB_NON_LAYER_KEYS = ("architectures", "auto_map", "block_size", "dflash_config")
_SLIDING = "sliding_attention"


def is_dflash_config(config: dict[str, Any]) -> bool:
    archs = [a for a in (config.get("architectures") or []) if isinstance(a, str)]
    return (
        config.get("speculators_model_type") in ("dflash", "dflash2", "dspark")
        or isinstance(config.get("dflash_config"), dict)
        or any("DFlash" in a or "DSpark" in a for a in archs)
    )


def dflash_layout(config: dict[str, Any]) -> str:
    return "speculators" if config.get("speculators_model_type") else "zlab"


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> tuple[int, ...]:
    """z-lab's (and SGLang's build_target_layer_ids') default ids: evenly from layer 1 to L-3,
    or L//2 for a one-layer drafter; z-lab convention (layer outputs)."""
    if num_draft_layers == 1:
        return (num_target_layers // 2,)
    start, end = 1, num_target_layers - 3
    span = end - start
    return tuple(
        int(round(start + i * span / (num_draft_layers - 1))) for i in range(num_draft_layers)
    )


def _ids(v: Any, where: str, key: str) -> tuple[int, ...]:
    ok = (
        isinstance(v, list) and v and all(isinstance(i, int) and not isinstance(i, bool) for i in v)
    )
    if not ok or min(v) < 0:
        raise bad(where, f"{key}: expected a non-empty list of layer ids >= 0, found {v!r}")
    return tuple(v)


def _token(v: Any, where: str, key: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise bad(where, f"{key}: expected a token id (int >= 0), found {v!r}")
    return v


def _causal_zlab(layer: dict[str, Any], dfc: dict[str, Any], n: int) -> tuple[bool, ...]:
    """The reference's per-layer causality (z-lab Qwen3DFlashAttention; vLLM 0.33
    `_dflash_layer_causal` adds `dflash_config.causal` between the two)."""
    if layer.get("is_causal") is not None:
        return (bool(layer["is_causal"]),) * n
    if dfc.get("causal") is not None:
        return (bool(dfc["causal"]),) * n
    types = layer.get("layer_types") or [None] * n
    return tuple(t == _SLIDING for t in types[:n])


def _causal_speculators(layer: dict[str, Any], cfg: dict[str, Any], n: int) -> tuple[bool, ...]:
    """speculators trains sliding layers causal unless `sliding_window_non_causal`; full
    layers are always bidirectional (models/dflash/config.py field doc)."""
    non_causal = bool(cfg.get("sliding_window_non_causal", False))
    types = layer.get("layer_types") or [None] * n
    return tuple(t == _SLIDING and not non_causal for t in types[:n])


def _variant(cfg: dict[str, Any], dfc: dict[str, Any], archs: list[str]) -> str:
    proj = dfc.get("projector_type") or cfg.get("projector_type")
    if proj in ("dspark", "domino"):
        return str(proj)
    if cfg.get("speculators_model_type") in ("dflash2", "dspark"):
        return str(cfg["speculators_model_type"])
    if any("DFlash2" in a for a in archs):
        return "dflash2"
    return "dflash"


def _layer_fields(layer: dict[str, Any], lwhere: str) -> dict[str, Any]:
    hidden = _get(layer, "hidden_size", lwhere, int)
    heads = _get(layer, "num_attention_heads", lwhere, int)
    theta, scaling = rope_from_config(layer)
    types = layer.get("layer_types")
    return dict(
        hidden_size=hidden,
        intermediate_size=_get(layer, "intermediate_size", lwhere, int),
        num_hidden_layers=_get(layer, "num_hidden_layers", lwhere, int),
        num_attention_heads=heads,
        num_key_value_heads=_get(layer, "num_key_value_heads", lwhere, int, heads),
        head_dim=_get(layer, "head_dim", lwhere, int, hidden // heads),
        vocab_size=_get(layer, "vocab_size", lwhere, int),
        rms_norm_eps=float(_get(layer, "rms_norm_eps", lwhere, (int, float), 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
        max_position_embeddings=_get(layer, "max_position_embeddings", lwhere, int, 40960),
        hidden_act=str(layer.get("hidden_act", "silu")),
        attention_bias=bool(layer.get("attention_bias", False)),
        layer_types=tuple(types) if isinstance(types, list) else None,
        sliding_window=layer.get("sliding_window") if isinstance(types, list) else None,
        dtype=str(layer.get("torch_dtype") or layer.get("dtype") or "bfloat16").replace(
            "torch.", ""
        ),
    )


def _zlab_fields(cfg: dict[str, Any], where: str, n_layers: int) -> dict[str, Any]:
    dfc = cfg.get("dflash_config")
    if not isinstance(dfc, dict):
        raise bad(where, f"dflash_config: expected an object (z-lab layout), found {dfc!r}")
    block = dfc.get("block_size", cfg.get("block_size"))
    if block is None:
        raise bad(where, "block_size: missing (looked top-level and in dflash_config)")
    n_target = dfc.get("num_target_layers", cfg.get("num_target_layers"))
    ids = dfc.get("target_layer_ids")
    if ids is None:
        if not isinstance(n_target, int):
            raise bad(where, "dflash_config.target_layer_ids: missing (and no num_target_layers)")
        ids_t = default_target_layer_ids(n_target, n_layers)
    else:
        ids_t = _ids(ids, where, "dflash_config.target_layer_ids")
    return dict(
        block_size=_get({"block_size": block}, "block_size", where, int),
        mask_token_id=_token(dfc.get("mask_token_id"), where, "dflash_config.mask_token_id"),
        target_layer_ids=ids_t,
        num_target_layers=n_target if isinstance(n_target, int) else None,
        sample_from_anchor=bool(dfc.get("sample_from_anchor", False)),
        layer_causal=_causal_zlab(cfg, dfc, n_layers),
        input_embedding_scale=float(
            _get(dfc, "input_embedding_scale", f"{where}: dflash_config", (int, float), 1.0)
        ),
    )


def _zlab_window(
    cfg: dict[str, Any], dfc: dict[str, Any], types: tuple[str, ...] | None, n: int
) -> dict[str, Any]:
    """Sliding layers and their window as vLLM 0.33 reads a z-lab config (qwen3_dflash.py
    `_resolve_layer_attention`): `dflash_config.use_swa` makes every layer sliding when
    layer_types names none; the window is `dflash_config.swa_window_size`, else
    `sliding_window`."""
    any_sliding = types is not None and _SLIDING in types
    if bool(dfc.get("use_swa", False)) and not any_sliding:
        types = (_SLIDING,) * n
    if types is None or _SLIDING not in types:
        return {"layer_types": types, "sliding_window": None}
    w = dfc.get("swa_window_size", cfg.get("sliding_window"))
    if not isinstance(w, int) or isinstance(w, bool) or w < 1:
        raise bad(
            "config.json", f"sliding_window: expected an int >= 1 (sliding layers), found {w!r}"
        )
    return {"layer_types": types, "sliding_window": w}


def _speculators_fields(cfg: dict[str, Any], layer: dict[str, Any], where: str) -> dict[str, Any]:
    key = "aux_hidden_state_layer_ids"
    aux = _ids(cfg.get(key), where, key)
    if min(aux) < 1:
        raise bad(where, f"{key}: expected h-indices >= 1 (z-lab id + 1), found {list(aux)}")
    verifier = ((cfg.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
    n = _get(layer, "num_hidden_layers", f"{where}: transformer_layer_config", int)
    return dict(
        block_size=_get(cfg, "block_size", where, int, 8),
        mask_token_id=_token(cfg.get("mask_token_id"), where, "mask_token_id"),
        target_layer_ids=tuple(a - 1 for a in aux),
        sample_from_anchor=bool(cfg.get("sample_from_anchor", False)),
        layer_causal=_causal_speculators(layer, cfg, n),
        verifier=verifier if isinstance(verifier, str) else None,
    )


def read_dflash_config(config: dict[str, Any], where: str, names: set[str]) -> DFlashSpec:
    """DFlashSpec from a drafter's config.json (either layout); `names` are the canonical tensor
    names present (they settle the draft vocabulary when lm_head is there)."""
    layout = dflash_layout(config)
    archs = [a for a in (config.get("architectures") or []) if isinstance(a, str)]
    if layout == "speculators":
        layer = config.get("transformer_layer_config")
        if not isinstance(layer, dict):
            raise bad(where, f"transformer_layer_config: expected an object, found {layer!r}")
        f = _layer_fields(layer, f"{where}: transformer_layer_config")
        f.update(_speculators_fields(config, layer, where))
        dfc: dict[str, Any] = {}
    else:
        f = _layer_fields(config, where)
        f.update(_zlab_fields(config, where, f["num_hidden_layers"]))
        dfc = config["dflash_config"]
        f.update(_zlab_window(config, dfc, f["layer_types"], f["num_hidden_layers"]))
    draft_vocab = _get(config, "draft_vocab_size", where, int, f["vocab_size"])
    f.update(
        draft_vocab_size=draft_vocab,
        target_hidden_size=_get(config, "target_hidden_size", where, int, f["hidden_size"]),
        layout=layout,
        variant=_variant(config, dfc, archs),
        architecture=archs[0] if archs else ZLAB_ARCH,
        tensors=tuple(sorted(names)),
    )
    return DFlashSpec(**f)


def _layer_config(spec: DFlashSpec) -> dict[str, Any]:
    """The Qwen3 decoder config of the draft layers (both layouts carry it)."""
    cfg: dict[str, Any] = {
        "model_type": "qwen3",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "vocab_size": spec.vocab_size,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_theta": spec.rope_theta,
        "rope_scaling": spec.rope_scaling,
        "max_position_embeddings": spec.max_position_embeddings,
        "hidden_act": spec.hidden_act,
        "attention_bias": spec.attention_bias,
        "tie_word_embeddings": False,
        "torch_dtype": spec.dtype,
    }
    if spec.layer_types is not None:
        cfg["layer_types"] = list(spec.layer_types)
        cfg["sliding_window"] = spec.sliding_window
    return cfg


def zlab_config(spec: DFlashSpec, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """A z-lab config.json for `spec`; `base` (a source config) keeps every key it had."""
    cfg = copy.deepcopy(base) if base is not None else _layer_config(spec)
    cfg["architectures"] = [ZLAB_ARCH]
    if "block_size" not in (cfg.get("dflash_config") or {}):
        cfg["block_size"] = spec.block_size
    dfc = dict(cfg.get("dflash_config") or {})
    dfc.update(mask_token_id=spec.mask_token_id, target_layer_ids=list(spec.target_layer_ids))
    if spec.sample_from_anchor:
        dfc["sample_from_anchor"] = True
    if spec.input_embedding_scale != 1.0:
        dfc["input_embedding_scale"] = spec.input_embedding_scale
    cfg["dflash_config"] = dfc
    if spec.num_target_layers is not None:
        cfg.setdefault("num_target_layers", spec.num_target_layers)
    if spec.target_hidden_size != spec.hidden_size:
        cfg["target_hidden_size"] = spec.target_hidden_size
    n = spec.num_hidden_layers
    if spec.causal and _causal_zlab(cfg, dfc, n) != spec.causal and len(set(spec.causal)) == 1:
        cfg["is_causal"] = spec.causal[0]  # read first by vLLM and SGLang alike
    return cfg


def speculators_config(
    spec: DFlashSpec, verifier: str | None, layer: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A speculators DFlash config.json for `spec` (speculators models/dflash/config.py)."""
    layer = copy.deepcopy(layer) if layer is not None else _layer_config(spec)
    if spec.layer_types is not None and "layer_types" not in layer:  # z-lab's use_swa
        layer.update(layer_types=list(spec.layer_types), sliding_window=spec.sliding_window)
    # speculators runs sliding layers causal unless sliding_window_non_causal, full layers
    # bidirectional; vLLM 0.33 applies `not sliding_window_non_causal` to every layer. True
    # when no sliding layer is causal: the same drafter to speculators, right in vLLM too.
    sliding = [
        c for c, t in zip(spec.causal, spec.layer_types or (), strict=False) if t == _SLIDING
    ]
    non_causal = not any(sliding)
    return {
        "architectures": [SPECULATORS_ARCH],
        "speculators_model_type": "dflash",
        "transformer_layer_config": layer,
        "draft_vocab_size": spec.draft_vocab_size,
        "block_size": spec.block_size,
        "target_hidden_size": spec.target_hidden_size
        if spec.target_hidden_size != spec.hidden_size
        else None,
        "aux_hidden_state_layer_ids": list(spec.speculators_ids),
        "mask_token_id": spec.mask_token_id,
        "sliding_window_non_causal": non_causal,
        "sample_from_anchor": spec.sample_from_anchor,
        "speculators_config": {
            "algorithm": "dflash",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": spec.num_proposals}
            ],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier, "architectures": []},
        },
    }


def zlab_layer_from_speculators(config: dict[str, Any]) -> dict[str, Any]:
    """The z-lab base config (the Qwen3 layer keys) hidden in a speculators config."""
    return copy.deepcopy(config.get("transformer_layer_config") or {})


def speculators_layer_from_zlab(config: dict[str, Any]) -> dict[str, Any]:
    """speculators' converter: every z-lab key except the DFlash ones is the layer config."""
    return {k: copy.deepcopy(v) for k, v in config.items() if k not in _ZLAB_NON_LAYER_KEYS}
