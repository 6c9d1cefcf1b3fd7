"""A target's output head alone: its final norm and lm_head, read from its safetensors by
header (`eagle3kit.checkpoint.io.tensor_read.read_tensor`), nothing else of the model.

Engine capture gets the last decoder layer's output *before* the final norm from the engine
(vLLM's `extract_hidden_states` id L) and turns it into next-token logits here:

    logits = lm_head(rmsnorm(h_L)),  rmsnorm(x) = w * (x / sqrt(mean(x^2) + eps))

with the normalisation in float32 and the product in the stored dtype of the weights, as
transformers' Llama/DeepSeek-V3 RMSNorm does. Targets whose head does more (logit soft-capping,
a logit scale, a LayerNorm with a bias) are refused rather than approximated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from eagle3kit.checkpoint.target_slim import EMBED_NAMES, HEAD_NAMES, NORM_NAMES
from eagle3kit.checkpoint.target_slim import first_listed as _first
from eagle3kit.core.errors import bad

_REFUSED = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's config (a multimodal wrapper's ``text_config``, else the config)."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def _int(cfg: dict[str, Any], key: str, where: str) -> int:
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise bad(where, f"{key}: expected a positive int, found {v!r}")
    return v


@dataclass
class TargetShape:
    """What engine capture needs to know of a target, from its config.json alone."""

    source: str
    config: dict[str, Any]
    num_layers: int
    hidden_size: int
    dtype: str | None  # the config's torch_dtype ("bfloat16" ...), None when it names none

    @property
    def model_type(self) -> str | None:
        return text_config(self.config).get("model_type") or self.config.get("model_type")


def target_shape(ckpt: Any) -> TargetShape:
    """num_hidden_layers, hidden_size and dtype of a checkpoint (headers + config only)."""
    cfg = text_config(ckpt.config)
    where = ckpt.config_file
    dt = cfg.get("torch_dtype") or cfg.get("dtype") or ckpt.config.get("torch_dtype")
    return TargetShape(
        ckpt.source,
        ckpt.config,
        _int(cfg, "num_hidden_layers", where),
        _int(cfg, "hidden_size", where),
        dt if isinstance(dt, str) else None,
    )


class OutputHead:
    """Final RMSNorm + lm_head of a target, loaded alone: ``logits(h_last_prenorm)``."""

    def __init__(
        self, ckpt: Any, *, device: str | torch.device = "cpu", dtype: str | None = None
    ) -> None:
        """`dtype`: the dtype the engine serves in (its --dtype), the weights' own by default."""
        from eagle3kit.checkpoint.io.tensor_read import read_tensor

        self.shape = target_shape(ckpt)
        cfg = text_config(ckpt.config)
        for key in _REFUSED:
            if cfg.get(key) not in (None, 0, 0.0, 1, 1.0):
                raise bad(
                    ckpt.config_file,
                    f"{key}: {cfg[key]!r}; engine capture applies only norm + lm_head to the "
                    "last hidden state, and this head does more",
                )
        norm = _first(ckpt, NORM_NAMES)
        head = _first(ckpt, HEAD_NAMES)
        if head is None and (
            cfg.get("tie_word_embeddings") or ckpt.config.get("tie_word_embeddings")
        ):
            head = _first(ckpt, EMBED_NAMES)
        if norm is None or head is None:
            missing = "final norm " + " / ".join(NORM_NAMES) if norm is None else "lm_head"
            raise bad(
                ckpt.source, f"expected the target's {missing} in its safetensors, found none"
            )
        self.norm_name, self.head_name = norm, head
        self.eps = float(cfg.get("rms_norm_eps") or cfg.get("layer_norm_epsilon") or 1e-6)
        dt = getattr(torch, dtype) if dtype else None
        self.norm_weight = read_tensor(ckpt, norm).to(device, dt)  # [H]
        self.lm_head = read_tensor(ckpt, head).to(device, dt)  # [V, H]
        H = self.shape.hidden_size
        if (
            tuple(self.norm_weight.shape) != (H,)
            or self.lm_head.ndim != 2
            or self.lm_head.shape[1] != H
        ):
            raise bad(
                ckpt.source,
                f"{norm} / {head}: expected shapes [{H}] / [V, {H}], found "
                f"{list(self.norm_weight.shape)} / {list(self.lm_head.shape)}",
            )

    @property
    def vocab_size(self) -> int:
        return int(self.lm_head.shape[0])

    @property
    def device(self) -> torch.device:
        return self.lm_head.device

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h [..., H] (the last layer's output before the final norm) -> logits [..., V]."""
        dt = self.lm_head.dtype
        x = h.to(self.device, torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # [..., H]
        x = self.norm_weight * x.to(self.norm_weight.dtype)  # [..., H]
        return torch.nn.functional.linear(x.to(dt), self.lm_head)  # [..., V]
