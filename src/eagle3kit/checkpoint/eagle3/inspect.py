"""What `inspect` says about an EAGLE-3 drafter's tensors: each one's role in words, the
drafter-layer variant its norm flags name, its vocabulary map checked, the table's order."""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.core.spec import NORM_FLAGS, DraftSpec


def _attention_roles(spec: DraftSpec) -> dict[str, str]:
    """Roles of the midlayer.self_attn.* weights, MHA or MLA."""
    h2, n, pre = 2 * spec.hidden_size, spec.num_attention_heads, "midlayer.self_attn."
    if not spec.is_mla:
        out = {
            f"{pre}{x}_proj.weight": f"{x}_proj: cat(embed, hidden) {h2} -> {heads}x{spec.head_dim}"
            for x, heads in (
                ("q", n),
                ("k", spec.num_key_value_heads),
                ("v", spec.num_key_value_heads),
            )
        }
        out[pre + "o_proj.weight"] = f"o_proj: {n}x{spec.head_dim} -> {spec.hidden_size}"
        return out
    nope, rope, v = spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
    ql, kvl = spec.q_lora_rank, spec.kv_lora_rank
    heads_qk = f"{n}x({nope} nope + {rope} rope)"
    return {
        pre + "q_proj.weight": f"q_proj (MLA, no q latent): cat(embed, hidden) {h2} -> {heads_qk}",
        pre + "q_a_proj.weight": f"q_a_proj (MLA): cat(embed, hidden) {h2} -> q latent {ql}",
        pre + "q_a_layernorm.weight": f"q_a_layernorm (MLA): RMSNorm of the q latent ({ql})",
        pre + "q_b_proj.weight": f"q_b_proj (MLA): q latent {ql} -> {heads_qk}",
        pre + "kv_a_proj_with_mqa.weight": f"kv_a_proj_with_mqa (MLA): cat(embed, hidden) {h2} -> "
        f"kv latent {kvl} + one shared rope key {rope}",
        pre + "kv_a_layernorm.weight": f"kv_a_layernorm (MLA): RMSNorm of the kv latent ({kvl})",
        pre + "kv_b_proj.weight": f"kv_b_proj (MLA): kv latent {kvl} -> "
        f"{n}x({nope} key nope + {v} value)",
        pre + "o_proj.weight": f"o_proj (MLA): {n}x{v} values -> {spec.hidden_size}",
    }


def tensor_role(name: str, spec: DraftSpec) -> str:
    """What a canonical tensor does, in words."""
    h, v, vd = spec.hidden_size, spec.vocab_size, spec.draft_vocab_size
    aux = (
        f"layers {list(spec.aux_layers)}"
        if spec.aux_layers
        else "engine-default layers (2, L//2, L-3)"
    )
    roles = {
        "fc.weight": f"fc: 3 aux hidden states ({aux}) -> {h}",
        "lm_head.weight": f"lm_head: draft vocab {vd} of target vocab {v}",
        "d2t": f"d2t: draft id -> target id offsets ({vd} entries)",
        "t2d": f"t2d: which of the {v} target ids are in the draft vocab",
        "embed_tokens.weight": f"embed_tokens: token embedding [{v}, {h}] "
        "(engines use the target's)",
        "norm.weight": "norm: final RMSNorm before lm_head",
        "input_norm.weight": "input_norm: RMSNorm over the concatenated aux states "
        "(norm_before_fc)",
        "midlayer.input_layernorm.weight": "input_layernorm: RMSNorm of the token embedding",
        "midlayer.hidden_norm.weight": "hidden_norm: RMSNorm of the incoming hidden state",
        "midlayer.post_attention_layernorm.weight": "post_attention_layernorm: "
        "RMSNorm before the MLP",
        "midlayer.mlp.gate_proj.weight": f"mlp gate: {h} -> {spec.intermediate_size}",
        "midlayer.mlp.up_proj.weight": f"mlp up: {h} -> {spec.intermediate_size}",
        "midlayer.mlp.down_proj.weight": f"mlp down: {spec.intermediate_size} -> {h}",
        **_attention_roles(spec),
    }
    if name in roles:
        return roles[name]
    if name.endswith(".bias") and name[: -len("bias")] + "weight" in roles:
        return roles[name[: -len("bias")] + "weight"].split(":")[0] + ": bias"
    if name.startswith("fc_norm."):
        return "fc_norm: RMSNorm of one aux hidden state before fc"
    if name.endswith(("q_norm.weight", "k_norm.weight")):
        return "per-head RMSNorm (Qwen3-style qk_norm)"
    return "not part of an EAGLE-3 drafter"


def eagle_variant(spec: DraftSpec) -> str:
    """Name the drafter-layer variant from its norm flags (docs/formats.md "Norm flags").

    "EAGLE 3.1" means two things: vLLM/TorchSpec's fc_norm + norm_output, and speculators'
    (PR #610) norm_before_fc + norm_output."""
    on = [f for f in NORM_FLAGS if getattr(spec, f)]
    extra = [f for f in on if f not in ("fc_norm", "norm_before_fc", "norm_output")]
    tail = f", plus {', '.join(extra)}" if extra else ""
    if spec.norm_output and spec.fc_norm and not spec.norm_before_fc:
        return f"EAGLE 3.1 (vLLM/TorchSpec: fc_norm + norm_output{tail})"
    if spec.norm_output and spec.norm_before_fc and not spec.fc_norm:
        return f"EAGLE 3.1 (speculators PR #610: norm_before_fc + norm_output{tail})"
    if not on:
        return "EAGLE-3 (original layer: no norm flags)"
    return f"EAGLE-3 with {', '.join(on)} (not one of the two EAGLE 3.1 variants)"


def vocab_map_summary(ckpt: Checkpoint, spec: DraftSpec, names: dict[str, str]) -> dict[str, Any]:
    """Read the small d2t/t2d tensors, summarise and check them (model/vocab.py); the only tensor
    bytes we read. An index tensor too large to be one is refused (read_small_tensor), never
    skipped. `problems`: [{code, message}] from vocab_problems, [] when the pair is valid."""
    import numpy as np

    from eagle3kit.core.vocab import summarise_vocab, vocab_problems

    out: dict[str, Any] = {}
    d2t = t2d = None
    if "d2t" in names:
        d2t = ckpt.read_small_tensor(names["d2t"]).reshape(-1)
        out["d2t"] = summarise_vocab(d2t, spec.vocab_size)
        out["_d2t_targets"] = np.arange(d2t.shape[0], dtype=np.int64) + d2t.astype(np.int64)
    if "t2d" in names:
        t2d = ckpt.read_small_tensor(names["t2d"]).reshape(-1)
        out["t2d"] = {"length": int(t2d.shape[0]), "count": int(t2d.astype(bool).sum())}
        out["_t2d"] = t2d.astype(bool)
    if d2t is not None:
        problems = vocab_problems(d2t, t2d, spec.vocab_size)
        out["problems"] = [{"code": c, "message": m} for c, m in problems]
    return out


_ORDER = [
    "fc.",
    "input_norm",
    "fc_norm",
    "midlayer.input_layernorm",
    "midlayer.hidden_norm",
    "midlayer.self_attn.q_",
    "midlayer.self_attn.k",
    "midlayer.self_attn.v",
    "midlayer.self_attn",
    "midlayer.post_attention_layernorm",
    "midlayer.mlp",
    "norm.",
    "lm_head",
    "d2t",
    "t2d",
    "embed_tokens",
]


def order(name: str) -> tuple[int, str]:
    """The sort key of a canonical tensor name in inspect's table (the drafter's data flow)."""
    for i, p in enumerate(_ORDER):
        if name.startswith(p):
            return i, name
    return len(_ORDER), name
