"""Eagle3Drafter: the EAGLE-3 draft model as an nn.Module, built from a DraftSpec.

One draft step, per position t (docs/formats.md "The drafter in one paragraph"):

    h_t   = fc(cat(aux_low, aux_mid, aux_high))          on the first step  # [B, T, H]
          = the previous step's output hidden            on later steps     # [B, T, H]
    x     = cat(input_layernorm(embed(token_t)), hidden_norm(h_t))         # [B, T, 2H]
    a     = o_proj(attention(q_proj(x), k_proj(x), v_proj(x)))             # [B, T, H]
            (MLA drafters: DeepSeek-V3 latent attention instead; see model/attention.py)
    h     = residual + a,   residual = h_t (or hidden_norm(h_t) when norm_before_residual)
    h     = h + mlp(post_attention_layernorm(h))
    logits over the draft vocab = lm_head(norm(h));  next step's hidden = h (norm(h) if norm_output)

Parameter names equal our canonical (SGLang) tensor names, so `state_dict()` is a checkpoint.
Device and dtype are parameters; nothing here assumes CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from eagle3kit.checkpoint.eagle3.convert import TRAINING_ONLY
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.spec import DraftSpec, spec_for_target
from eagle3kit.model.attention import (  # noqa: F401  (re-exported: the drafter's public API)
    Attention,
    DraftCache,
    MLAAttention,
    RMSNorm,
    causal_mask,
    make_attention,
)
from eagle3kit.model.completeness import tensor_problems

if TYPE_CHECKING:
    from eagle3kit.model.protocols import EmbeddedTarget

DRAFTER_FIX = "`eagle3kit inspect` lists its tensors; eagle3kit never runs a random weight"


class MLP(nn.Module):
    def __init__(self, spec: DraftSpec):
        super().__init__()
        if spec.hidden_act not in ("silu", "swish"):
            raise bad("config.json", f"hidden_act: expected 'silu', found {spec.hidden_act!r}")
        self.gate_proj = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=spec.mlp_bias)
        self.up_proj = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=spec.mlp_bias)
        self.down_proj = nn.Linear(spec.intermediate_size, spec.hidden_size, bias=spec.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MidLayer(nn.Module):
    def __init__(self, spec: DraftSpec):
        super().__init__()
        eps = spec.rms_norm_eps
        self.input_layernorm = RMSNorm(spec.hidden_size, eps)
        self.hidden_norm = RMSNorm(spec.hidden_size, eps)
        self.post_attention_layernorm = RMSNorm(spec.hidden_size, eps)
        self.self_attn = make_attention(spec)
        self.mlp = MLP(spec)
        self.norm_before_residual = spec.norm_before_residual

    def forward(
        self,
        emb: torch.Tensor,
        h: torch.Tensor,
        pos: torch.Tensor,
        cache: DraftCache | None,
        attn_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hn = self.hidden_norm(h)
        residual = hn if self.norm_before_residual else h
        x = torch.cat([self.input_layernorm(emb), hn], dim=-1)  # [B, T, 2H]
        h = residual + self.self_attn(x, pos, cache, attn_mask)
        return h + self.mlp(self.post_attention_layernorm(h))


@dataclass
class DraftOutput:
    logits: torch.Tensor  # [B, T, Vd] over the draft vocabulary
    hidden: torch.Tensor  # [B, T, H], the next step's input hidden


class Eagle3Drafter(nn.Module):
    """An EAGLE-3 drafter. `forward` is one draft step; see the module docstring."""

    # the modules whose forward receives a DraftCache (train/distributed.py keeps them whole)
    cache_carriers: tuple[str, ...] = ("", "midlayer", "midlayer.self_attn")

    def __init__(
        self,
        spec: DraftSpec,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        self.spec = spec
        with torch.device(device):
            self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size)
            self.embed_tokens.weight.requires_grad_(False)  # the target's, frozen
            if spec.norm_before_fc:
                self.input_norm = RMSNorm(spec.fc_in_features, spec.rms_norm_eps)
            if spec.fc_norm:
                self.fc_norm = nn.ModuleList(
                    RMSNorm(spec.target_hidden_size, spec.rms_norm_eps) for _ in range(spec.num_aux)
                )
            self.fc = nn.Linear(spec.fc_in_features, spec.hidden_size, bias=False)
            self.midlayer = MidLayer(spec)
            self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
            self.lm_head = nn.Linear(spec.hidden_size, spec.draft_vocab_size, bias=False)
            # target_id = draft_id + d2t[draft_id]; identity when the vocabularies are equal
            self.register_buffer("d2t", torch.zeros(spec.draft_vocab_size, dtype=torch.long))
            self.register_buffer("t2d", torch.zeros(spec.vocab_size, dtype=torch.bool))
            if spec.draft_vocab_size == spec.vocab_size:
                self.t2d.fill_(True)
        self.to(dtype=dtype)
        self.embed_loaded = False

    # ------------------------------------------------------------ math

    def project_aux(self, aux: torch.Tensor) -> torch.Tensor:
        """fc over the three target hidden states: [B, T, 3*Ht] -> [B, T, H]."""
        if hasattr(self, "input_norm"):
            aux = self.input_norm(aux)
        if hasattr(self, "fc_norm"):
            aux = torch.cat(
                [
                    n(c)
                    for n, c in zip(self.fc_norm, aux.chunk(self.spec.num_aux, dim=-1), strict=True)
                ],
                dim=-1,
            )
        return self.fc(aux)

    def forward(
        self,
        input_ids: torch.Tensor,  # [B, T]
        hidden: torch.Tensor,  # [B, T, 3*Ht] aux states, or [B, T, H] from the previous step
        cache: DraftCache | None = None,
        position_ids: torch.Tensor | None = None,  # [B, T]; default continues the cache
        attn_mask: torch.Tensor | None = None,  # bool [T, S] or [B, 1, T, S], S = cached + T
        *,
        from_aux: bool | None = None,
    ) -> DraftOutput:
        """One draft step over T new positions.

        The T new keys/values are appended to `cache` (when given) before attention, so
        S = cache length before the call + T. `attn_mask` (True = may attend) defaults to
        causal over the cache plus the new positions; tree drafting and training-time test
        pass their own (a node sees its ancestors; step i sees step 0's causal prefix plus
        its own diagonal). `position_ids` set the rotary positions (default: continue the
        cache), so tree siblings can share a position.
        """
        if not self.embed_loaded:
            raise Eagle3Error(
                "drafter: no token embedding loaded (embed_tokens is random); call "
                "set_embedding(target.embed_tokens.weight) with the target's input embedding, "
                "or load a checkpoint that carries embed_tokens.weight"
            )
        b, t = input_ids.shape
        if from_aux is None:
            from_aux = (
                hidden.shape[-1] == self.spec.fc_in_features
                and hidden.shape[-1] != self.spec.hidden_size
            )
        h = self.project_aux(hidden) if from_aux else hidden  # [B, T, H]
        if position_ids is None:
            start = cache.length if cache is not None else 0
            position_ids = (start + torch.arange(t, device=input_ids.device)).expand(b, t)
        emb = self.embed_tokens(input_ids).to(h.dtype)  # [B, T, H]
        h = self.run_layers(emb, h, position_ids, cache, attn_mask)
        normed = self.norm(h)
        logits = self.lm_head(normed)  # [B, T, Vd]
        return DraftOutput(logits=logits, hidden=normed if self.spec.norm_output else h)

    def run_layers(
        self,
        emb: torch.Tensor,
        h: torch.Tensor,
        pos: torch.Tensor,
        cache: DraftCache | None,
        attn_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """The decoder layers over one step's inputs: EAGLE-3's one layer (a subclass with
        more layers runs them after it, each with its own cache, `DraftCache.layer`)."""
        return self.midlayer(emb, h, pos, cache, attn_mask)

    @property
    def method(self) -> str:
        """Its draft method (core/registry.py): EAGLE 3.1 when its norm flags say so."""
        from eagle3kit.checkpoint.eagle3.layouts import method_of

        return method_of(self.spec)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype its input states are cast to (its fc's)."""
        return self.fc.weight.dtype

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Map draft-vocabulary ids to target ids with the d2t offsets."""
        return draft_ids + self.d2t[draft_ids]

    def step_inputs(
        self, i: int, ids: torch.Tensor, hidden: torch.Tensor, from_aux: bool
    ) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """What unrolled step i (training-time test, train/ttt.py) reads: the shifted tokens
        and the previous step's hidden, as given (a subclass may feed its own)."""
        return ids, hidden, from_aux

    def attach_target(self, target: EmbeddedTarget) -> None:
        """Draft with the target's input embedding (engines feed the drafter the serving
        target's unless its checkpoint carries its own)."""
        self.set_embedding(target.embed_tokens.weight)

    def set_embedding(self, weight: torch.Tensor) -> None:
        """Use the target's (frozen) input embedding [V, H]."""
        if tuple(weight.shape) != (self.spec.vocab_size, self.spec.hidden_size):
            raise bad(
                "embed_tokens",
                f"expected shape {[self.spec.vocab_size, self.spec.hidden_size]}, "
                f"found {list(weight.shape)}",
            )
        with torch.no_grad():
            self.embed_tokens.weight.copy_(weight.to(self.embed_tokens.weight))
        self.embed_loaded = True

    # ------------------------------------------------------------ I/O

    @classmethod
    def for_target(
        cls,
        target: EmbeddedTarget,
        *,
        attention: str = "mha",
        draft_vocab_size: int | None = None,
        aux_layers: tuple[int, ...] | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **spec_overrides: Any,
    ) -> Eagle3Drafter:
        """A fresh drafter sized for `target`, with the target's embedding.

        Weights are PyTorch's default init; d2t is the identity (set it from the vocab map).
        The spec comes from `spec_for_target(target.config, ...)`; aux_layers default to the
        TargetModel's own."""
        cfg = target.config.to_dict() if hasattr(target.config, "to_dict") else target.config
        spec = spec_for_target(
            cfg,
            attention=attention,
            draft_vocab_size=draft_vocab_size,
            aux_layers=aux_layers or tuple(target.aux_layers),
            **spec_overrides,
        )
        emb = target.embed_tokens.weight  # [V, Ht]
        model = cls(spec, device=device or emb.device, dtype=dtype or emb.dtype)
        model.set_embedding(emb)
        return model

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
    ) -> Eagle3Drafter:
        """Load a drafter in any layout (SGLang, speculators/vLLM, EAGLE) from safetensors
        (a subclass reads its own fields from config.json in `from_read`)."""
        from eagle3kit.checkpoint.eagle3.reader import read_drafter

        spec, tensors, head = read_drafter(str(path))
        return cls.from_read(spec, tensors, head.ckpt.config, device, dtype, str(path))

    @classmethod
    def from_read(
        cls,
        spec: DraftSpec,
        tensors: dict[str, torch.Tensor],
        config: dict[str, Any],
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
        where: str = "drafter checkpoint",
    ) -> Eagle3Drafter:
        """A drafter from what `checkpoint.reader.read_drafter` returned; `config` (the
        checkpoint's config.json) gives a subclass its own constructor arguments."""
        init = cls.config_args(config, where)
        return cls.from_tensors(spec, tensors, device=device, dtype=dtype, where=where, **init)

    @classmethod
    def config_args(cls, config: dict[str, Any], where: str) -> dict[str, Any]:
        """The constructor's arguments beyond the spec, from config.json: none for EAGLE-3."""
        return {}

    @classmethod
    def from_tensors(
        cls,
        spec: DraftSpec,
        tensors: dict[str, torch.Tensor],
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
        where: str = "drafter checkpoint",
        **init: Any,
    ) -> Eagle3Drafter:
        """A drafter of `spec` holding canonical-named `tensors` (dtype default: the spec's);
        `where` names the checkpoint in a refusal; `init`: a subclass's own constructor
        arguments."""
        dtype = dtype or getattr(torch, spec.dtype, torch.float32)
        model = cls(spec, device=device, dtype=dtype, **init)
        model.load_canonical(tensors, where=where)
        return model

    def load_canonical(
        self, tensors: dict[str, torch.Tensor], *, where: str = "drafter checkpoint"
    ) -> None:
        """Load canonical-named tensors; embed_tokens may be absent (set it from the target).
        A required tensor missing, or one the drafter has no place for, is refused."""
        own = self.state_dict()
        missing = [n for n in self.spec.required_tensors() if n not in tensors]
        extra = [n for n in tensors if n not in own and n not in TRAINING_ONLY]
        if missing or extra:  # never a random weight, never a weight silently dropped
            raise bad(where, f"{tensor_problems(missing, extra)}; {DRAFTER_FIX}")
        for name, t in tensors.items():
            if name not in own:
                continue
            if tuple(t.shape) != tuple(own[name].shape):
                raise bad(
                    "checkpoint",
                    f"{name}: expected shape {list(own[name].shape)}, found {list(t.shape)}",
                )
            if own[name].is_floating_point() and not t.is_floating_point():
                raise bad("checkpoint", f"{name}: expected floating-point weights, found {t.dtype}")
        sd = {n: t for n, t in tensors.items() if n in own}
        self.load_state_dict(sd, strict=False)
        self.embed_loaded = "embed_tokens.weight" in sd

    def blank(self, spec: DraftSpec) -> Eagle3Drafter:
        """A freshly initialised drafter of the same kind under `spec`, on this one's device
        and dtype (subclasses carry their own settings over)."""
        w = self.fc.weight
        return type(self)(spec, device=w.device, dtype=w.dtype)

    def canonical_state(self, *, with_embedding: bool | None = None) -> dict[str, torch.Tensor]:
        """Tensors to save, by canonical name (embed_tokens only if loaded, unless told)."""
        keep_embed = self.embed_loaded if with_embedding is None else with_embedding
        return {
            n: t for n, t in self.state_dict().items() if keep_embed or n != "embed_tokens.weight"
        }
