"""MTP heads inside a target checkpoint, found from config and headers alone (torch-free).

Two layouts (docs/formats.md "MTP heads"):
- "deepseek" (DeepSeek-V3/V3.2, GLM-4.5+, Kimi): head k is decoder layer L + k,
  `model.layers.{L+k}.{enorm, hnorm, eh_proj, self_attn.*, mlp.*, input_layernorm,
  post_attention_layernorm, shared_head.{norm, head}, embed_tokens}` (DeepSeek-V3
  README_WEIGHTS.md; vLLM deepseek_mtp.py), L = num_hidden_layers.
- "qwen3_next" (Qwen3-Next, Qwen3.5): `mtp.{fc, pre_fc_norm_embedding, pre_fc_norm_hidden,
  norm}` shared, `mtp.layers.{k}.*` per head (vLLM qwen3_next_mtp.py; speculators
  convert/mtp/converter.py).
Counts: `num_nextn_predict_layers` (DeepSeek, GLM, Qwen3-Next) or `mtp_num_hidden_layers`
(Qwen3.5), top-level or under `text_config` (Kimi-K3, multimodal wrappers).

Canonical names of one head (the MTP module's parameter names) use DeepSeek's roles:
`enorm` (norm of the next token's embedding), `hnorm` (norm of the target's hidden state),
`eh_proj` ([H, 2H] on cat(enorm(e), hnorm(h))), the decoder block's own names, and
`shared_head.norm` / `shared_head.head` / `embed_tokens` when the head stores them.
Qwen3-Next maps pre_fc_norm_embedding -> enorm, pre_fc_norm_hidden -> hnorm, fc -> eh_proj,
norm -> shared_head.norm (its head is the target's lm_head).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from eagle3kit.checkpoint.io.safetensors_io import Checkpoint

METHOD = "mtp"  # its name in core/registry.py (and every JSON "method" field)
MTP_COUNT_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
_QWEN_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_moe")
# a standalone head dir (extract_mtp, train --method mtp): config.json's architectures and the
# key of its record (style, index, layer, prefix, names: canonical -> the target's name, ...)
MTP_ARCH = "Eagle3kitMTPHead"
HEAD_KEY = "eagle3kit_mtp"
# Qwen3-Next's shared mtp.* tensors (names after "mtp.") -> DeepSeek's canonical roles
QWEN_CANON = {
    "pre_fc_norm_embedding.weight": "enorm.weight",
    "pre_fc_norm_hidden.weight": "hnorm.weight",
    "fc.weight": "eh_proj.weight",
    "norm.weight": "shared_head.norm.weight",
}
_QWEN_SHARED = {"mtp." + k: v for k, v in QWEN_CANON.items()}
_DS_MARKERS = ("enorm.weight", "hnorm.weight", "eh_proj.weight")
_LAYER = re.compile(r"^((?:[\w.]*\.)?layers\.)(\d+)\.(.+)$")


def _get(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` of a config.json dict, or the attribute of a transformers config."""
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def text_config(config: Any) -> Any:
    """The language model's config: ``text_config`` of a multimodal wrapper, else itself
    (a dict's only when it is a dict; a transformers config's when it is set)."""
    inner = _get(config, "text_config")
    if isinstance(config, dict):
        return inner if isinstance(inner, dict) else config
    return inner if inner is not None else config


def _declared(config: Any) -> tuple[str | None, int]:
    """(the key that declares the MTP layer count, "text_config."-prefixed when nested; the
    count): the first positive whole number, top-level first. (None, 0) when none."""
    for prefix, cfg in (("", config), ("text_config.", text_config(config))):
        for key in MTP_COUNT_KEYS:
            v = _get(cfg, key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return prefix + key, v
    return None, 0


def mtp_count(config: Any) -> int:
    """How many MTP layers the config declares (0 when none), top-level or in text_config."""
    return _declared(config)[1]


def mtp_style(config: Any) -> str:
    """ "qwen3_next" for Qwen3-Next / Qwen3.5 configs (``mtp.*``), else "deepseek"."""
    return "qwen3_next" if _get(text_config(config), "model_type") in _QWEN_TYPES else "deepseek"


def mtp_prefix(config: Any, index: int = 0) -> str:
    """Where MTP layer ``index`` lives in the target's checkpoint, from its config."""
    if mtp_style(config) == "qwen3_next":
        return "mtp."
    return f"model.layers.{int(_get(text_config(config), 'num_hidden_layers')) + index}."


def mtp_prefixes(config: Any) -> tuple[str, ...]:
    """The prefixes of every MTP layer the config declares (() when none)."""
    return tuple(sorted({mtp_prefix(config, i) for i in range(mtp_count(config))}))


def head_record(config: Any) -> dict[str, Any] | None:
    """A standalone head dir's record (config.json's ``eagle3kit_mtp``, with its ``names``),
    or None when the config is not one's."""
    rec = config.get(HEAD_KEY) if isinstance(config, dict) else None
    return rec if isinstance(rec, dict) and isinstance(rec.get("names"), dict) else None


def head_dir_config(config: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    """A head dir's config.json: the target's (text) config marked as a head, with its record
    (style, index, layer, prefix, names, target, target_architectures)."""
    return {**config, "architectures": [MTP_ARCH], HEAD_KEY: record}


@dataclass(frozen=True)
class MtpHead:
    """One MTP head of a target: where its tensors are and their canonical names."""

    style: str  # deepseek | qwen3_next
    index: int  # k: the head's step (0 = predicts the token after next)
    layer: int | None  # deepseek: the decoder-layer number L + k
    prefix: str  # "model.layers.61." or "mtp."
    names: dict[str, str] = field(hash=False)  # canonical -> stored name
    count_key: str | None = None  # the config key that declares the count
    declared: int = 0  # the count the config declares

    def to_json(self) -> dict[str, Any]:
        return {
            "style": self.style,
            "index": self.index,
            "layer": self.layer,
            "prefix": self.prefix,
            "tensors": len(self.names),
            "count_key": self.count_key,
            "declared": self.declared,
        }


def _deepseek_heads(ckpt: Checkpoint, n_layers: int, declared: int, key: str | None):
    """Decoder layers numbered L.. that carry enorm/hnorm/eh_proj, under any prefix ending
    in `layers.` (`model.layers.61.`, Kimi-K2.5's `language_model.model.layers.61.`)."""
    by_layer: dict[tuple[str, int], dict[str, str]] = {}
    for name in ckpt.names():
        m = _LAYER.match(name)
        if m and not name.startswith("mtp.") and int(m.group(2)) >= n_layers:
            by_layer.setdefault((m.group(1), int(m.group(2))), {})[m.group(3)] = name
    heads = []
    for (pre, layer), names in sorted(by_layer.items(), key=lambda kv: kv[0][1]):
        if not any(n in names for n in _DS_MARKERS):
            continue
        heads.append(
            MtpHead("deepseek", layer - n_layers, layer, f"{pre}{layer}.", names, key, declared)
        )
    return heads


def _qwen_heads(ckpt: Checkpoint, declared: int, key: str | None) -> list[MtpHead]:
    all_names = ckpt.names()
    shared = {_QWEN_SHARED.get(n, n[len("mtp.") :]): n for n in all_names if n in _QWEN_SHARED}
    other = [n for n in all_names if n.startswith("mtp.") and n not in _QWEN_SHARED]
    by_k: dict[int, dict[str, str]] = {}
    for name in other:
        m = re.match(r"^mtp\.layers\.(\d+)\.(.+)$", name)
        if m:
            by_k.setdefault(int(m.group(1)), {})[m.group(2)] = name
        else:  # another shared mtp.* tensor: kept under its own name (minus mtp.)
            shared[name[len("mtp.") :]] = name
    if not by_k and shared:
        by_k[0] = {}
    return [
        MtpHead("qwen3_next", k, None, "mtp.", {**shared, **by_k[k]}, key, declared)
        for k in sorted(by_k)
    ]


def find_mtp_heads(ckpt: Checkpoint) -> list[MtpHead]:
    """The MTP heads a target carries, from headers (and the config's layer count): [] when
    none. A head the config declares but whose tensors are absent is not listed (inspect
    says so from `mtp_count`)."""
    cfg = ckpt.config
    key, declared = _declared(cfg)
    n_layers = text_config(cfg).get("num_hidden_layers")
    heads: list[MtpHead] = []
    if any(n.startswith("mtp.") for n in ckpt.names()):
        heads += _qwen_heads(ckpt, declared, key)
    if isinstance(n_layers, int) and not isinstance(n_layers, bool):
        heads += _deepseek_heads(ckpt, n_layers, declared, key)
    return heads
