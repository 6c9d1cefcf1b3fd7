"""The drafter's attention: Llama-style (MHA/GQA) and DeepSeek-V3 latent attention (MLA).

Both take x = cat(input_layernorm(embed), hidden_norm(h)) of width 2H, explicit rotary
positions [B, T], a bool mask (True = may attend) over the cached + new keys, and a DraftCache
that the new keys/values are appended to before attention.

MHA (Llama):  q, k, v = q_proj(x), k_proj(x), v_proj(x); rope on the whole head;
              softmax(q·kᵀ / sqrt(head_dim)) v; o_proj.

MLA (DeepSeek-V3, Kimi-K2.5's MLA drafter), per position, with n heads:
    q          = q_b_proj(q_a_layernorm(q_a_proj(x)))            [n, nope + rope]
                 (q_proj(x) when q_lora_rank is None)
    c, k_pe    = split(kv_a_proj_with_mqa(x), [kv_lora, rope])  latent + one shared rope key
    k_nope, v  = split(kv_b_proj(kv_a_layernorm(c)), [nope, v]) per head
    k          = [k_nope, rope(k_pe)],  q = [q_nope, rope(q_pe)]   (rope on the rope part only)
    o          = o_proj(softmax(q·kᵀ · s) v),  s = (nope + rope)^-1/2 · mscale²
with yarn rope as transformers' DeepseekV3 does it: the rotary cos/sin carry the yarn
attention factor, and s gains mscale² = (0.1·mscale_all_dim·ln(factor) + 1)² when
rope_scaling has `mscale_all_dim`. DeepSeek lays the rope dims out as adjacent pairs
(rope_interleave): pair (x[2i], x[2i+1]) rotates by angle pos·inv_freq[i].
The cache holds the expanded per-head keys [B, n, S, nope+rope] and values [B, n, S, v].

Sliding window W (`DraftSpec.sliding_window`: the config's `layer_types` ["sliding_attention"]
and `sliding_window`, as vLLM's LlamaAttention reads them): on top of whatever mask the caller
gives, a query at rotary position p sees only the keys whose position q has p - q < W (with
the causal mask: the W positions p - W + 1..p, its own counted, the convention of transformers
and of vLLM's `per_layer_sliding_window`). The rule is on positions, not on cache slots, so
one rule serves chain decoding, tree drafting (siblings share a position) and training-time
test (step i at t has position t + i). The cache records each key's position
(`DraftCache.pos`) and may forget keys no later query can see (`DraftCache.forget`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from eagle3kit.core.errors import bad
from eagle3kit.core.spec import DraftSpec


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


def _rope_config(spec: DraftSpec, scaling: dict):
    """A transformers config whose rope matches the spec's (DeepseekV3Config for MLA)."""
    if spec.is_mla:
        from transformers import DeepseekV3Config

        return DeepseekV3Config(
            hidden_size=spec.hidden_size,
            num_attention_heads=spec.num_attention_heads,
            qk_nope_head_dim=spec.qk_nope_head_dim,
            qk_rope_head_dim=spec.qk_rope_head_dim,
            v_head_dim=spec.v_head_dim,
            max_position_embeddings=spec.max_position_embeddings,
            rope_theta=spec.rope_theta,
            rope_scaling=scaling,
        )
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=spec.num_attention_heads * spec.head_dim,
        num_attention_heads=spec.num_attention_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        rope_theta=spec.rope_theta,
        rope_scaling=scaling,
    )


def inv_freq(spec: DraftSpec) -> tuple[torch.Tensor, float]:
    """Rotary inverse frequencies [rope_dim/2] and the cos/sin scaling for the spec's rope."""
    dim = spec.rope_dim
    if spec.rope_scaling is None:
        inv = 1.0 / (spec.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        return inv, 1.0
    # Scaled variants (llama3, yarn, linear, dynamic...): use transformers' own definitions,
    # which the engines mirror.
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = dict(spec.rope_scaling)
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in ROPE_INIT_FUNCTIONS:
        raise bad(
            "config.json", f"rope_scaling.rope_type: {rope_type!r} is not known to transformers"
        )
    cfg = _rope_config(spec, {**scaling, "rope_type": rope_type})
    inv, scale = ROPE_INIT_FUNCTIONS[rope_type](cfg, None)
    return inv.float(), float(scale)


def mla_softmax_scale(spec: DraftSpec) -> float:
    """(nope + rope)^-1/2, times mscale² under yarn with mscale_all_dim (DeepSeek-V3)."""
    scale = spec.qk_head_dim**-0.5
    rs = spec.rope_scaling or {}
    if rs.get("rope_type", rs.get("type", "default")) == "yarn" and rs.get("mscale_all_dim"):
        factor = float(rs.get("factor") or 1.0)
        if factor > 1:
            m = 0.1 * float(rs["mscale_all_dim"]) * math.log(factor) + 1.0
            scale *= m * m
    return scale


def apply_rope(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleave: bool
) -> torch.Tensor:
    """Rotate x [B, h, T, d] by angles whose cos/sin are [B, 1, T, d/2].

    interleave=False (Llama/NeoX): pairs (x[i], x[i + d/2]). interleave=True (DeepSeek): pairs
    (x[2i], x[2i+1]), written out de-interleaved (evens' results, then odds'); q and k get the
    same permutation, so q·k is that of rotating in place."""
    if interleave:
        x1, x2 = x[..., 0::2], x[..., 1::2]  # [B, h, T, d/2] each
    else:
        x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


@dataclass
class DraftCache:
    """The drafter's own KV cache: keys [B, heads, S, qk_dim], values [B, heads, S, v_dim].

    It is the cache of the drafter's first decoder layer; a drafter with more layers keeps
    each further layer's keys and values in its own cache (`layer(i)`), as an engine keeps one
    KV cache per attention layer. `crop` rolls back every one of them."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    deeper: list[DraftCache] = field(default_factory=list)  # layers 1.. (made on first use)
    pos: torch.Tensor | None = None  # [B, stored] each stored key's rotary position
    start: int = 0  # keys forgotten from the front (a sliding window's past): slot of k[:, :, 0]

    @property
    def length(self) -> int:
        """Keys appended so far, forgotten ones included (the next key's slot)."""
        return self.start + (0 if self.k is None else self.k.shape[2])

    def layer(self, i: int) -> DraftCache:
        """The cache of decoder layer i (0: this one)."""
        if i == 0:
            return self
        while len(self.deeper) < i:
            self.deeper.append(DraftCache())
        return self.deeper[i - 1]

    def crop(self, n: int) -> None:
        """Keep the first n slots (roll back rejected drafts), in every layer's cache."""
        if n < self.start:
            raise ValueError(
                f"draft cache: cannot roll back to {n}, slots < {self.start} forgotten"
            )
        keep = n - self.start
        if self.k is not None:
            self.k, self.v = self.k[:, :, :keep], self.v[:, :, :keep]
            self.pos = None if self.pos is None else self.pos[:, :keep]
        for c in self.deeper:
            c.crop(n)

    def forget(self, n: int) -> None:
        """Drop the keys of slots < n (every layer's): a sliding window's keys no later query
        sees. `length` and slot numbers stay as they were."""
        drop = min(max(0, n - self.start), 0 if self.k is None else self.k.shape[2])
        if drop:
            self.k, self.v = self.k[:, :, drop:], self.v[:, :, drop:]
            self.pos = None if self.pos is None else self.pos[:, drop:]
            self.start += drop
        for c in self.deeper:
            c.forget(n)

    def append(
        self, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new keys/values [B, h, T, d] (at rotary positions `pos` [B, T], recorded
        when given); return all the stored ones [B, h, S, d]."""
        if pos is not None:
            pos = pos.expand(k.shape[0], -1)
            self.pos = pos if self.pos is None else torch.cat([self.pos, pos], dim=1)
        if self.k is not None:
            k, v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        self.k, self.v = k, v
        return k, v


def causal_mask(t: int, past: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Bool [T, past+T]: query i (absolute position past+i) sees keys 0..past+i."""
    return (
        torch.arange(past + t, device=device)[None, :]
        <= (past + torch.arange(t, device=device))[:, None]
    )


class _RopeMixin(nn.Module):
    """Rotary cos/sin [B, 1, T, rope/2] for explicit positions (no CUDA assumptions)."""

    def _init_rope(self, spec: DraftSpec) -> None:
        inv, self.rope_scale = inv_freq(spec)
        self.register_buffer("inv_freq", inv, persistent=False)

    def _cos_sin(self, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = pos[:, None, :, None].float() * self.inv_freq[None, None, None, :]  # [B,1,T,r/2]
        return (freqs.cos() * self.rope_scale).to(dtype), (freqs.sin() * self.rope_scale).to(dtype)


def window_band(qpos: torch.Tensor, kpos: torch.Tensor, window: int) -> torch.Tensor:
    """Bool [B, 1, T, S]: key position kpos [B, S] within `window` of query position qpos
    [B, T] (q - k < W; causality is the mask's business)."""
    return ((qpos[:, :, None] - kpos[:, None, :]) < window)[:, None]


def _with_band(mask: torch.Tensor, band: torch.Tensor) -> torch.Tensor:
    """The mask (bool: True = may attend; float: added to the scores) narrowed by `band`."""
    if mask.dtype == torch.bool:
        return mask & band
    return mask.masked_fill(~band, float("-inf"))


def _attend(
    q, k, v, cache, attn_mask, t, scale=None, rep: int = 1, pos=None, window=None
) -> torch.Tensor:
    """Append k/v (at positions `pos` [B, T]) to the cache, repeat kv heads `rep` times (GQA),
    then softmax attention with the mask (default causal over cache + new), narrowed to the
    sliding `window` when there is one (module docstring); returns [B, h, T, dv]."""
    past, start, kpos = 0, 0, pos
    if cache is not None:
        past, start = cache.length, cache.start
        k, v = cache.append(k, v, pos if window else None)
        kpos = cache.pos
    if rep > 1:
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    mask = attn_mask if attn_mask is not None else causal_mask(t, past, q.device)
    if start and mask.shape[-1] == past + t:  # a mask over every slot: drop the forgotten
        mask = mask[..., start:]
    if window:
        mask = _with_band(mask, window_band(pos, kpos, window))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


class Attention(_RopeMixin):
    """Llama attention (MHA/GQA) over the 2H-wide drafter input (`in_features`: another
    width, H for a drafter's later, standard decoder layers)."""

    def __init__(self, spec: DraftSpec, in_features: int | None = None):
        super().__init__()
        h2 = in_features or 2 * spec.hidden_size
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
        self._init_rope(spec)
        self.window = spec.sliding_window

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
        cos, sin = self._cos_sin(pos, q.dtype)
        q = apply_rope(q.transpose(1, 2), cos, sin, interleave=False)  # [B, nh, T, hd]
        k = apply_rope(k.transpose(1, 2), cos, sin, interleave=False)  # [B, nkv, T, hd]
        rep = self.n_heads // self.n_kv
        o = _attend(q, k, v, cache, attn_mask, t, rep=rep, pos=pos, window=self.window)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class MLAAttention(_RopeMixin):
    """DeepSeek-V3 multi-head latent attention over the 2H-wide drafter input (module docstring)."""

    def __init__(self, spec: DraftSpec):
        super().__init__()
        h2, n, eps = 2 * spec.hidden_size, spec.num_attention_heads, spec.rms_norm_eps
        self.n_heads, self.nope, self.rope = n, spec.qk_nope_head_dim, spec.qk_rope_head_dim
        self.v_dim, self.kv_lora = spec.v_head_dim, spec.kv_lora_rank
        self.interleave = spec.rope_interleave
        bias = spec.attention_bias
        if spec.q_lora_rank is None:
            self.q_proj = nn.Linear(h2, spec.q_size, bias=False)
        else:
            self.q_a_proj = nn.Linear(h2, spec.q_lora_rank, bias=bias)
            self.q_a_layernorm = RMSNorm(spec.q_lora_rank, eps)
            self.q_b_proj = nn.Linear(spec.q_lora_rank, spec.q_size, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h2, self.kv_lora + self.rope, bias=bias)
        self.kv_a_layernorm = RMSNorm(self.kv_lora, eps)
        self.kv_b_proj = nn.Linear(self.kv_lora, n * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(n * self.v_dim, spec.hidden_size, bias=bias)
        self.scale = mla_softmax_scale(spec)
        self._init_rope(spec)
        self.window = spec.sliding_window

    def forward(
        self,
        x: torch.Tensor,
        pos: torch.Tensor,
        cache: DraftCache | None,
        attn_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        n = self.n_heads
        q = (
            self.q_proj(x)
            if hasattr(self, "q_proj")
            else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        )  # [B, T, n*(nope+rope)]
        q = q.view(b, t, n, self.nope + self.rope).transpose(1, 2)  # [B, n, T, nope+rope]
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)
        c, k_pe = self.kv_a_proj_with_mqa(x).split([self.kv_lora, self.rope], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(c))  # [B, T, n*(nope+v)]
        kv = kv.view(b, t, n, self.nope + self.v_dim).transpose(1, 2)  # [B, n, T, nope+v]
        k_nope, v = kv.split([self.nope, self.v_dim], dim=-1)
        cos, sin = self._cos_sin(pos, q.dtype)
        q_pe = apply_rope(q_pe, cos, sin, self.interleave)  # [B, n, T, rope]
        k_pe = apply_rope(k_pe[:, None], cos, sin, self.interleave)  # [B, 1, T, rope]
        q = torch.cat([q_nope, q_pe], dim=-1)  # [B, n, T, nope+rope]
        k = torch.cat([k_nope, k_pe.expand(b, n, t, self.rope)], dim=-1)  # [B, n, T, nope+rope]
        v = v.contiguous()
        o = _attend(q, k, v, cache, attn_mask, t, self.scale, pos=pos, window=self.window)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, n * self.v_dim))


def make_attention(spec: DraftSpec) -> nn.Module:
    return MLAAttention(spec) if spec.is_mla else Attention(spec)
