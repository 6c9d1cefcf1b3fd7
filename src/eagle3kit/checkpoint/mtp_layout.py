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

from eagle3kit.checkpoint.safetensors_io import Checkpoint

MTP_COUNT_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
_QWEN_SHARED = {
    "mtp.pre_fc_norm_embedding.weight": "enorm.weight",
    "mtp.pre_fc_norm_hidden.weight": "hnorm.weight",
    "mtp.fc.weight": "eh_proj.weight",
    "mtp.norm.weight": "shared_head.norm.weight",
}
_DS_MARKERS = ("enorm.weight", "hnorm.weight", "eh_proj.weight")
_LAYER = re.compile(r"^((?:[\w.]*\.)?layers\.)(\d+)\.(.+)$")


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    t = config.get("text_config")
    return t if isinstance(t, dict) else config


def mtp_count(config: dict[str, Any]) -> int:
    """How many MTP layers the config declares (0 when none), top-level or in text_config."""
    for cfg in (config, text_config(config)):
        for key in MTP_COUNT_KEYS:
            v = cfg.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    return 0


def _count_key(config: dict[str, Any]) -> str | None:
    for prefix, cfg in (("", config), ("text_config.", text_config(config))):
        for key in MTP_COUNT_KEYS:
            if isinstance(cfg.get(key), int) and cfg.get(key):
                return prefix + key
    return None


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
    declared, key = mtp_count(cfg), _count_key(cfg)
    n_layers = text_config(cfg).get("num_hidden_layers")
    heads: list[MtpHead] = []
    if any(n.startswith("mtp.") for n in ckpt.names()):
        heads += _qwen_heads(ckpt, declared, key)
    if isinstance(n_layers, int) and not isinstance(n_layers, bool):
        heads += _deepseek_heads(ckpt, n_layers, declared, key)
    return heads
