"""convert of a P-EAGLE drafter between speculators' `peagle` layout and vLLM's native config
(the steps every method shares are checkpoint/method_convert.py's): the tensors are the same
in both layouts, only the config changes (speculators `peagle` <-> the config vLLM's
update_peagle builds from it), and mask_hidden's shape as each layout writes it.
"""

from __future__ import annotations

import copy
from typing import Any

from eagle3kit.checkpoint.io.raw_tensors import raw
from eagle3kit.checkpoint.method_convert import restored, stash
from eagle3kit.checkpoint.methods import MethodHeader
from eagle3kit.core import registry
from eagle3kit.methods.peagle.checkpoint.spec import MASK_HIDDEN, PEagleSpec
from eagle3kit.methods.peagle.checkpoint.write import native_arch

LAYOUTS = ("speculators", "vllm")
# P-EAGLE's drafter fields (vocab, sizes, EAGLE 3.1 norms) that both layouts keep at top level
_DRAFTER_KEYS = (
    "draft_vocab_size",
    "target_hidden_size",
    "norm_before_residual",
    "norm_before_fc",
    "fc_norm",
    "norm_output",
)
# keys of a vLLM-native P-EAGLE config that are not the Llama/Qwen3 layer's
_NATIVE_KEYS = (
    "architectures",
    *_DRAFTER_KEYS,
    "pard_token",
    "ptd_token_id",
    "mask_token_id",
    "eagle_aux_hidden_state_layer_ids",
    "eagle3kit",
)


def convert_to(
    head: MethodHeader,
    to: str,
    *,
    embed_from: str | None,
    verifier: str | None,
    dtype: str | None = None,
) -> tuple[dict[str, Any], list[Any], list[str]]:
    """(config, raw tensors, notes) of the drafter in layout `to` (it borrows no target
    tensor, so `dtype` casts nothing)."""
    return _peagle(head, to, verifier)


def launch_commands(spec: PEagleSpec, layout: str, draft: str, target: str | None) -> dict:
    """{engine: command} for the engines that serve it (vLLM, `eagle3` with
    `parallel_drafting`), at the K its config records (else 3)."""
    k = spec.num_speculative_tokens or 3
    lines = registry.launch_lines("peagle", k, target or "TARGET_MODEL", draft)
    return {e: line for e, line in lines.items() if line}


def _native_config(head: MethodHeader) -> dict[str, Any]:
    """The fields vLLM's update_peagle sets from a speculators `peagle` config, in a flat
    config named as vLLM looks one up (write.py native_arch)."""
    spec: PEagleSpec = head.spec
    src = head.ckpt.config
    layer = copy.deepcopy(src.get("transformer_layer_config") or {})
    qwen = layer.get("model_type") == "qwen3"
    cfg = {
        **layer,
        "architectures": [native_arch(qwen)],
    }
    for k in _DRAFTER_KEYS:
        if src.get(k) is not None:
            cfg[k] = src[k]
    cfg["pard_token"] = spec.mask_token_id
    if src.get("eagle_aux_hidden_state_layer_ids"):
        cfg["eagle_aux_hidden_state_layer_ids"] = src["eagle_aux_hidden_state_layer_ids"]
    return cfg


def _speculators_peagle_config(head: MethodHeader, verifier: str | None) -> dict[str, Any]:
    spec: PEagleSpec = head.spec
    src = head.ckpt.config
    layer = {k: copy.deepcopy(v) for k, v in src.items() if k not in _NATIVE_KEYS}
    k = spec.num_speculative_tokens or 3
    return {
        "architectures": ["PEagleSpeculator"],
        "speculators_model_type": "peagle",
        "transformer_layer_config": layer,
        **{f: src[f] for f in _DRAFTER_KEYS if f in src},
        "eagle_aux_hidden_state_layer_ids": list(spec.draft.aux_layers or []) or None,
        "mask_token_id": spec.mask_token_id,
        "embed_requires_grad": True,
        "speculators_config": {
            "algorithm": "peagle",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": k}],
            "verifier": {"name_or_path": verifier or spec.draft.verifier, "architectures": []},
        },
    }


def _peagle(head: MethodHeader, to: str, verifier: str | None):
    base = restored(head.ckpt.config, to)
    if base is None:
        cfg = _native_config(head) if to == "vllm" else _speculators_peagle_config(head, verifier)
        stash(cfg, head.layout, head.ckpt.config)
    else:
        cfg = base
    # mask_hidden's values as they are; its shape as each layout writes it: speculators
    # [1, 1, n x H_target] (a Parameter), vLLM-native [1, n x H_target] (NeMo AutoModel PR
    # #2376 writes that; vLLM loads either with view(1, -1))
    shape = {"vllm": (1, -1), "speculators": (1, 1, -1)}[to]
    tensors = []
    for name, info in head.ckpt.tensors.items():
        view = tuple(info.numel if d == -1 else d for d in shape) if name == MASK_HIDDEN else None
        tensors.append(raw(info, shape=view))
    return cfg, tensors, [f"tensors unchanged ({len(tensors)}); config rewritten for {to}"]
