"""The three drafter layouts of FORMATS.md <-> DraftSpec, auto-detected.

- "sglang": SGLang / SpecForge `LlamaForCausalLMEagle3`; aux ids in `eagle_config` are read by
  SGLang as decoder-layer *outputs* (it captures HF `output_hidden_states[id + 1]`; checked
  against sglang main, models/llama.py & deepseek_v2.py `set_eagle3_layers_to_capture`, 2026-11).
- "vllm": vllm-project/speculators `Eagle3Speculator`; tensors `layers.0.*`; top-level
  `eagle_aux_hidden_state_layer_ids` are HF indices (vLLM captures the input of layer id).
- "eagle": SafeAILab EAGLE-3 (`LlamaForCausalLM`, one layer, `draft_vocab_size`, `midlayer.*`);
  its code always uses the default aux layers (2, L//2, L-3).
"""

from __future__ import annotations

from typing import Any

from eagle3kit.errors import bad
from eagle3kit.formats.safetensors_io import Checkpoint
from eagle3kit.spec import DraftSpec

LAYOUTS = ("sglang", "vllm", "eagle")
SGLANG_ARCH = "LlamaForCausalLMEagle3"
VLLM_ARCH = "Eagle3Speculator"
EAGLE_ARCH = "LlamaForCausalLM"

# safetensors dtype names <-> config dtype strings
_CFG_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


def file_to_canonical(name: str, layout: str) -> str:
    """Map a tensor name as stored by `layout` to our canonical (SGLang) name."""
    if name.startswith("model."):
        name = name[len("model.") :]
    if layout == "vllm" and name.startswith("layers.0."):
        return "midlayer." + name[len("layers.0.") :]
    return name


def canonical_to_file(name: str, layout: str) -> str:
    if layout == "vllm" and name.startswith("midlayer."):
        return "layers.0." + name[len("midlayer.") :]
    return name


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


def _get(
    cfg: dict[str, Any], key: str, where: str, typ: type | tuple[type, ...], default: Any = ...
) -> Any:
    if key not in cfg or cfg[key] is None:
        if default is ...:
            tname = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
            raise bad(where, f"{key}: missing (expected {tname})")
        return default
    v = cfg[key]
    ok = isinstance(v, typ) and not (isinstance(v, bool) and typ in (int, float, (int, float)))
    if not ok:
        tname = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise bad(where, f"{key}: expected {tname}, found {v!r}")
    if typ is int and v <= 0 and key not in ("pad_token_id", "bos_token_id", "eos_token_id"):
        raise bad(where, f"{key}: expected a positive int, found {v}")
    return v


def _rope(cfg: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """rope_theta and rope_scaling from either the transformers 4 or 5 config spelling."""
    params = cfg.get("rope_parameters")
    theta = cfg.get("rope_theta")
    scaling = cfg.get("rope_scaling")
    if isinstance(params, dict):
        theta = params.get("rope_theta", theta)
        if params.get("rope_type", "default") != "default":
            scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type")) in (
        None,
        "default",
    ):
        scaling = None
    return float(theta if theta is not None else 10000.0), scaling


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


def read_spec(ckpt: Checkpoint) -> tuple[str, DraftSpec, dict[str, str]]:
    """Detect the layout and build the DraftSpec of a drafter checkpoint.

    Returns (layout, spec, canonical name -> stored name). Unknown stored names are kept under
    their own (canonicalised) names so callers can report them as unexpected.
    """
    cfg, where = ckpt.config, ckpt.config_file
    layout = detect_layout(cfg, set(ckpt.tensors))
    names = {file_to_canonical(n, layout): n for n in ckpt.tensors}
    if layout == "vllm":
        layer = cfg.get("transformer_layer_config")
        if not isinstance(layer, dict):
            raise bad(
                where,
                f"transformer_layer_config: expected an object (speculators layout), found {layer!r}",
            )
        lwhere = f"{where}: transformer_layer_config"
        aux_raw = _aux_ids(
            cfg.get("eagle_aux_hidden_state_layer_ids"), where, "eagle_aux_hidden_state_layer_ids"
        )
        aux, conv = aux_raw, "hf"
        flags = {
            k: bool(cfg.get(k, False))
            for k in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
        }
        verifier = ((cfg.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
        draft_vocab = _get(cfg, "draft_vocab_size", where, int, None)
        target_hidden = _get(cfg, "target_hidden_size", where, int, None)
        arch = VLLM_ARCH
        qk_norm = layer.get("model_type") == "qwen3" or "midlayer.self_attn.q_norm.weight" in names
    else:
        layer, lwhere = cfg, where
        eagle_cfg = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
        aux_raw = _aux_ids(
            eagle_cfg.get("eagle_aux_hidden_state_layer_ids"),
            where,
            "eagle_config.eagle_aux_hidden_state_layer_ids",
        )
        if layout == "eagle":
            aux_raw = _aux_ids(cfg.get("eagle3kit_aux_layers"), where, "eagle3kit_aux_layers")
            aux, conv = aux_raw, "hf"
        else:  # SGLang captures HF output_hidden_states[id + 1] for explicit ids
            aux, conv = (tuple(i + 1 for i in aux_raw) if aux_raw else None), "sglang"
        flags = {
            k: bool(cfg.get(k, False))
            for k in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
        }
        verifier = cfg.get("eagle3kit_verifier")
        draft_vocab = _get(cfg, "draft_vocab_size", where, int, None)
        target_hidden = _get(cfg, "target_hidden_size", where, int, None)
        archs = cfg.get("architectures") or [SGLANG_ARCH if layout == "sglang" else EAGLE_ARCH]
        arch = (
            archs[0]
            if isinstance(archs, list) and archs and isinstance(archs[0], str)
            else str(archs)
        )
        qk_norm = "midlayer.self_attn.q_norm.weight" in names
    ours = cfg.get("eagle3kit")  # eagle3kit's writers record the h-indices unambiguously
    if isinstance(ours, dict) and ours.get("aux_layers_hf") is not None:
        aux = _aux_ids(ours["aux_layers_hf"], where, "eagle3kit.aux_layers_hf")
    hidden = _get(layer, "hidden_size", lwhere, int)
    heads = _get(layer, "num_attention_heads", lwhere, int)
    vocab = _get(layer, "vocab_size", lwhere, int)
    n_layers = _get(layer, "num_hidden_layers", lwhere, int, 1)
    if n_layers != 1:
        raise bad(
            lwhere,
            f"num_hidden_layers: expected 1 (an EAGLE-3 drafter has one decoder layer), found {n_layers}",
        )
    head_dim = _get(layer, "head_dim", lwhere, int, hidden // heads)
    theta, scaling = _rope(layer)
    spec = DraftSpec(
        hidden_size=hidden,
        intermediate_size=_get(layer, "intermediate_size", lwhere, int),
        num_attention_heads=heads,
        num_key_value_heads=_get(layer, "num_key_value_heads", lwhere, int, heads),
        head_dim=head_dim,
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
        aux_layers=aux,
        aux_convention=conv,
        aux_layers_raw=aux_raw,
        qk_norm=qk_norm,
        dtype=_dtype(layer if layout == "vllm" else cfg, ckpt),
        tensors=tuple(sorted(names)),
        verifier=verifier if isinstance(verifier, str) else None,
        architecture=arch,
        **flags,
    )
    return layout, spec, names


# ---------------------------------------------------------------- writing


class LossyConversion(ValueError):
    """The target layout cannot express something the drafter has."""


def unsupported_by(spec: DraftSpec, layout: str) -> list[str]:
    """What `layout`'s engine/code does not implement for this drafter (empty when lossless)."""
    problems = []
    if layout in ("sglang", "eagle"):
        for flag in (
            "norm_before_residual",
            "norm_before_fc",
            "fc_norm",
            "norm_output",
            "qk_norm",
            "mlp_bias",
        ):
            if getattr(spec, flag):
                problems.append(f"{flag}=true (the {layout} drafter layer does not implement it)")
        if spec.attention_bias:
            problems.append(
                f"attention_bias=true (the {layout} drafter's q/k/v projections have no bias)"
            )
    if layout == "sglang" and spec.aux_layers and min(spec.aux_layers) < 1:
        problems.append(
            f"aux layer 0 (the embedding output) cannot be named in SGLang's convention (id = layer - 1), found {list(spec.aux_layers)}"
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
    }
    return d


def config_for(
    spec: DraftSpec, layout: str, *, verifier: str | None = None, speculative_tokens: int = 3
) -> dict[str, Any]:
    """The config.json that `layout` expects for this drafter, every flag explicit.

    Raises LossyConversion when the layout cannot express the drafter."""
    problems = unsupported_by(spec, layout)
    if problems:
        raise LossyConversion("; ".join(problems))
    verifier = verifier or spec.verifier
    flags = {
        k: getattr(spec, k)
        for k in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
    }
    if layout == "vllm":
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
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens,
                                      "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                "default_proposal_method": "greedy",
                "verifier": {"name_or_path": verifier, "architectures": []},
            },
            "torch_dtype": spec.dtype,
            **({"eagle3kit": {"aux_layers_hf": list(spec.aux_layers)}} if spec.aux_layers else {}),
        }  # fmt: skip
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
                # SGLang adds 1 to each id (it names decoder-layer outputs).
                "eagle_aux_hidden_state_layer_ids": [i - 1 for i in spec.aux_layers],
                "use_aux_hidden_state": True,
            }
            cfg["eagle3kit"] = {"aux_layers_hf": list(spec.aux_layers)}  # ours: h-indices
        if verifier:
            cfg["eagle3kit_verifier"] = verifier
    else:  # original EAGLE: its code always uses the default aux layers; record ours for round trips
        if spec.aux_layers:
            cfg["eagle3kit_aux_layers"] = list(spec.aux_layers)
        if verifier:
            cfg["eagle3kit_verifier"] = verifier
    return cfg
