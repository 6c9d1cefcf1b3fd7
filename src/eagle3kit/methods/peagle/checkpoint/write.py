"""The writer of P-EAGLE drafters from torch tensors under their canonical names (the
module's state dict), in `spec.layout` (speculators' `peagle` or vLLM's native config). torch
is imported on call only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.eagle3.layouts import canonical_to_file, config_for, set_layer_count
from eagle3kit.checkpoint.method_write import check_tensors, write_dir
from eagle3kit.core.errors import bad
from eagle3kit.methods.peagle.checkpoint.read import METHOD
from eagle3kit.methods.peagle.checkpoint.spec import MASK_HIDDEN, PEagleSpec


def native_arch(qwen3: bool) -> str:
    """The architecture of a flat (vLLM-native) P-EAGLE config: a name vLLM's EAGLEConfig keeps
    as it is and the registry maps to the EAGLE-3 model that drafts in parallel (vllm 0.32/0.33
    model_executor/models/registry.py). Not `Peagle*ForCausalLM`: that is the name
    update_peagle gives a speculators config, and a flat config of that name is looked up as
    `Eagle3Peagle...`, which no release registers (checkpoint/engines/methods.py
    flat_config_arch)."""
    return "Eagle3Qwen3ForCausalLM" if qwen3 else "Eagle3LlamaForCausalLM"


def peagle_config(spec: PEagleSpec, verifier: str | None = None) -> dict[str, Any]:
    """A P-EAGLE config in `spec.layout`: speculators `peagle`, or vLLM's native form (the
    fields vLLM's own update_peagle sets: a flat Llama config with pard_token, named as vLLM
    looks a flat config up)."""
    d = spec.draft
    if spec.layout == "speculators":
        cfg = config_for(
            d, "vllm", verifier=verifier, speculative_tokens=spec.num_speculative_tokens or 3
        )
        cfg["architectures"] = ["PEagleSpeculator"]
        cfg["speculators_model_type"] = "peagle"
        cfg["speculators_config"]["algorithm"] = "peagle"
        set_layer_count(cfg["transformer_layer_config"], spec.num_hidden_layers)
        cfg["mask_token_id"] = spec.mask_token_id
        cfg["embed_requires_grad"] = True
        return cfg
    cfg = config_for(d, "sglang")
    cfg.pop("eagle_config", None)
    cfg["architectures"] = [native_arch(d.qk_norm)]
    set_layer_count(cfg, spec.num_hidden_layers)
    cfg["eagle_aux_hidden_state_layer_ids"] = list(d.aux_layers or ())
    cfg[spec.token_key if spec.token_key != "mask_token_id" else "pard_token"] = spec.mask_token_id
    return cfg


def save_peagle(
    out: str | Path, spec: PEagleSpec, tensors: dict[str, Any], verifier: str | None = None
) -> Path:
    """A P-EAGLE drafter in `spec.layout`; names as vLLM and speculators store them
    (`layers.{i}.*`), mask_hidden [1, 1, N] (speculators) or [1, N] (vLLM-native)."""
    out = Path(out)
    check_tensors(out, spec, tensors, "save_peagle")
    if MASK_HIDDEN not in tensors:
        raise bad("save_peagle", "mask_hidden: missing (vLLM refuses a P-EAGLE drafter without it)")
    stored = {canonical_to_file(n, "vllm"): t for n, t in tensors.items()}
    view = (1, 1, -1) if spec.layout == "speculators" else (1, -1)
    stored[MASK_HIDDEN] = stored[MASK_HIDDEN].reshape(view)
    meta = {"eagle3kit_method": METHOD, "eagle3kit_layout": spec.layout}
    write_dir(out, peagle_config(spec, verifier), stored, meta)
    return out
