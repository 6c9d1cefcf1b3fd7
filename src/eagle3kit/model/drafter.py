"""Eagle3Drafter: the EAGLE-3 draft model as an nn.Module, built from a DraftSpec.

One draft step, per position t (FORMATS.md "The architecture in one paragraph"):

    h_t   = fc(cat(aux_low, aux_mid, aux_high))          on the first step  # [B, T, H]
          = the previous step's output hidden            on later steps     # [B, T, H]
    x     = cat(input_layernorm(embed(token_t)), hidden_norm(h_t))         # [B, T, 2H]
    a     = o_proj(attention(q_proj(x), k_proj(x), v_proj(x)))             # [B, T, H]
    h     = residual + a,   residual = h_t (or hidden_norm(h_t) when norm_before_residual)
    h     = h + mlp(post_attention_layernorm(h))
    logits over the draft vocab = lm_head(norm(h));  next step's hidden = h (norm(h) if norm_output)

Parameter names equal our canonical (SGLang) tensor names, so `state_dict()` is a checkpoint.
Device and dtype are parameters; nothing here assumes CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from eagle3kit.errors import bad
from eagle3kit.spec import DraftSpec


class RMSNorm(nn.Module):
    """Llama RMSNorm: normalise in float32, scale, cast back."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def _inv_freq(spec: DraftSpec) -> tuple[torch.Tensor, float]:
    """Rotary inverse frequencies [head_dim/2] and attention scaling for the spec's rope."""
    if spec.rope_scaling is None:
        inv = 1.0 / (
            spec.rope_theta
            ** (torch.arange(0, spec.head_dim, 2, dtype=torch.float32) / spec.head_dim)
        )
        return inv, 1.0
    # Scaled variants (llama3, yarn, linear, dynamic...): use transformers' own definitions,
    # which the engines mirror.
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = dict(spec.rope_scaling)
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    cfg = LlamaConfig(
        hidden_size=spec.num_attention_heads * spec.head_dim,
        num_attention_heads=spec.num_attention_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        rope_theta=spec.rope_theta,
        rope_scaling={**scaling, "rope_type": rope_type},
    )
    if rope_type not in ROPE_INIT_FUNCTIONS:
        raise bad(
            "config.json", f"rope_scaling.rope_type: {rope_type!r} is not known to transformers"
        )
    inv, scale = ROPE_INIT_FUNCTIONS[rope_type](cfg, None)
    return inv.float(), float(scale)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


@dataclass
class DraftCache:
    """The drafter's own KV cache: keys/values [B, kv_heads, S, head_dim]."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def crop(self, n: int) -> None:
        """Keep the first n positions (roll back rejected drafts)."""
        if self.k is not None:
            self.k, self.v = self.k[:, :, :n], self.v[:, :, :n]


def causal_mask(t: int, past: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Bool [T, past+T]: query i (absolute position past+i) sees keys 0..past+i."""
    return (
        torch.arange(past + t, device=device)[None, :]
        <= (past + torch.arange(t, device=device))[:, None]
    )


class Attention(nn.Module):
    def __init__(self, spec: DraftSpec):
        super().__init__()
        h2 = 2 * spec.hidden_size
        self.n_heads, self.n_kv, self.head_dim = (
            spec.num_attention_heads,
            spec.num_key_value_heads,
            spec.head_dim,
        )
        self.q_proj = nn.Linear(h2, spec.q_size, bias=spec.attention_bias)
        self.k_proj = nn.Linear(h2, spec.kv_size, bias=spec.attention_bias)
        self.v_proj = nn.Linear(h2, spec.kv_size, bias=spec.attention_bias)
        self.o_proj = nn.Linear(spec.q_size, spec.hidden_size, bias=False)
        if spec.qk_norm:
            self.q_norm = RMSNorm(spec.head_dim, spec.rms_norm_eps)
            self.k_norm = RMSNorm(spec.head_dim, spec.rms_norm_eps)
        inv, self.rope_scale = _inv_freq(spec)
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        cache: DraftCache | None,
        attn_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim)  # [B, T, nh, hd]
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim)  # [B, T, nkv, hd]
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)  # [B, nkv, T, hd]
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        freqs = (
            pos[:, None, :, None].float() * self.inv_freq[None, None, None, :]
        )  # [B, 1, T, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = (
            (emb.cos() * self.rope_scale).to(q.dtype),
            (emb.sin() * self.rope_scale).to(q.dtype),
        )
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        past = 0
        if cache is not None:
            past = cache.length
            if cache.k is not None:
                k, v = torch.cat([cache.k, k], dim=2), torch.cat([cache.v, v], dim=2)
            cache.k, cache.v = k, v
        rep = self.n_heads // self.n_kv
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        mask = attn_mask if attn_mask is not None else causal_mask(t, past, x.device)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, nh, T, hd]
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


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
        self.self_attn = Attention(spec)
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
        h = self.midlayer(emb, h, position_ids, cache, attn_mask)
        normed = self.norm(h)
        logits = self.lm_head(normed)  # [B, T, Vd]
        return DraftOutput(logits=logits, hidden=normed if self.spec.norm_output else h)

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Map draft-vocabulary ids to target ids with the d2t offsets."""
        return draft_ids + self.d2t[draft_ids]

    def set_embedding(self, weight: torch.Tensor) -> None:
        """Use the target's (frozen) input embedding [V, H]."""
        if tuple(weight.shape) != (self.spec.vocab_size, self.spec.hidden_size):
            raise bad(
                "embed_tokens",
                f"expected shape {[self.spec.vocab_size, self.spec.hidden_size]}, found {list(weight.shape)}",
            )
        with torch.no_grad():
            self.embed_tokens.weight.copy_(weight.to(self.embed_tokens.weight))
        self.embed_loaded = True

    # ------------------------------------------------------------ I/O

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
    ) -> Eagle3Drafter:
        """Load a drafter in any layout (SGLang, speculators/vLLM, EAGLE) from safetensors."""
        from eagle3kit.formats.convert import load_drafter_tensors

        spec, tensors, _layout = load_drafter_tensors(str(path))
        dt = dtype or getattr(torch, spec.dtype, torch.float32)
        model = cls(spec, device=device, dtype=dt)
        model.load_canonical(tensors)
        return model

    def load_canonical(self, tensors: dict[str, torch.Tensor]) -> None:
        """Load canonical-named tensors; embed_tokens may be absent (set it from the target)."""
        own = self.state_dict()
        missing = [n for n in self.spec.required_tensors() if n not in tensors]
        if missing:
            raise bad("checkpoint", f"missing tensors: {', '.join(missing)}")
        for name, t in tensors.items():
            if name not in own:
                continue
            if tuple(t.shape) != tuple(own[name].shape):
                raise bad(
                    "checkpoint",
                    f"{name}: expected shape {list(own[name].shape)}, found {list(t.shape)}",
                )
        sd = {n: t for n, t in tensors.items() if n in own}
        self.load_state_dict(sd, strict=False)
        self.embed_loaded = "embed_tokens.weight" in sd

    def canonical_state(self, *, with_embedding: bool | None = None) -> dict[str, torch.Tensor]:
        """Tensors to save, by canonical name (embed_tokens only if loaded, unless told)."""
        keep_embed = self.embed_loaded if with_embedding is None else with_embedding
        return {
            n: t for n, t in self.state_dict().items() if keep_embed or n != "embed_tokens.weight"
        }
