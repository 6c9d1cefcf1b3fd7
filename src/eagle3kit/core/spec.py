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

from eagle3kit.core.errors import bad

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
# The same roles in an MLA (DeepSeek-V3 latent attention) drafter: only self_attn differs.
MLA_ATTENTION_TENSORS = (
    "midlayer.self_attn.q_a_proj.weight",
    "midlayer.self_attn.q_a_layernorm.weight",
    "midlayer.self_attn.q_b_proj.weight",
    "midlayer.self_attn.kv_a_proj_with_mqa.weight",
    "midlayer.self_attn.kv_a_layernorm.weight",
    "midlayer.self_attn.kv_b_proj.weight",
    "midlayer.self_attn.o_proj.weight",
)
INDEX_TENSORS = ("d2t", "t2d")
OPTIONAL_TENSORS = ("embed_tokens.weight",)
# The drafter-layer flags (docs/formats.md "Norm flags"); qk_norm is a layer kind, not one of them.
NORM_FLAGS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
ATTENTION_KINDS = ("mha", "mla")


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
    # Attention kind. "mla": DeepSeek-V3 multi-head latent attention (Kimi-K2.5's MLA drafter):
    # q = q_b(q_a_layernorm(q_a(x))) (or q_proj(x) when q_lora_rank is None); the key/value
    # latent c = kv_a_layernorm(kv_a(x)[:kv_lora]) shared by all heads, k_rope = kv_a(x)[kv_lora:]
    # (one head, rotated); per head k = [kv_b(c)_nope, k_rope], v = kv_b(c)_v.
    attention: str = "mha"
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    rope_interleave: bool = True  # MLA: rope over adjacent pairs (DeepSeek's weight layout)
    model_type: str | None = None  # MLA: the config's model_type ("kimi_k2", "deepseek_v3")
    # Sliding-window attention: the decoder layer's query at position p sees keys at
    # positions > p - W only (config: layer_types ["sliding_attention"] + sliding_window W,
    # vLLM's LlamaAttention rule; docs/formats.md "Sliding-window drafters"). None: full.
    sliding_window: int | None = None

    def __post_init__(self) -> None:
        w = self.sliding_window
        if w is not None and (not isinstance(w, int) or isinstance(w, bool) or w < 1):
            raise bad("DraftSpec", f"sliding_window: expected an int >= 1 or None, found {w!r}")
        if self.attention not in ATTENTION_KINDS:
            raise bad("DraftSpec", f"attention: expected 'mha' or 'mla', found {self.attention!r}")
        if not self.is_mla:
            return
        dims = {
            "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "v_head_dim": self.v_head_dim,
            "q_lora_rank": self.q_lora_rank or 1,
        }
        for key, v in dims.items():
            if not isinstance(v, int) or v <= 0:
                raise bad(
                    "DraftSpec", f"{key}: expected a positive int for an MLA drafter, found {v!r}"
                )
        if self.qk_rope_head_dim % 2 or self.qk_nope_head_dim < 0:
            raise bad(
                "DraftSpec",
                f"qk_rope_head_dim/qk_nope_head_dim: expected an even rope part and nope >= 0, "
                f"found {self.qk_rope_head_dim}/{self.qk_nope_head_dim}",
            )
        if self.num_key_value_heads != self.num_attention_heads:
            raise bad(
                "DraftSpec",
                "num_key_value_heads: an MLA drafter has one per head "
                f"({self.num_attention_heads}), "
                f"found {self.num_key_value_heads}",
            )

    @property
    def num_aux(self) -> int:
        return 3

    @property
    def fc_in_features(self) -> int:
        return self.num_aux * self.target_hidden_size

    @property
    def is_mla(self) -> bool:
        return self.attention == "mla"

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width: head_dim (MHA), or nope + rope (MLA)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def rope_dim(self) -> int:
        """How many dims of each query/key head are rotated."""
        return self.qk_rope_head_dim if self.is_mla else self.head_dim

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.qk_head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def o_in_features(self) -> int:
        """o_proj's input width: heads x head_dim (MHA), heads x v_head_dim (MLA)."""
        return self.num_attention_heads * (self.v_head_dim if self.is_mla else self.head_dim)

    def attention_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes of the midlayer.self_attn.* tensors (input width 2H: cat(embed, hidden))."""
        h2, pre = 2 * self.hidden_size, "midlayer.self_attn."
        n, r, kv = self.num_attention_heads, self.q_lora_rank, self.kv_lora_rank
        if not self.is_mla:
            shapes = {
                pre + "q_proj.weight": (self.q_size, h2),
                pre + "k_proj.weight": (self.kv_size, h2),
                pre + "v_proj.weight": (self.kv_size, h2),
            }
        else:
            if r is None:
                shapes = {pre + "q_proj.weight": (self.q_size, h2)}
            else:
                shapes = {
                    pre + "q_a_proj.weight": (r, h2),
                    pre + "q_a_layernorm.weight": (r,),
                    pre + "q_b_proj.weight": (self.q_size, r),
                }
            shapes[pre + "kv_a_proj_with_mqa.weight"] = (kv + self.qk_rope_head_dim, h2)
            shapes[pre + "kv_a_layernorm.weight"] = (kv,)
            shapes[pre + "kv_b_proj.weight"] = (n * (self.qk_nope_head_dim + self.v_head_dim), kv)
        shapes[pre + "o_proj.weight"] = (self.hidden_size, self.o_in_features)
        if self.attention_bias and self.is_mla:  # as transformers' DeepseekV3Attention
            if r is not None:
                shapes[pre + "q_a_proj.bias"] = (r,)
            shapes[pre + "kv_a_proj_with_mqa.bias"] = (kv + self.qk_rope_head_dim,)
            shapes[pre + "o_proj.bias"] = (self.hidden_size,)
        elif self.attention_bias:
            shapes[pre + "q_proj.bias"] = (self.q_size,)
            shapes[pre + "k_proj.bias"] = (self.kv_size,)
            shapes[pre + "v_proj.bias"] = (self.kv_size,)
        return shapes

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape every canonical tensor must have under this spec."""
        h, i = self.hidden_size, self.intermediate_size
        shapes: dict[str, tuple[int, ...]] = {
            "fc.weight": (h, self.fc_in_features),
            **self.attention_shapes(),
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
        return shapes

    def trainable_tensors(self) -> tuple[str, ...]:
        """The weights every drafter of this attention kind has (flags' tensors aside)."""
        if not self.is_mla:
            return TRAINABLE_TENSORS
        attn = tuple(n for n in self.attention_shapes() if n.endswith(".weight"))
        keep = tuple(n for n in TRAINABLE_TENSORS if not n.startswith("midlayer.self_attn."))
        return keep[:1] + attn + keep[1:]

    def required_tensors(self) -> tuple[str, ...]:
        """Tensors a servable checkpoint must carry (embed_tokens is optional)."""
        base = self.trainable_tensors()
        flags = tuple(
            n
            for n in self.expected_shapes()
            if n not in base and n not in INDEX_TENSORS and n not in OPTIONAL_TENSORS
        )
        idx = ("d2t",) if self.draft_vocab_size != self.vocab_size else ()  # t2d: engines ignore it
        return base + flags + idx

    def replace(self, **changes: Any) -> DraftSpec:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("aux_layers", "aux_layers_raw", "tensors"):
            if d[k] is not None:
                d[k] = list(d[k])
        return d


def rope_from_config(cfg: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """rope_theta and rope_scaling (None when plain rope) from either the transformers 4
    spelling (`rope_theta`, `rope_scaling`) or the 5 one (`rope_parameters`)."""
    params = cfg.get("rope_parameters")
    theta = cfg.get("rope_theta")
    scaling = cfg.get("rope_scaling")
    if isinstance(params, dict):
        theta = params.get("rope_theta", theta)
        if params.get("rope_type", params.get("type", "default")) != "default":
            scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    if isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type")) in (
        None,
        "default",
    ):
        scaling = None
    return float(theta if theta is not None else 10000.0), scaling


def _default_mla_dims(hidden: int, heads: int) -> dict[str, Any]:
    """MLA dims for a target without its own, in DeepSeek-V3's proportions
    (H 7168, 128 heads: q_lora 1536 ~ H/4.7, kv_lora 512 = H/14, nope 128, rope 64, v 128)."""
    hd = max(2, hidden // heads)
    rope = max(2, (hd // 2) // 2 * 2)
    return {
        "q_lora_rank": max(16, hidden // 4),
        "kv_lora_rank": max(16, hidden // 8),
        "qk_nope_head_dim": hd,
        "qk_rope_head_dim": rope,
        "v_head_dim": hd,
    }


def spec_for_target(
    target_config: dict[str, Any],
    *,
    attention: str = "mha",
    draft_vocab_size: int | None = None,
    aux_layers: tuple[int, ...] | None = None,
    **overrides: Any,
) -> DraftSpec:
    """A fresh drafter's spec sized for a target (its config.json as a dict).

    H = the target's hidden size, the target's heads, MLP width, norm eps and rope. MHA:
    head_dim and kv heads as the target's (H / heads when it has none; one per head for an
    MLA target, whose own head_dim is its rope part). MLA: a DeepSeek-V3/Kimi target's own MLA
    dims and rope (yarn included), else `_default_mla_dims`. aux_layers default to
    (2, L//2, L-3); draft_vocab_size to the full vocabulary. `overrides` set any field."""
    where = "target config"
    cfg = target_config.get("text_config") or target_config
    if not isinstance(cfg, dict):
        raise bad(where, f"expected a config object, found {type(cfg).__name__}")
    vals = {}
    for key in ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads"):
        v = cfg.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise bad(where, f"{key}: expected a positive int, found {v!r}")
        vals[key] = v
    h, heads, vocab = vals["hidden_size"], vals["num_attention_heads"], vals["vocab_size"]
    target_is_mla = isinstance(cfg.get("kv_lora_rank"), int)
    theta, scaling = rope_from_config(cfg)
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    spec: dict[str, Any] = dict(
        hidden_size=h,
        intermediate_size=int(cfg.get("intermediate_size") or 4 * h),
        num_attention_heads=heads,
        num_key_value_heads=heads
        if target_is_mla
        else int(cfg.get("num_key_value_heads") or heads),
        head_dim=h // heads if target_is_mla else int(cfg.get("head_dim") or h // heads),
        vocab_size=vocab,
        draft_vocab_size=draft_vocab_size or vocab,
        target_hidden_size=h,
        rms_norm_eps=float(cfg.get("rms_norm_eps") or 1e-6),
        rope_theta=theta,
        rope_scaling=None if target_is_mla else scaling,  # yarn is tuned to the MLA rope part
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 2048),
        aux_layers=tuple(aux_layers or default_aux_layers(vals["num_hidden_layers"])),
        dtype=str(dtype).replace("torch.", ""),
        attention=attention,
    )
    if attention == "mla":
        spec.update(_mla_fields(cfg, h, heads, scaling if target_is_mla else None, target_is_mla))
    spec.update(overrides)
    return DraftSpec(**spec)


def _mla_fields(
    cfg: dict[str, Any], h: int, heads: int, scaling: dict[str, Any] | None, own: bool
) -> dict[str, Any]:
    """An MLA drafter's fields: an MLA target's own dims and rope (`own`), else
    `_default_mla_dims`; head_dim = nope + rope."""
    out: dict[str, Any] = {
        "num_key_value_heads": heads,
        "architecture": "Eagle3DeepseekV2ForCausalLM",
    }
    if own:
        keys = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        out.update({k: cfg.get(k) for k in keys})
        out["rope_scaling"] = scaling
        out["rope_interleave"] = bool(cfg.get("rope_interleave", True))
        out["model_type"] = cfg.get("model_type")
    else:
        out.update(_default_mla_dims(h, heads))
    out["head_dim"] = out["qk_nope_head_dim"] + out["qk_rope_head_dim"]
    return out
