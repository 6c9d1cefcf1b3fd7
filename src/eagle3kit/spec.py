"""DraftSpec: the one canonical description of an EAGLE-3 drafter.

Every format reader produces a DraftSpec and every writer consumes one. Conventions:
- `aux_layers` are indices into Hugging Face `output_hidden_states` (index i is the input of
  decoder layer i; index 0 is the embedding output). `None` means the checkpoint does not say,
  and each engine falls back to its default (`default_aux_layers`).
- `aux_convention` records how the ids written in the source file were read, so a report can
  say what the file literally contained.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

# The tensors of a drafter, by their canonical (SGLang) names.
TRAINABLE_TENSORS = (
    "fc.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.hidden_norm.weight",
    "midlayer.post_attention_layernorm.weight",
    "norm.weight",
    "lm_head.weight",
)
INDEX_TENSORS = ("d2t", "t2d")
OPTIONAL_TENSORS = ("embed_tokens.weight",)


def default_aux_layers(num_layers: int) -> tuple[int, int, int]:
    """EAGLE/vLLM/SGLang default aux layers for an L-layer target, in HF hidden-state indices."""
    return (2, num_layers // 2, num_layers - 3)


@dataclass(frozen=True)
class DraftSpec:
    """Shapes, hyper-parameters and flags of one EAGLE-3 drafter (one decoder layer)."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int  # the target's vocabulary
    draft_vocab_size: int
    target_hidden_size: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = field(default=None, hash=False)
    max_position_embeddings: int = 2048
    hidden_act: str = "silu"
    attention_bias: bool = False
    mlp_bias: bool = False
    aux_layers: tuple[int, ...] | None = None
    aux_convention: str = "hf"  # "hf": ids are HF indices; "sglang": ids were layer outputs (+1)
    aux_layers_raw: tuple[int, ...] | None = None  # the ids exactly as the file wrote them
    norm_before_residual: bool = False
    norm_before_fc: bool = False
    fc_norm: bool = False
    norm_output: bool = False  # speculators' Eagle 3.1: feed norm(h), not h, to the next step
    qk_norm: bool = False  # Qwen3-style per-head RMSNorm on q and k
    dtype: str = "bfloat16"
    tensors: tuple[str, ...] = ()  # canonical names present in the checkpoint
    verifier: str | None = None  # the target this drafter was trained for, when recorded
    architecture: str = "LlamaForCausalLMEagle3"

    @property
    def num_aux(self) -> int:
        return 3

    @property
    def fc_in_features(self) -> int:
        return self.num_aux * self.target_hidden_size

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape every canonical tensor must have under this spec."""
        h, i = self.hidden_size, self.intermediate_size
        shapes: dict[str, tuple[int, ...]] = {
            "fc.weight": (h, self.fc_in_features),
            "midlayer.self_attn.q_proj.weight": (self.q_size, 2 * h),
            "midlayer.self_attn.k_proj.weight": (self.kv_size, 2 * h),
            "midlayer.self_attn.v_proj.weight": (self.kv_size, 2 * h),
            "midlayer.self_attn.o_proj.weight": (h, self.q_size),
            "midlayer.mlp.gate_proj.weight": (i, h),
            "midlayer.mlp.up_proj.weight": (i, h),
            "midlayer.mlp.down_proj.weight": (h, i),
            "midlayer.input_layernorm.weight": (h,),
            "midlayer.hidden_norm.weight": (h,),
            "midlayer.post_attention_layernorm.weight": (h,),
            "norm.weight": (h,),
            "lm_head.weight": (self.draft_vocab_size, h),
            "d2t": (self.draft_vocab_size,),
            "t2d": (self.vocab_size,),
            "embed_tokens.weight": (self.vocab_size, h),
        }
        if self.norm_before_fc:  # one RMSNorm over cat(aux) before fc
            shapes["input_norm.weight"] = (self.fc_in_features,)
        if self.fc_norm:  # one RMSNorm per aux hidden state before fc
            for j in range(self.num_aux):
                shapes[f"fc_norm.{j}.weight"] = (self.target_hidden_size,)
        if self.qk_norm:
            shapes["midlayer.self_attn.q_norm.weight"] = (self.head_dim,)
            shapes["midlayer.self_attn.k_norm.weight"] = (self.head_dim,)
        if self.attention_bias:
            shapes["midlayer.self_attn.q_proj.bias"] = (self.q_size,)
            shapes["midlayer.self_attn.k_proj.bias"] = (self.kv_size,)
            shapes["midlayer.self_attn.v_proj.bias"] = (self.kv_size,)
        return shapes

    def required_tensors(self) -> tuple[str, ...]:
        """Tensors a servable checkpoint must carry (embed_tokens is optional)."""
        flags = tuple(
            n
            for n in self.expected_shapes()
            if n not in TRAINABLE_TENSORS and n not in INDEX_TENSORS and n not in OPTIONAL_TENSORS
        )
        idx = ("d2t",) if self.draft_vocab_size != self.vocab_size else ()  # t2d: engines ignore it
        return TRAINABLE_TENSORS + flags + idx

    def replace(self, **changes: Any) -> DraftSpec:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("aux_layers", "aux_layers_raw", "tensors"):
            if d[k] is not None:
                d[k] = list(d[k])
        return d
