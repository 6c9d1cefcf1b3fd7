"""DFlashSpec: the canonical description of a DFlash block drafter (torch-free).

Readers (read.py) produce it, writers and the torch module (methods/dflash/model.py) consume
it; the module's parameter names equal the canonical tensor names below (docs/formats.md
"DFlash drafters").

Layer-index conventions (docs/formats.md "DFlash layer ids"). h[k] is Hugging Face
`output_hidden_states[k]`, the input of decoder layer k (h[0] = embeddings):
- z-lab `dflash_config.target_layer_ids`: id z names the OUTPUT of layer z, i.e. h[z + 1]
  (z-lab dflash/model.py `extract_context_feature`, offset 1). DFlashSpec keeps these.
- speculators `aux_hidden_state_layer_ids`: the h-index, i.e. z + 1
  (speculators convert/dflash/converter.py).
- vLLM and SGLang capture "the stream entering layer i" = h[i]; each engine release maps the
  file's ids to capture points by its own rule (checkpoint/engines/methods.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from eagle3kit.core.errors import bad

# DFlash tensors (canonical = z-lab's names, which speculators' body shares), per layer i.
DFLASH_LAYER_TENSORS = (
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_proj.weight",
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.o_proj.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "mlp.gate_proj.weight",
    "mlp.up_proj.weight",
    "mlp.down_proj.weight",
)
DFLASH_SHARED_TENSORS = ("fc.weight", "hidden_norm.weight", "norm.weight")
# Optional vocabulary tensors: a reduced draft vocabulary brings lm_head + d2t (+ t2d); an
# embedding or full-vocabulary lm_head may be carried, else the target's are used.
DFLASH_VOCAB_TENSORS = ("embed_tokens.weight", "lm_head.weight", "d2t", "t2d")


@dataclass(frozen=True)
class DFlashSpec:
    """Shapes, block and layer ids of one DFlash drafter (a stack of Qwen3-style layers).

    `target_layer_ids` are in z-lab's convention (id z = output of target layer z = h[z+1]);
    `aux_layers` gives the h-indices. `layer_causal[i]` says whether draft layer i attends
    causally inside the block (False: bidirectional, DFlash's default), resolved as the
    reference does: `is_causal`, else `dflash_config.causal`, else sliding layers causal."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int  # the target's vocabulary (rows of the embedding the mask token indexes)
    draft_vocab_size: int  # rows of lm_head (= vocab_size unless a vocab map is carried)
    target_hidden_size: int
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]  # z-lab convention
    num_target_layers: int | None = None  # the target's decoder layers, when recorded
    sample_from_anchor: bool = False  # True: B proposals (slot 0 predicts too), else B - 1
    layer_causal: tuple[bool, ...] = ()
    layer_types: tuple[str, ...] | None = None
    sliding_window: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1000000.0
    rope_scaling: dict[str, Any] | None = field(default=None, hash=False)
    max_position_embeddings: int = 40960
    hidden_act: str = "silu"
    attention_bias: bool = False
    dtype: str = "bfloat16"
    layout: str = "zlab"  # zlab | speculators
    variant: str = "dflash"  # dflash | dflash2 | dspark | domino (only dflash is built here)
    architecture: str = "DFlashDraftModel"
    verifier: str | None = None
    tensors: tuple[str, ...] = ()  # canonical names present in the checkpoint
    # z-lab `dflash_config.input_embedding_scale`: the block's embeddings are multiplied by it
    input_embedding_scale: float = 1.0

    # what model/attention.inv_freq reads (a DraftSpec's rope fields): plain rope, no MLA
    is_mla = False

    def __post_init__(self) -> None:
        where = "DFlashSpec"
        if self.block_size < 2:
            raise bad(where, f"block_size: expected >= 2, found {self.block_size}")
        if not self.target_layer_ids or min(self.target_layer_ids) < 0:
            raise bad(
                where,
                f"target_layer_ids: expected non-empty ids >= 0, found {self.target_layer_ids}",
            )
        if self.layer_causal and len(self.layer_causal) != self.num_hidden_layers:
            raise bad(
                where,
                f"layer_causal: expected {self.num_hidden_layers} entries, found "
                f"{len(self.layer_causal)}",
            )

    @property
    def aux_layers(self) -> tuple[int, ...]:
        """The h-indices the drafter was trained on (z + 1 for each z-lab id)."""
        return tuple(z + 1 for z in self.target_layer_ids)

    @property
    def speculators_ids(self) -> tuple[int, ...]:
        """The ids speculators writes (`aux_hidden_state_layer_ids`): the h-indices."""
        return self.aux_layers

    @property
    def num_proposals(self) -> int:
        """Draft tokens one pass proposes: B - 1, or B with `sample_from_anchor`."""
        return self.block_size if self.sample_from_anchor else self.block_size - 1

    @property
    def fc_in_features(self) -> int:
        return len(self.target_layer_ids) * self.target_hidden_size

    @property
    def rope_dim(self) -> int:
        return self.head_dim

    @property
    def has_vocab_map(self) -> bool:
        """lm_head covers a reduced draft vocabulary mapped to the target's by d2t."""
        return self.draft_vocab_size != self.vocab_size

    @property
    def causal(self) -> tuple[bool, ...]:
        return self.layer_causal or (False,) * self.num_hidden_layers

    def layer_shapes(self, i: int) -> dict[str, tuple[int, ...]]:
        h, hd, i_ = self.hidden_size, self.head_dim, self.intermediate_size
        q, kv = self.num_attention_heads * hd, self.num_key_value_heads * hd
        p = f"layers.{i}."
        shapes = {
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, q),
            p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (i_, h),
            p + "mlp.up_proj.weight": (i_, h),
            p + "mlp.down_proj.weight": (h, i_),
        }
        if self.attention_bias:
            for n, size in (("q", q), ("k", kv), ("v", kv)):
                shapes[p + f"self_attn.{n}_proj.bias"] = (size,)
        return shapes

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every canonical tensor's shape (the vocabulary tensors included, though optional)."""
        h = self.hidden_size
        shapes: dict[str, tuple[int, ...]] = {
            "fc.weight": (h, self.fc_in_features),
            "hidden_norm.weight": (h,),
            "norm.weight": (h,),
        }
        for i in range(self.num_hidden_layers):
            shapes.update(self.layer_shapes(i))
        shapes["embed_tokens.weight"] = (self.vocab_size, h)
        shapes["lm_head.weight"] = (self.draft_vocab_size, h)
        shapes["d2t"] = (self.draft_vocab_size,)
        shapes["t2d"] = (self.vocab_size,)
        return shapes

    def accepts_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        """Whether a stored tensor of this shape is the canonical tensor `name`."""
        return tuple(shape) == self.expected_shapes().get(name)

    def required_tensors(self) -> tuple[str, ...]:
        """What a servable checkpoint must carry: the body, and with a reduced draft
        vocabulary its own lm_head and d2t. The embedding never, nor a full-vocabulary
        lm_head: speculators 0.9.0 saves neither (models/dflash/core.py
        `_keys_to_ignore_on_save`: embed_tokens always, lm_head unless `use_draft_vocab`) and
        vLLM shares the target's (qwen3_dflash.py `load_weights`, dflash/utils.py); vLLM
        raises on a reduced vocabulary without lm_head and d2t (qwen3_dspark.py)."""
        body = tuple(n for n in self.expected_shapes() if n not in DFLASH_VOCAB_TENSORS)
        return body + (("lm_head.weight", "d2t") if self.has_vocab_map else ())

    def replace(self, **changes: Any) -> DFlashSpec:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("target_layer_ids", "layer_causal", "layer_types", "tensors"):
            if d[k] is not None:
                d[k] = list(d[k])
        d["aux_layers"] = list(self.aux_layers)
        d["num_proposals"] = self.num_proposals
        return d
