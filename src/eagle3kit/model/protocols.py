"""What the library needs of a target and of a drafter, as protocols (typing.Protocol: any
object with these members fits; nothing inherits from them).

A target is held four ways:

    model.target.TargetModel        the Hugging Face model in this process (every member)
    live.capture.EngineTarget       a vLLM server's hidden states + the target's own head
                                    (`data capture --engine`): a RunningTarget
    train.setup.FeaturesTarget      config + input embedding read by header, to train from a
                                    feature store without loading the target: an EmbeddedTarget
    measure.probe_features.StoreTarget  a store's record of its target, for `probe` from
                                    stores: a Target

`Target` is what all four offer; `RunningTarget` adds what computing features needs
(`data.features.compute_features`, `data.store.capture`), `EmbeddedTarget` what sizing or
warm-starting a drafter needs (`Eagle3Drafter.for_target`, train setup). Decoding, which
needs the KV cache and the tokenizer, takes the `TargetModel` itself.

`Drafter` is what a decoder needs of a drafter: the EAGLE-3 module fits it, and so does any
other method's module that drafts over a draft vocabulary mapped by d2t. Its `method` names
its draft method, which picks the method's package parts (core/registry.py `part`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch


class TargetConfig(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


class Target(Protocol):
    """A target's shape: its config.json, vocabulary, layers, and the layers a drafter reads
    (aux_layers: h-indices, docs/ARCHITECTURE.md)."""

    @property
    def config(self) -> TargetConfig: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def aux_layers(self) -> tuple[int, ...]: ...


class TargetForward(Protocol):
    logits: torch.Tensor  # [B, T, V]
    aux: torch.Tensor  # [B, T, k*H]


class RunningTarget(Target, Protocol):
    """A target that runs on token batches: logits and the aux layers' hidden states."""

    @property
    def hidden_size(self) -> int: ...
    @property
    def device(self) -> torch.device: ...
    @property
    def dtype(self) -> torch.dtype: ...
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> TargetForward: ...
    def identity(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


class Weight(Protocol):
    weight: torch.Tensor


class EmbeddedTarget(Target, Protocol):
    """A target whose input embedding a drafter reuses ([V, H])."""

    @property
    def embed_tokens(self) -> Weight: ...


@dataclass(frozen=True)
class JsonConfig:
    """A config.json read as a dict, with the `to_dict()` a Hugging Face config has."""

    values: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.values)


@dataclass(frozen=True)
class Embedding:
    """An input embedding held as its weight ([V, H]), as `nn.Embedding` offers it."""

    weight: torch.Tensor


class DraftStep(Protocol):
    logits: torch.Tensor  # [B, T, Vd] over the draft vocabulary
    hidden: torch.Tensor  # [B, T, H], the next step's input


class Drafter(Protocol):
    """What a decoder needs of a drafter: one draft step over new positions (appended to its
    own cache), the draft -> target id map (target_id = draft_id + d2t[draft_id]), the dtype
    it takes its input states in, and whether its input embedding is loaded."""

    method: str  # its draft method's name (core/registry.py)
    d2t: torch.Tensor  # [Vd]
    embed_loaded: bool

    @property
    def dtype(self) -> torch.dtype: ...
    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor: ...
    def attach_target(self, target: EmbeddedTarget) -> None: ...
    def __call__(
        self,
        input_ids: torch.Tensor,
        hidden: torch.Tensor,
        cache: Any = None,
        position_ids: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        *,
        from_aux: bool | None = None,
    ) -> DraftStep: ...
