"""PEagleSpec: the canonical description of a P-EAGLE drafter (torch-free).

Readers (read.py) produce it, writers and the torch module (methods/peagle/model.py) consume
it (docs/formats.md "P-EAGLE drafters").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eagle3kit.core.errors import bad
from eagle3kit.core.spec import DraftSpec

MASK_HIDDEN = "mask_hidden"  # the learned state of the parallel slots


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@dataclass(frozen=True)
class PEagleSpec:
    """A P-EAGLE drafter: an EAGLE-3 drafter (`draft`, its first layer and shared tensors, in
    the canonical EAGLE-3 names) with `num_hidden_layers` layers, a mask token and the learned
    `mask_hidden` [1, 1, n_aux * H_target] that stands in for the target's features in the
    parallel slots. Layers 1.. are standard decoder layers (input width H, no hidden_norm),
    canonical names `layers.{i}.*`; layer 0 is `midlayer.*` as in EAGLE-3."""

    draft: DraftSpec
    num_hidden_layers: int
    mask_token_id: int
    layout: str = "speculators"  # speculators | vllm
    token_key: str = "mask_token_id"  # mask_token_id | pard_token | ptd_token_id
    num_speculative_tokens: int | None = None  # K, when the config records it
    mask_hidden_shape: tuple[int, ...] | None = None  # as stored (None: absent)

    def __post_init__(self) -> None:
        if self.num_hidden_layers < 1:
            raise bad(
                "PEagleSpec", f"num_hidden_layers: expected >= 1, found {self.num_hidden_layers}"
            )

    @property
    def aux_layers(self) -> tuple[int, ...] | None:
        """The h-indices its fc reads (its EAGLE-3 layer's)."""
        return self.draft.aux_layers

    @property
    def verifier(self) -> str | None:
        return self.draft.verifier

    @property
    def mask_hidden_size(self) -> int:
        return self.draft.fc_in_features

    def extra_layer_shapes(self, i: int) -> dict[str, tuple[int, ...]]:
        """Layer i >= 1: q/k/v read the H-wide stream (layer 0 reads cat(embed, hidden), 2H)."""
        d = self.draft
        h, it = d.hidden_size, d.intermediate_size
        p = f"layers.{i}."
        shapes = {
            p + "self_attn.q_proj.weight": (d.q_size, h),
            p + "self_attn.k_proj.weight": (d.kv_size, h),
            p + "self_attn.v_proj.weight": (d.kv_size, h),
            p + "self_attn.o_proj.weight": (h, d.o_in_features),
            p + "mlp.gate_proj.weight": (it, h),
            p + "mlp.up_proj.weight": (it, h),
            p + "mlp.down_proj.weight": (h, it),
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
        }
        if d.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (d.head_dim,)
            shapes[p + "self_attn.k_norm.weight"] = (d.head_dim,)
        return shapes

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = dict(self.draft.expected_shapes())
        for i in range(1, self.num_hidden_layers):
            shapes.update(self.extra_layer_shapes(i))
        shapes[MASK_HIDDEN] = (1, 1, self.mask_hidden_size)
        return shapes

    def accepts_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        """Whether a stored tensor of this shape is the canonical tensor `name`: any view of
        mask_hidden's n_aux x H_target values (vLLM loads it with `view(1, -1)`)."""
        if name == MASK_HIDDEN:
            return _numel(shape) == self.mask_hidden_size
        return tuple(shape) == self.expected_shapes().get(name)

    def required_tensors(self) -> tuple[str, ...]:
        extra = tuple(
            n for i in range(1, self.num_hidden_layers) for n in self.extra_layer_shapes(i)
        )
        return self.draft.required_tensors() + extra + (MASK_HIDDEN,)

    def to_json(self) -> dict[str, Any]:
        return {
            "draft": self.draft.to_json(),
            "num_hidden_layers": self.num_hidden_layers,
            "mask_token_id": self.mask_token_id,
            "layout": self.layout,
            "token_key": self.token_key,
            "num_speculative_tokens": self.num_speculative_tokens,
            "mask_hidden_shape": list(self.mask_hidden_shape) if self.mask_hidden_shape else None,
        }
