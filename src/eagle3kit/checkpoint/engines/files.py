"""Whole-file refusals by engine and release: what an engine refuses before (or instead of)
reading a drafter the way `checkpoint/engines/rules.py`'s capture and flag rules describe.

Data, re-exported by `checkpoint.engines` (import them from there). Each rule names its
upstream source and the releases it was seen in by benchmarks/engine_check.py (vLLM 0.21.0 and
0.33.0, SGLang 0.5.23). Where a rule changed between the two vLLM releases checked and the
release of the change is not pinned, it is taken to start at 0.33 (the first release checked
to have it) and `VERSION_NOTES` in rules.py says the change lies somewhere in 0.22 to 0.33.
"""

from __future__ import annotations

from typing import Any

Version = tuple[int, ...]


def from_release(version: Version | None, since: Version) -> bool:
    """`version` (None: the latest rules) is `since` or newer."""
    return version is None or version >= since


# Config keys an engine's config parsing needs before it looks at the architecture. SGLang
# reads the drafter's config.json with transformers' AutoConfig (sglang 0.5.23
# srt/utils/hf_transformers/config.py get_config, its "hf" parser), which refuses a config
# with no top-level model_type: "Unrecognized model in DIR. Should have a `model_type` key in
# its config.json" (seen by benchmarks/engine_check.py on every speculators-layout file:
# Eagle3Speculator keeps model_type inside transformer_layer_config only).
CONFIG_KEYS: dict[str, tuple[tuple[str, ...], str]] = {
    "sglang": (("model_type",), "sglang srt/utils/hf_transformers/config.py get_config"),
}


def config_refusal(engine: str, config: dict[str, Any]) -> tuple[str, str] | None:
    """(missing key, source) when `engine`'s config parsing refuses this drafter config."""
    keys, source = CONFIG_KEYS.get(engine, ((), ""))
    missing = [k for k in keys if not isinstance(config.get(k), str) or not config.get(k)]
    return (missing[0], source) if missing else None


# vLLM rewrites a draft config whose model_type is one of these into its DeepSeek MTP model
# (config/speculative.py SpeculativeConfig.hf_config_override: model_type -> deepseek_mtp,
# architectures -> [DeepSeekMTPModel]), so an EAGLE-3 MLA drafter with it is refused at config
# time ("Model architectures ['Eagle3DeepSeekMTPModel'] are not supported"; engine_check on
# 0.21.0 and 0.33.0 alike: every release modelled). Not a rule a file can follow, an upstream
# defect: `convert --to vllm` writes `VLLM_MLA_MODEL_TYPE` instead, which vLLM parses with the
# same DeepseekV3Config (transformers_utils/config.py, kimi_k2="DeepseekV3Config") and leaves
# alone.
VLLM_MTP_MODEL_TYPES = ("deepseek_v3", "deepseek_v32", "glm_moe_dsa")
VLLM_MLA_MODEL_TYPE = "kimi_k2"
VLLM_MTP_SOURCE = "vllm 0.21/0.33 config/speculative.py SpeculativeConfig.hf_config_override"

# A full-vocabulary drafter file carrying d2t (an identity map). vLLM <= 0.21 always registers
# draft_id_to_target_id, zero-initialised, and maps draft id i to target id i + map[i] in
# compute_logits (0.21.0 models/llama_eagle3.py Eagle3LlamaForCausalLM, deepseek_eagle3.py
# alike), so such a file loads,
# and one without d2t leaves the map at zeros: the identity, right on a full vocabulary. vLLM
# PR #53458 ("Only create draft_id_to_target_id when draft vocab differs", merged 2026-08-23)
# registers it only when draft_vocab_size != the target's vocabulary, while load_weights still
# renames a file's d2t to it, so the file fails to load ("There is no module or parameter named
# 'draft_id_to_target_id'"; engine_check on 0.33.0). Its release is not pinned: after 0.21.0,
# by 0.33.0.
VLLM_FULL_VOCAB_D2T_SINCE: Version = (0, 33)
VLLM_FULL_VOCAB_D2T_SOURCE = (
    "vLLM PR #53458; vllm 0.33 models/llama_eagle3.py Eagle3LlamaForCausalLM.load_weights"
)


def vllm_refuses_full_vocab_d2t(version: Version | None) -> bool:
    return from_release(version, VLLM_FULL_VOCAB_D2T_SINCE)


# `vllm serve DRAFTER` on a speculators file whose verifier (speculators_config.verifier
# .name_or_path) is an existing local path: vLLM 0.33 refuses it, serving the verifier a
# speculators file names only when that is a Hub repo id (transformers_utils/config.py
# maybe_override_with_speculators: "Speculators verifier must name a remote model
# repository"); vLLM 0.21.0's maybe_override_with_speculators takes the path as the target and
# serves it (engine_check, `direct_serve`). The release of the change is not pinned: after
# 0.21.0, by 0.33.0.
VLLM_DIRECT_SERVE_SINCE: Version = (0, 33)
VLLM_DIRECT_SERVE_SOURCE = "vllm 0.33 transformers_utils/config.py maybe_override_with_speculators"


def vllm_refuses_local_verifier(version: Version | None) -> bool:
    return from_release(version, VLLM_DIRECT_SERVE_SINCE)
