"""DSparkSpec: the canonical description of a DSpark drafter (torch-free): a DFlash backbone
(`DFlashSpec`, variant "dspark") and its two heads (docs/dspark.md "Checkpoints").

Facts (speculators 0.9.0 `models/dspark/model_definitions.py`, `config.py`; SpecForge
`specforge/modeling/draft/dspark.py` at a6b6b02; vLLM 0.33 `model_executor/models/qwen3_dspark.py`):
- `markov_head.markov_w1.weight` [V, r]: an embedding over the TARGET's vocabulary (the
  previous token's id);
- `markov_head.markov_w2.weight` [Vd, r]: r -> the draft vocabulary, no bias;
- gated head: `markov_head.gate_proj.{weight [r, H + r], bias [r]}`; rnn head:
  `markov_head.joint_proj.{weight [3r, 2r + H], bias [3r]}`;
- `confidence_head.proj.{weight [1, H + r] (H without confidence_head_with_markov), bias [1]}`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from eagle3kit.core.errors import bad
from eagle3kit.methods.dflash.checkpoint.spec import DFlashSpec

HEAD_TYPES = ("vanilla", "gated", "rnn")
LAYOUTS = ("speculators", "specforge")


@dataclass(frozen=True)
class DSparkSpec:
    """A DSpark drafter: `backbone` (its layout "speculators" or, for SpecForge's files,
    "zlab": the DFlash config layout they share) and the heads."""

    backbone: DFlashSpec
    markov_rank: int = 256
    markov_head_type: str = "vanilla"
    enable_confidence_head: bool = True
    confidence_head_with_markov: bool = True
    layout: str = "speculators"  # speculators | specforge

    def __post_init__(self) -> None:
        where = "DSparkSpec"
        if self.markov_rank < 0:
            raise bad(where, f"markov_rank: expected >= 0, found {self.markov_rank}")
        if self.markov_head_type not in HEAD_TYPES:
            raise bad(
                where,
                f"markov_head_type: expected one of {', '.join(HEAD_TYPES)}, "
                f"found {self.markov_head_type!r}",
            )
        if self.confidence_head_with_markov and self.enable_confidence_head:
            if self.markov_rank == 0:
                raise bad(where, "confidence_head_with_markov: expected markov_rank > 0")
        if self.layout not in LAYOUTS:
            raise bad(where, f"layout: expected one of {LAYOUTS}, found {self.layout!r}")

    # the backbone's, as every generic reader of a drafter's spec asks them
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.backbone, name)

    @property
    def with_markov_confidence(self) -> bool:
        return self.enable_confidence_head and self.confidence_head_with_markov

    def head_shapes(self) -> dict[str, tuple[int, ...]]:
        b, r = self.backbone, self.markov_rank
        h, out = b.hidden_size, {}
        if r > 0:
            out["markov_head.markov_w1.weight"] = (b.vocab_size, r)
            out["markov_head.markov_w2.weight"] = (b.draft_vocab_size, r)
            if self.markov_head_type == "gated":
                out["markov_head.gate_proj.weight"] = (r, h + r)
                out["markov_head.gate_proj.bias"] = (r,)
            elif self.markov_head_type == "rnn":
                out["markov_head.joint_proj.weight"] = (3 * r, 2 * r + h)
                out["markov_head.joint_proj.bias"] = (3 * r,)
        if self.enable_confidence_head:
            out["confidence_head.proj.weight"] = (
                1,
                h + (r if self.confidence_head_with_markov else 0),
            )
            out["confidence_head.proj.bias"] = (1,)
        return out

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        return {**self.backbone.expected_shapes(), **self.head_shapes()}

    def accepts_shape(self, name: str, shape: tuple[int, ...]) -> bool:
        return tuple(shape) == self.expected_shapes().get(name)

    def required_tensors(self) -> tuple[str, ...]:
        """The backbone's (lm_head + d2t only with a reduced vocabulary: docs/dflash.md) and
        every head tensor its config declares."""
        return self.backbone.required_tensors() + tuple(self.head_shapes())

    def replace(self, **changes: Any) -> DSparkSpec:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "backbone": self.backbone.to_json(),
            "markov_rank": self.markov_rank,
            "markov_head_type": self.markov_head_type,
            "enable_confidence_head": self.enable_confidence_head,
            "confidence_head_with_markov": self.confidence_head_with_markov,
            "layout": self.layout,
        }
