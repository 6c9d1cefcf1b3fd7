"""The three drafter layouts (docs/formats.md "Drafter layouts") <-> DraftSpec, auto-detected.

- "sglang": SGLang / SpecForge `LlamaForCausalLMEagle3`; aux ids in `eagle_config` are read by
  SGLang as decoder-layer *outputs* (it captures HF `output_hidden_states[id + 1]`; checked
  against sglang main, models/llama.py & deepseek_v2.py `set_eagle3_layers_to_capture`, 2026-11).
- "vllm": vllm-project/speculators `Eagle3Speculator`; tensors `layers.0.*`; top-level
  `eagle_aux_hidden_state_layer_ids` are HF indices (vLLM captures the input of layer id).
- "eagle": SafeAILab EAGLE-3 (`LlamaForCausalLM`, one layer, `draft_vocab_size`, `midlayer.*`);
  its code always uses the default aux layers (2, L//2, L-3).

MLA drafters (`Eagle3DeepseekV2ForCausalLM` / `...V3...`, DeepSeek-V3 latent attention) have
one flat DeepSeek config (`q_lora_rank`, `kv_lora_rank`, `qk_{nope,rope}_head_dim`,
`v_head_dim`, yarn `rope_scaling`) in both engines; speculators has no MLA drafter. For them
"sglang" means SpecForge's `midlayer.*` names with nested `eagle_config` ids (layer outputs),
"vllm" the export names `layers.0.*` (lightseekorg, TorchSpec, ModelOpt `kimik2`) with
top-level h-index ids. SGLang maps `midlayer.` <-> `layers.0.` (for Llama drafters too), so
both engines load both. The SGLang writer's ids depend on the target family (`sglang_ids`).
There is no EAGLE layout for them (the original EAGLE code has Llama attention only).
"""

from __future__ import annotations

import re
from typing import Any

from eagle3kit.checkpoint.engines import rules as E
from eagle3kit.checkpoint.engines.rules import VLLM_MLA_MODEL_TYPE
from eagle3kit.checkpoint.io.fields import config_value as _get
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.core.dtypes import SAFETENSORS_TO_NAME
from eagle3kit.core.errors import bad
from eagle3kit.core.spec import NORM_FLAGS, DraftSpec, rope_from_config

LAYOUTS = ("sglang", "vllm", "eagle")
SGLANG_ARCH = "LlamaForCausalLMEagle3"
VLLM_ARCH = "Eagle3Speculator"
EAGLE_ARCH = "LlamaForCausalLM"
# MLA drafters (docs/formats.md "MLA drafters"): SGLang 0.5.23 registers only V2
# (kimi_k25_eagle3.py EntryClass; V3 is refused at model_class by benchmarks/engine_check.py),
# vLLM maps both to its deepseek_eagle3 model; ModelOpt's kimik2 export template writes V2.
MLA_ARCH = "Eagle3DeepseekV2ForCausalLM"
MLA_ARCHS = (MLA_ARCH, "Eagle3DeepseekV3ForCausalLM")

_CFG_DTYPES = SAFETENSORS_TO_NAME  # safetensors dtype names -> config dtype strings


def file_to_canonical(name: str, layout: str) -> str:
    """Map a tensor name as stored by `layout` to our canonical (SGLang) name."""
    if name.startswith("model."):
        name = name[len("model.") :]
    # SGLang's llama_eagle3.py maps midlayer -> layers.0 and loads both (0.5.23 load_weights)
    if layout in ("vllm", "sglang") and name.startswith("layers.0."):
        return "midlayer." + name[len("layers.0.") :]
    return name


def canonical_to_file(name: str, layout: str) -> str:
    if layout == "vllm" and name.startswith("midlayer."):
        return "layers.0." + name[len("midlayer.") :]
    return name


def is_mla_config(config: dict[str, Any]) -> bool:
    """A drafter config with DeepSeek-V3 latent attention (by architecture, or by its MLA keys)."""
    archs = config.get("architectures") or []
    if any(a in MLA_ARCHS for a in archs if isinstance(a, str)):
        return True
    return "kv_lora_rank" in config and "transformer_layer_config" not in config


def is_drafter_config(config: dict[str, Any], names: set[str] | None = None) -> bool:
    archs = config.get("architectures") or []
    if config.get("speculators_model_type") or VLLM_ARCH in archs:
        return True
    if any("Eagle3" in a or "Eagle" in a for a in archs if isinstance(a, str)):
        return True
    if "eagle_config" in config or "draft_vocab_size" in config:
        return True
    return bool(
        names
        and any(n.endswith("fc.weight") for n in names)
        and any("midlayer." in n or n.startswith("layers.0.") for n in names)
    )


def detect_layout(config: dict[str, Any], names: set[str]) -> str:
    """'sglang', 'vllm' or 'eagle' from the config and the tensor names."""
    archs = [a for a in (config.get("architectures") or []) if isinstance(a, str)]
    if is_mla_config(config):  # by names: midlayer.* (SpecForge) or layers.0.* (export)
        export = any(n.startswith(("layers.0.", "model.layers.0.")) for n in names)
        return "vllm" if export and not any("midlayer." in n for n in names) else "sglang"
    if (
        config.get("speculators_model_type")
        or VLLM_ARCH in archs
        or "transformer_layer_config" in config
    ):
        return "vllm"
    if any(a.endswith("Eagle3") for a in archs) or "eagle_config" in config:
        return "sglang"
    if any(n.startswith(("layers.0.", "model.layers.0.")) for n in names) and not any(
        "midlayer." in n for n in names
    ):
        return "vllm"
    return "eagle"


def _aux_ids(v: Any, where: str, key: str) -> tuple[int, ...] | None:
    if v is None:
        return None
    if (
        not isinstance(v, list)
        or not v
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in v)
    ):
        raise bad(where, f"{key}: expected a list of layer ids, found {v!r}")
    return tuple(v)


def _dtype(cfg: dict[str, Any], ckpt: Checkpoint) -> str:
    d = cfg.get("torch_dtype") or cfg.get("dtype")
    if isinstance(d, str):
        return d.replace("torch.", "")
    w = ckpt.tensors.get("fc.weight") or next(
        (t for t in ckpt.tensors.values() if t.dtype in _CFG_DTYPES), None
    )
    return _CFG_DTYPES.get(w.dtype, "bfloat16") if w else "bfloat16"


def _arch(cfg: dict[str, Any], default: str) -> str:
    archs = cfg.get("architectures") or [default]
    ok = isinstance(archs, list) and archs and isinstance(archs[0], str)
    return archs[0] if ok else str(archs)


def _flags(cfg: dict[str, Any]) -> dict[str, bool]:
    return {k: bool(cfg.get(k, False)) for k in NORM_FLAGS}


def _read_speculators(cfg: dict[str, Any], where: str, names: dict[str, str]) -> dict[str, Any]:
    """speculators/vLLM `Eagle3Speculator`: a nested Llama/Qwen3 layer config, top-level ids."""
    layer = cfg.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise bad(
            where,
            f"transformer_layer_config: expected an object (speculators layout), found {layer!r}",
        )
    raw = _aux_ids(
        cfg.get("eagle_aux_hidden_state_layer_ids"), where, "eagle_aux_hidden_state_layer_ids"
    )
    verifier = ((cfg.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
    qk_norm = layer.get("model_type") == "qwen3" or "midlayer.self_attn.q_norm.weight" in names
    return dict(
        layer=layer,
        lwhere=f"{where}: transformer_layer_config",
        aux_layers_raw=raw,
        aux_layers=raw,
        aux_convention="hf",
        verifier=verifier,
        architecture=VLLM_ARCH,
        qk_norm=qk_norm,
    )


def _read_flat(
    cfg: dict[str, Any], where: str, layout: str, names: dict[str, str]
) -> dict[str, Any]:
    """SGLang (nested `eagle_config` ids, read as layer outputs: h = id + 1) or original EAGLE."""
    nested = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    key = "eagle_config.eagle_aux_hidden_state_layer_ids"
    raw = _aux_ids(nested.get("eagle_aux_hidden_state_layer_ids"), where, key)
    if layout == "eagle":
        raw = _aux_ids(cfg.get("eagle3kit_aux_layers"), where, "eagle3kit_aux_layers")
        aux, conv = raw, "hf"
    else:  # SGLang captures HF output_hidden_states[id + 1] for explicit ids
        aux, conv = (tuple(i + 1 for i in raw) if raw else None), "sglang"
    return dict(
        layer=cfg,
        lwhere=where,
        aux_layers_raw=raw,
        aux_layers=aux,
        aux_convention=conv,
        verifier=cfg.get("eagle3kit_verifier"),
        architecture=_arch(cfg, SGLANG_ARCH if layout == "sglang" else EAGLE_ARCH),
        qk_norm="midlayer.self_attn.q_norm.weight" in names,
    )


def _read_mla_ids(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """MLA drafters carry a flat DeepSeek config: top-level ids are h-indices (vLLM reads
    them), else nested `eagle_config` ids are layer outputs (h = id + 1, SGLang's reading)."""
    top = _aux_ids(
        cfg.get("eagle_aux_hidden_state_layer_ids"), where, "eagle_aux_hidden_state_layer_ids"
    )
    if top:
        return dict(aux_layers_raw=top, aux_layers=top, aux_convention="hf")
    nested = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    key = "eagle_config.eagle_aux_hidden_state_layer_ids"
    raw = _aux_ids(nested.get("eagle_aux_hidden_state_layer_ids"), where, key)
    return dict(
        aux_layers_raw=raw,
        aux_layers=tuple(i + 1 for i in raw) if raw else None,
        aux_convention="sglang",
    )


def _mla_fields(ckpt: Checkpoint, names: dict[str, str]) -> dict[str, Any]:
    """The MLA dims (DeepSeek-V3 config keys) and what the flat config leaves implicit."""
    cfg, where = ckpt.config, ckpt.config_file
    q_lora = cfg.get("q_lora_rank")
    out: dict[str, Any] = dict(
        attention="mla",
        q_lora_rank=None if q_lora is None else _get(cfg, "q_lora_rank", where, int),
        kv_lora_rank=_get(cfg, "kv_lora_rank", where, int),
        qk_nope_head_dim=_get(cfg, "qk_nope_head_dim", where, int),
        qk_rope_head_dim=_get(cfg, "qk_rope_head_dim", where, int),
        v_head_dim=_get(cfg, "v_head_dim", where, int),
        rope_interleave=bool(cfg.get("rope_interleave", True)),
        model_type=cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None,
    )
    out["head_dim"] = out["qk_nope_head_dim"] + out["qk_rope_head_dim"]
    heads = _get(cfg, "num_attention_heads", where, int)
    out["num_key_value_heads"] = heads  # latent attention: one key/value per head
    if cfg.get("draft_vocab_size") is None:  # ModelOpt's kimik2 export has no such key
        for name in ("lm_head.weight", "d2t"):
            if name in names:
                out["draft_vocab_size"] = int(ckpt.tensors[names[name]].shape[0])
                break
    return out


def read_spec(ckpt: Checkpoint) -> tuple[str, DraftSpec, dict[str, str]]:
    """Detect the layout and build the DraftSpec of a drafter checkpoint.

    Returns (layout, spec, canonical name -> stored name). Unknown stored names are kept under
    their own (canonicalised) names so callers can report them as unexpected.
    """
    cfg, where = ckpt.config, ckpt.config_file
    layout = detect_layout(cfg, set(ckpt.tensors))
    names = {file_to_canonical(n, layout): n for n in ckpt.tensors}
    mla = is_mla_config(cfg)
    if layout == "vllm" and not mla:
        f = _read_speculators(cfg, where, names)
    else:
        f = _read_flat(cfg, where, layout, names)
    if mla:
        f.update(_read_mla_ids(cfg, where), architecture=_arch(cfg, MLA_ARCH), qk_norm=False)
        f.update(_mla_fields(ckpt, names))
    ours = cfg.get("eagle3kit")  # eagle3kit's writers record the h-indices unambiguously
    if isinstance(ours, dict) and ours.get("aux_layers_hf") is not None:
        f["aux_layers"] = _aux_ids(ours["aux_layers_hf"], where, "eagle3kit.aux_layers_hf")
    layer, lwhere = f.pop("layer"), f.pop("lwhere")
    _check_one_layer(layer, lwhere, names)
    hidden = _get(layer, "hidden_size", lwhere, int)
    heads = _get(layer, "num_attention_heads", lwhere, int)
    vocab = _get(layer, "vocab_size", lwhere, int)
    draft_vocab = _get(cfg, "draft_vocab_size", where, int, None)
    target_hidden = _get(cfg, "target_hidden_size", where, int, None)
    theta, scaling = rope_from_config(layer)
    verifier = f.pop("verifier")
    fields: dict[str, Any] = dict(
        hidden_size=hidden,
        intermediate_size=_get(layer, "intermediate_size", lwhere, int),
        num_attention_heads=heads,
        num_key_value_heads=_get(layer, "num_key_value_heads", lwhere, int, heads),
        head_dim=_get(layer, "head_dim", lwhere, int, hidden // heads),
        vocab_size=vocab,
        draft_vocab_size=draft_vocab if draft_vocab is not None else vocab,
        target_hidden_size=target_hidden if target_hidden is not None else hidden,
        rms_norm_eps=float(_get(layer, "rms_norm_eps", lwhere, (int, float), 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
        max_position_embeddings=_get(layer, "max_position_embeddings", lwhere, int, 2048),
        hidden_act=str(layer.get("hidden_act", "silu")),
        attention_bias=bool(layer.get("attention_bias", False) or cfg.get("bias", False)),
        mlp_bias=bool(layer.get("mlp_bias", False)),
        dtype=_dtype(layer if layout == "vllm" and not mla else cfg, ckpt),
        tensors=tuple(sorted(names)),
        verifier=verifier if isinstance(verifier, str) else None,
        sliding_window=read_window(layer, lwhere),
        **_flags(cfg),
    )
    fields.update(f)
    return layout, DraftSpec(**fields), names


SLIDING = "sliding_attention"


def read_window(layer: dict[str, Any], where: str) -> int | None:
    """The drafter layer's sliding window: `sliding_window` when `layer_types[0]` is
    "sliding_attention", else None (vLLM 0.33 models/llama.py LlamaAttention reads exactly
    these two keys, the layer's entry of layer_types; a bare sliding_window is not read)."""
    types = layer.get("layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or not types or not all(isinstance(t, str) for t in types):
        raise bad(where, f"layer_types: expected a list of attention kinds, found {types!r}")
    if types[0] != SLIDING:
        return None
    w = layer.get("sliding_window")
    if not isinstance(w, int) or isinstance(w, bool) or w < 1:
        raise bad(
            where,
            f"sliding_window: expected an int >= 1 (layer_types[0] is {SLIDING}), found {w!r}",
        )
    return w


def window_keys(spec: DraftSpec) -> dict[str, Any]:
    """The config keys of a sliding-window drafter layer (none for a full one)."""
    if spec.sliding_window is None:
        return {}
    return {"layer_types": [SLIDING], "sliding_window": spec.sliding_window}


def set_layer_count(block: dict[str, Any], n: int) -> None:
    """A layer config for `n` identical decoder layers (P-EAGLE's 1-4): num_hidden_layers, and
    one `layer_types` entry per layer where the block has them (transformers' configs refuse a
    count that differs)."""
    block["num_hidden_layers"] = n
    if isinstance(block.get("layer_types"), list) and block["layer_types"]:
        block["layer_types"] = [block["layer_types"][0]] * n


def _check_one_layer(layer: dict[str, Any], where: str, names: dict[str, str]) -> None:
    """An EAGLE-3 drafter has one decoder layer. ModelOpt's kimik2 template may copy the
    target's num_hidden_layers, so a file whose tensors name one layer only is accepted."""
    n_layers = _get(layer, "num_hidden_layers", where, int, 1)
    more = any(re.match(r"(model\.)?layers\.[1-9]", n) for n in names.values())
    if n_layers != 1 and (more or not is_mla_config(layer)):
        raise bad(
            where,
            "num_hidden_layers: expected 1 (an EAGLE-3 drafter has one decoder layer), found "
            f"{n_layers}",
        )


# ---------------------------------------------------------------- writing


class LossyConversion(ValueError):
    """The target layout cannot express something the drafter has."""


def sglang_implements(flag: str, attention: str) -> bool:
    """SGLang (latest rules) implements norm flag `flag` for this drafter kind on every target."""
    return all(E.flag_rule("sglang", flag, attention, f, None) for f in E.FAMILIES)


def sglang_ids(spec: DraftSpec, family: str | None) -> list[int] | None:
    """The eagle_config ids SGLang (latest rules) reads as the drafter's aux layers on a
    `family` target (None: DeepSeek/Kimi for an MLA drafter, else Llama), or None when none do."""
    fam = family or ("deepseek" if spec.is_mla else "llama")
    return E.ids_for("sglang", None, fam, spec.aux_layers) if spec.aux_layers else None


def unsupported_by(spec: DraftSpec, layout: str, family: str | None = None) -> list[str]:
    """What `layout`'s engine/code does not implement for this drafter (empty when lossless);
    `family`: the target's (engines.target_family), None when unknown."""
    problems = []
    if spec.is_mla and layout == "eagle":
        problems.append(
            "attention=mla (the EAGLE drafter layer has Llama attention only; use --to sglang or "
            "vllm)"
        )
    if spec.is_mla and layout == "vllm" and spec.norm_before_fc:
        problems.append("norm_before_fc=true (vLLM implements it for Llama drafters, not MLA)")
    if layout in ("sglang", "eagle"):
        for flag in (*NORM_FLAGS, "qk_norm", "mlp_bias"):
            served = layout == "sglang" and flag in NORM_FLAGS
            if getattr(spec, flag) and not (served and sglang_implements(flag, spec.attention)):
                problems.append(f"{flag}=true (the {layout} drafter layer does not implement it)")
        if spec.attention_bias:
            problems.append(
                f"attention_bias=true (the {layout} drafter's q/k/v projections have no bias)"
            )
    if layout == "sglang" and spec.aux_layers and sglang_ids(spec, family) is None:
        fam = family or ("deepseek" if spec.is_mla else "llama")
        rule = E.capture_rule("sglang", None, fam)
        problems.append(
            f"aux layers h{list(spec.aux_layers)}: no eagle_config ids make SGLang capture them "
            f"on a {E.FAMILY_NAMES[fam]} target ({rule.capture}: "
            + (
                "id x -> h[x+1], so h[0] cannot be named"
                if rule.capture == "plus1"
                else "a first id 1 is read as h[2], so h[1] cannot come first"
            )
            + f"; {rule.source})"
        )
    return problems


def _llama_block(spec: DraftSpec) -> dict[str, Any]:
    d: dict[str, Any] = {
        "model_type": "qwen3" if spec.qk_norm else "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": 1,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "hidden_act": spec.hidden_act,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_theta": spec.rope_theta,
        "rope_scaling": spec.rope_scaling,
        "max_position_embeddings": spec.max_position_embeddings,
        "attention_bias": spec.attention_bias,
        "mlp_bias": spec.mlp_bias,
        "tie_word_embeddings": False,
        "vocab_size": spec.vocab_size,
        "torch_dtype": spec.dtype,
        **window_keys(spec),
    }
    return d


def mla_model_type(spec: DraftSpec, layout: str) -> str:
    """The model_type written for an MLA drafter: its own (default deepseek_v3), except that
    for vLLM a type vLLM turns into its MTP model is written as kimi_k2 (engines/rules.py
    VLLM_MTP_MODEL_TYPES: the same DeepseekV3Config to vLLM)."""
    mt = spec.model_type or "deepseek_v3"
    if layout == "vllm" and mt == "deepseek_v3":
        return VLLM_MLA_MODEL_TYPE
    return mt


def _mla_block(spec: DraftSpec, layout: str) -> dict[str, Any]:
    """The flat DeepSeek-V3 config of an MLA drafter layer (one layer, dense MLP)."""
    return {
        "model_type": mla_model_type(spec, layout),
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": 1,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "q_lora_rank": spec.q_lora_rank,
        "kv_lora_rank": spec.kv_lora_rank,
        "qk_nope_head_dim": spec.qk_nope_head_dim,
        "qk_rope_head_dim": spec.qk_rope_head_dim,
        "v_head_dim": spec.v_head_dim,
        "hidden_act": spec.hidden_act,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_theta": spec.rope_theta,
        "rope_scaling": spec.rope_scaling,
        "rope_interleave": spec.rope_interleave,
        "max_position_embeddings": spec.max_position_embeddings,
        "attention_bias": spec.attention_bias,
        "tie_word_embeddings": False,
        "vocab_size": spec.vocab_size,
        "torch_dtype": spec.dtype,
        **window_keys(spec),
    }


def _mla_config(
    spec: DraftSpec, layout: str, verifier: str | None, family: str | None
) -> dict[str, Any]:
    # SGLang 0.5.23 registers only the V2 name (kimi_k25_eagle3.py EntryClass)
    keep = spec.architecture in MLA_ARCHS and layout != "sglang"
    cfg: dict[str, Any] = {"architectures": [spec.architecture if keep else MLA_ARCH]}
    cfg.update(_mla_block(spec, layout))
    cfg["draft_vocab_size"] = spec.draft_vocab_size
    cfg["target_hidden_size"] = spec.target_hidden_size
    cfg.update({k: getattr(spec, k) for k in NORM_FLAGS})
    if spec.aux_layers and layout == "sglang":  # the ids SGLang reads as these h-indices
        cfg["eagle_config"] = {
            "eagle_aux_hidden_state_layer_ids": sglang_ids(spec, family),
            "use_aux_hidden_state": True,
        }
    elif spec.aux_layers:  # vLLM reads top-level ids as h-indices
        cfg["eagle_aux_hidden_state_layer_ids"] = list(spec.aux_layers)
    if spec.aux_layers:
        cfg["eagle3kit"] = {"aux_layers_hf": list(spec.aux_layers)}  # ours: h-indices
    if verifier:
        cfg["eagle3kit_verifier"] = verifier
    return cfg


def config_for(
    spec: DraftSpec,
    layout: str,
    *,
    verifier: str | None = None,
    speculative_tokens: int = 3,
    family: str | None = None,
) -> dict[str, Any]:
    """The config.json that `layout` expects for this drafter, every flag explicit; `family`
    is the target's (engines.target_family; SGLang's ids depend on it), None when unknown.

    Raises LossyConversion when the layout cannot express the drafter."""
    problems = unsupported_by(spec, layout, family)
    if problems:
        raise LossyConversion("; ".join(problems))
    verifier = verifier or spec.verifier
    if spec.is_mla:
        return _mla_config(spec, layout, verifier, family)
    flags = {k: getattr(spec, k) for k in NORM_FLAGS}
    if layout == "vllm":
        return _vllm_config(spec, verifier, speculative_tokens, flags)
    cfg = {
        "architectures": [SGLANG_ARCH if layout == "sglang" else EAGLE_ARCH],
        **_llama_block(spec),
    }
    cfg["draft_vocab_size"] = spec.draft_vocab_size
    cfg["target_hidden_size"] = spec.target_hidden_size
    cfg.update(flags)
    if layout == "sglang":
        if spec.aux_layers:
            cfg["eagle_config"] = {
                # the ids SGLang reads as these h-indices (id x -> h[x+1] on Llama targets)
                "eagle_aux_hidden_state_layer_ids": sglang_ids(spec, family),
                "use_aux_hidden_state": True,
            }
            cfg["eagle3kit"] = {"aux_layers_hf": list(spec.aux_layers)}  # ours: h-indices
        if verifier:
            cfg["eagle3kit_verifier"] = verifier
    else:  # original EAGLE: its code always uses the default aux layers; ours kept for round trips
        if spec.aux_layers:
            cfg["eagle3kit_aux_layers"] = list(spec.aux_layers)
        if verifier:
            cfg["eagle3kit_verifier"] = verifier
    return cfg


def _vllm_config(
    spec: DraftSpec, verifier: str | None, speculative_tokens: int, flags: dict[str, Any]
) -> dict[str, Any]:
    """config_for's speculators-format config (vLLM) of a dense drafter."""
    return {
        "architectures": [VLLM_ARCH],
        "speculators_model_type": "eagle3",
        "transformer_layer_config": _llama_block(spec),
        "draft_vocab_size": spec.draft_vocab_size,
        "target_hidden_size": spec.target_hidden_size,
        "eagle_aux_hidden_state_layer_ids": list(spec.aux_layers) if spec.aux_layers else None,
        **flags,
        "embed_requires_grad": False,
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [
                {
                    "proposal_type": "greedy",
                    "speculative_tokens": speculative_tokens,
                    "verifier_accept_k": 1,
                    "accept_tolerance": 0.0,
                }
            ],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier, "architectures": []},
        },
        "torch_dtype": spec.dtype,
        **({"eagle3kit": {"aux_layers_hf": list(spec.aux_layers)}} if spec.aux_layers else {}),
    }


EAGLE31_FLAGS = ("fc_norm", "norm_output")  # either one set: EAGLE 3.1 (docs/train.md)


def method_of(spec: Any) -> str:
    """An EAGLE-3 drafter's method by its flags (core/registry.py's names): `eagle3.1` when
    fc_norm or norm_output is set, else `eagle3` (norm_before_fc alone predates 3.1:
    speculators wrote it for EAGLE-3 drafters). `spec`: a DraftSpec or a config dict."""
    get = spec.get if isinstance(spec, dict) else lambda f: getattr(spec, f)
    return "eagle3.1" if any(get(f) for f in EAGLE31_FLAGS) else "eagle3"
