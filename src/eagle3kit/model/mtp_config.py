"""Where a target declares and stores its MTP layers, from its config alone (no torch):
the layout (DeepSeek-V3 ``model.layers.{L}.*`` or Qwen3-Next ``mtp.*``), the count, the prefix
(docs/mtp.md). model/target.py uses it to leave those tensors to model/mtp.py."""

from __future__ import annotations

from typing import Any

STYLES = ("deepseek", "qwen3_next")
_QWEN_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_moe")


def text_config(config: Any) -> Any:
    """The language model's config (``text_config`` of a multimodal wrapper, else itself)."""
    get = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
    inner = get("text_config")
    return inner if inner is not None else config


def _get(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def mtp_style(config: Any) -> str:
    """ "qwen3_next" for Qwen3-Next / Qwen3.5 configs (``mtp.*``), else "deepseek"."""
    return "qwen3_next" if _get(text_config(config), "model_type") in _QWEN_TYPES else "deepseek"


def mtp_layers(config: Any) -> int:
    """How many MTP layers the config declares (``num_nextn_predict_layers``, or Qwen3.5's
    ``mtp_num_hidden_layers``; under ``text_config`` too); 0 when none."""
    for c in (text_config(config), config):
        for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
            n = _get(c, key)
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                return n
    return 0


def mtp_prefix(config: Any, index: int = 0) -> str:
    """Where MTP layer ``index`` lives in the target's checkpoint."""
    if mtp_style(config) == "qwen3_next":
        return "mtp."
    return f"model.layers.{int(_get(text_config(config), 'num_hidden_layers')) + index}."


def drop_mtp_keys(info: dict[str, Any], config: Any) -> dict[str, Any]:
    """transformers' load account without the target's own MTP layers among its unexpected
    keys: transformers never loads them (an MTP head is read by ``load_mtp_head``)."""
    n = mtp_layers(config)
    if not n or not info.get("unexpected_keys"):
        return info
    prefixes = tuple({mtp_prefix(config, i) for i in range(n)})
    keep = [k for k in info["unexpected_keys"] if not str(k).startswith(prefixes)]
    return {**info, "unexpected_keys": keep}
