"""DFlashDrafter: z-lab's DFlash block drafter (arXiv 2602.06036) as an nn.Module.

One forward drafts a whole block. With n target layers, context positions c (target tokens
already verified) and a block of T = 1 + K positions starting at position m:

    ctx   = hidden_norm(fc(cat(h_1[c], ..., h_n[c])))               # [B, C, H]  the context
    x     = embed([x_m, mask, ..., mask])                            # [B, T, H]  the "noise" block
    per layer l (Qwen3 style, pre-norm):
        u   = input_layernorm(x)
        q   = rope(q_norm(q_proj(u)))                                 queries: the block only
        k   = rope(k_norm(k_proj(cat(ctx, u))))                       keys/values: the context
        v   = v_proj(cat(ctx, u))                                     (KV injection) + the block
        x   = x + o_proj(softmax(q·kᵀ/√d) v)                          bidirectional in the block,
        x   = x + mlp(post_attention_layernorm(x))                    every context key visible
    logits = lm_head(norm(x))                                         slot k guesses x_{m+k}

The context enters every layer only through that layer's k_proj/v_proj (it is not updated
layer to layer), so its keys/values can be cached per layer like a KV cache: decoding appends
the keys of newly verified tokens and drops the block's (`DFlashCache.crop`).
`embed` and `lm_head` are the target's unless the checkpoint carries its own: z-lab's carry
neither; speculators 0.9.0 never saves `embed_tokens` and saves `lm_head` only for a reduced
draft vocabulary (models/dflash/core.py `_keys_to_ignore_on_save`; its `load_verifier_weights`
refills both from the verifier, as vLLM's `qwen3_dflash.py` shares the target's). Each is
borrowed on its own (`embed_tokens`, `lm_head` when present). When lm_head covers a reduced
draft vocabulary, `d2t` maps draft id j to target id j + d2t[j] (`logits` scatters onto the
target's vocabulary, -inf elsewhere).

Per-layer causality and sliding windows (`layer_masks`): a causal layer lets block slot i
see block slots <= i only (z-lab `_attention_mask`, speculators `same_block_mod` for sliding
layers, vLLM 0.33 `_dflash_layer_causal`); a sliding layer (`layer_types` sliding_attention,
`sliding_window` W) sees context positions >= a - W, a the block's anchor, in speculators'
layout (its trainer's `base_prefix_mod`), and keys within W of the query's position in
z-lab's (`_attention_mask`). The speculators trainer's defaults make every layer sliding,
W = 2048.

Layer ids: z-lab's `dflash_config.target_layer_ids` name the decoder layer whose OUTPUT is
used (HF `hidden_states[id + 1]`); eagle3kit's aux ids name the layer's INPUT
(`hidden_states[id]`), so `DFlashSpec.aux_layers` = ids + 1 (docs/dflash.md).

Parameter names equal z-lab's checkpoint names (`fc`, `hidden_norm`, `norm`, `layers.i.*`),
so `state_dict()` is a z-lab checkpoint. Device and dtype are parameters; no CUDA assumed.
The spec is the checkpoint part's `DFlashSpec` (methods/dflash/checkpoint/spec.py);
checkpoints are read by its one reader (methods/dflash/checkpoint/read.py `read_dflash`, both
layouts) and written by its one writer (methods/dflash/checkpoint/write.py `save_dflash`, in
`spec.layout`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.methods.dflash.checkpoint.layout import default_target_layer_ids
from eagle3kit.methods.dflash.checkpoint.spec import DFlashSpec
from eagle3kit.model.attention import DraftCache, RMSNorm, apply_rope, inv_freq
from eagle3kit.model.loading import LoadedDrafter
from eagle3kit.model.target import parse_dtype

if TYPE_CHECKING:
    from eagle3kit.model.target import TargetModel

METHOD = "dflash"


class DFlashCache:
    """Per-layer keys/values of the context (and, during a pass, the block)."""

    def __init__(self, n_layers: int) -> None:
        self.layers = [DraftCache() for _ in range(n_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length

    def crop(self, n: int) -> None:
        for c in self.layers:
            c.crop(n)


class DFlashMLP(nn.Module):
    def __init__(self, s: DFlashSpec):
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DFlashAttention(nn.Module):
    """Queries from the block; keys/values from the context and the block (KV injection)."""

    def __init__(self, s: DFlashSpec):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = (
            s.num_attention_heads,
            s.num_key_value_heads,
            s.head_dim,
        )
        q, kv, b = (
            s.num_attention_heads * s.head_dim,
            s.num_key_value_heads * s.head_dim,
            s.attention_bias,
        )
        self.q_proj = nn.Linear(s.hidden_size, q, bias=b)
        self.k_proj = nn.Linear(s.hidden_size, kv, bias=b)
        self.v_proj = nn.Linear(s.hidden_size, kv, bias=b)
        self.o_proj = nn.Linear(q, s.hidden_size, bias=b)
        self.q_norm = RMSNorm(s.head_dim, s.rms_norm_eps)
        self.k_norm = RMSNorm(s.head_dim, s.rms_norm_eps)

    def forward(self, u, ctx, cos_sin, cache: DraftCache | None, mask) -> torch.Tensor:
        b, t, _ = u.shape
        c = ctx.shape[1]
        cos, sin = cos_sin  # [B, 1, C+T, hd/2]
        q = self.q_norm(self.q_proj(u).view(b, t, self.n_heads, self.head_dim)).transpose(1, 2)
        kv_in = torch.cat([ctx, u], dim=1)  # [B, C+T, H]
        k = self.k_norm(self.k_proj(kv_in).view(b, c + t, self.n_kv, self.head_dim))
        v = self.v_proj(kv_in).view(b, c + t, self.n_kv, self.head_dim).transpose(1, 2)
        q = apply_rope(q, cos[:, :, c:], sin[:, :, c:], interleave=False)  # [B, nh, T, hd]
        k = apply_rope(k.transpose(1, 2), cos, sin, interleave=False)  # [B, nkv, C+T, hd]
        if cache is not None:
            k, v = cache.append(k, v)  # [B, nkv, S, hd]
        rep = self.n_heads // self.n_kv
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, nh, T, hd]
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class DFlashLayer(nn.Module):
    def __init__(self, s: DFlashSpec):
        super().__init__()
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.self_attn = DFlashAttention(s)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.mlp = DFlashMLP(s)

    def forward(self, x, ctx, cos_sin, cache, mask) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), ctx, cos_sin, cache, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    """A DFlash drafter; `forward` is one block pass (module docstring)."""

    method = METHOD

    def __init__(
        self,
        spec: DFlashSpec,
        *,
        own_head: bool = False,
        own_embed: bool | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        self.check_buildable(spec)
        self.spec = spec
        own_embed = own_head if own_embed is None else own_embed
        with torch.device(device):
            self.layers = nn.ModuleList(DFlashLayer(spec) for _ in range(spec.num_hidden_layers))
            self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
            self.fc = nn.Linear(spec.fc_in_features, spec.hidden_size, bias=False)
            self.hidden_norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
            if own_embed:  # a checkpoint's own; else the target's (module docstring)
                self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size)
            if own_head:
                self.lm_head = nn.Linear(spec.hidden_size, spec.draft_vocab_size, bias=False)
            if spec.has_vocab_map:  # draft id j -> target id j + d2t[j]
                self.register_buffer("d2t", torch.zeros(spec.draft_vocab_size, dtype=torch.long))
            if "t2d" in spec.tensors:
                self.register_buffer("t2d", torch.zeros(spec.vocab_size, dtype=torch.bool))
            inv, self.rope_scale = inv_freq(spec)  # type: ignore[arg-type]
            self.register_buffer("inv_freq", inv, persistent=False)
        self.to(dtype=dtype)
        self.target_io: tuple[torch.Tensor, torch.Tensor] | None = None  # (embed [V,H], head [V,H])

    # ------------------------------------------------------------ the target's embedding/head

    def attach_target(self, target: TargetModel) -> None:
        """Use the target's input embedding and lm_head (not copied, not trained)."""
        emb = target.embed_tokens.weight
        head = target.model.get_output_embeddings().weight
        for name, w in (("embed_tokens", emb), ("lm_head", head)):
            if tuple(w.shape) != (self.spec.vocab_size, self.spec.hidden_size):
                raise bad(
                    f"target {name}",
                    f"expected shape {[self.spec.vocab_size, self.spec.hidden_size]} "
                    f"(the drafter's vocab_size x hidden_size), found {list(w.shape)}",
                )
        self.target_io = (emb.detach(), head.detach())

    @property
    def default_depth(self) -> int:
        """Drafts per cycle when none is asked: the block's proposals (B - 1, B with
        sample_from_anchor), as z-lab's dflash_generate and vLLM's num_speculative_tokens."""
        return self.spec.num_proposals

    @property
    def borrows(self) -> bool:
        """It runs with the target's embedding or lm_head (its checkpoint lacks one)."""
        return not (hasattr(self, "embed_tokens") and hasattr(self, "lm_head"))

    @property
    def embed_loaded(self) -> bool:
        return not self.borrows or self.target_io is not None

    def _io(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.borrows and self.target_io is None:
            raise Eagle3Error(
                "dflash drafter: no embedding/lm_head of its own (the engines use the "
                "target's): call attach_target(target)"
            )
        emb = self.embed_tokens.weight if hasattr(self, "embed_tokens") else self.target_io[0]
        head = self.lm_head.weight if hasattr(self, "lm_head") else self.target_io[1]
        return emb, head

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        w = self._io()[0]
        return F.embedding(ids, w).to(self.fc.weight.dtype) * self.spec.input_embedding_scale

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The lm_head on the drafter's normed output: [..., H] -> [..., V] (target ids; with
        a vocab map the draft vocabulary's logits land on j + d2t[j], -inf elsewhere)."""
        w = self._io()[1]
        out = F.linear(hidden.to(w.dtype), w)
        if not self.spec.has_vocab_map:
            return out
        full = out.new_full((*out.shape[:-1], self.spec.vocab_size), float("-inf"))
        ids = torch.arange(self.spec.draft_vocab_size, device=out.device) + self.d2t
        return full.index_copy(-1, ids, out)

    def train_logits(self, hidden: torch.Tensor, prev_ids: torch.Tensor) -> torch.Tensor:
        """Logits of block states [..., H] whose previous tokens are `prev_ids` [...]
        (teacher-forced in training and offline eval): DFlash's read no previous token."""
        return self.logits(hidden)

    def aux_loss_terms(self, hidden, prev_ids, logits, feats, blocks) -> tuple | None:
        """(sum, weight) of a loss term the training step adds to the block loss (a variant's
        own head: methods/dflash/train/loop.py divides the sum by the global weight), or
        None; DFlash has none."""
        return None

    def save_tensors(self, path: str | Path, tensors: dict[str, torch.Tensor]) -> Path:
        """Its `state_dict()` tensors (gathered) written as a checkpoint of its kind."""
        return save_dflash_tensors(path, self.spec, tensors)

    # ------------------------------------------------------------ one block pass

    def project(self, aux: torch.Tensor) -> torch.Tensor:
        """The context: hidden_norm(fc(aux)), [B, C, n*H] -> [B, C, H]."""
        return self.hidden_norm(self.fc(aux.to(self.fc.weight.dtype)))

    def project_aux(self, aux: torch.Tensor) -> torch.Tensor:
        """`project` under the name `probe`'s similarity calls (EAGLE-3 drafters' fc view)."""
        return self.project(aux)

    def _cos_sin(self, pos: torch.Tensor, dtype: torch.dtype):
        freqs = pos[:, None, :, None].float() * self.inv_freq[None, None, None, :]  # [B,1,S,hd/2]
        return (freqs.cos() * self.rope_scale).to(dtype), (freqs.sin() * self.rope_scale).to(dtype)

    def forward(
        self,
        block_ids: torch.Tensor,  # [B, T]: [x_m, mask, ...]
        aux: torch.Tensor,  # [B, C, n*H]: the target's states at the new context positions
        position_ids: torch.Tensor,  # [B, C+T]: the context's positions, then the block's
        cache: DFlashCache | None = None,
        attn_mask: torch.Tensor | None = None,  # bool [B|1, 1, T, S]; None: all visible
    ) -> torch.Tensor:
        """The normed hidden states of the block [B, T, H] (`logits` maps them to tokens).

        The context's and the block's keys/values are appended to `cache` (when given):
        crop it back to the committed context afterwards. With `attn_mask` None every query
        sees every key (the cached context, the new context and the whole block)."""
        x = self.embed(block_ids)  # [B, T, H]
        ctx = self.project(aux)  # [B, C, H]
        cos_sin = self._cos_sin(position_ids, x.dtype)
        past = cache.length if cache is not None else 0
        masks = self.layer_masks(attn_mask, position_ids, past, block_ids.shape[1])
        for i, layer in enumerate(self.layers):
            x = layer(x, ctx, cos_sin, cache.layers[i] if cache is not None else None, masks[i])
        return self.norm(x)

    def layer_masks(
        self, base: torch.Tensor | None, position_ids: torch.Tensor, past: int, t: int
    ) -> list[torch.Tensor | None]:
        """Each layer's mask: `base` (None: every key visible) narrowed for a causal layer
        (a key at a later position than the query hidden) and a sliding one (module
        docstring). Keys: the `past` cached ones at positions 0..past-1 (decoding keeps the
        context from position 0), then `position_ids`; queries: the last t positions, block
        slot i mod B of its block."""
        s = self.spec
        window = s.sliding_window if isinstance(s.sliding_window, int) else None
        types = s.layer_types or ()
        kinds = [
            (s.causal[i], window if i < len(types) and types[i] == "sliding_attention" else None)
            for i in range(s.num_hidden_layers)
        ]
        if not any(c or w for c, w in kinds):
            return [base] * s.num_hidden_layers
        dev = position_ids.device
        b = position_ids.shape[0]
        kp = torch.cat([torch.arange(past, device=dev).expand(b, -1), position_ids], dim=1)
        kp, qp = kp[:, None, :], position_ids[:, -t:, None]  # [B, 1, S], [B, T, 1]
        anchor = qp - (torch.arange(t, device=dev) % s.block_size)[None, :, None]
        made: dict[tuple, torch.Tensor | None] = {}
        for kind in kinds:
            if kind in made:
                continue
            causal, w = kind
            if not causal and w is None:  # bidirectional, unwindowed: the base mask
                made[kind] = base
                continue
            m = torch.ones(b, t, kp.shape[-1], dtype=torch.bool, device=dev)
            if causal:
                m &= kp <= qp
            if w is not None and s.layout == "speculators":
                m &= kp >= anchor - w
            elif w is not None:
                m &= (qp - kp < w) & (causal or (kp - qp < w))
            made[kind] = m[:, None] if base is None else base & m[:, None]
        return [made[k] for k in kinds]

    # ------------------------------------------------------------ I/O

    @classmethod
    def for_target(
        cls,
        target: TargetModel,
        *,
        num_hidden_layers: int = 1,
        block_size: int = 8,
        mask_token_id: int | None = None,
        target_layer_ids: tuple[int, ...] | None = None,
        intermediate_size: int | None = None,
        num_attention_heads: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        sliding_window: int | None = None,
    ) -> DFlashDrafter:
        """A fresh drafter sized for `target` (a TargetModel) using its embedding/lm_head.
        The mask token defaults to the last vocabulary id; layer ids to z-lab's default."""
        cfg = target.config
        h, n_layers = int(cfg.hidden_size), target.num_layers
        heads = num_attention_heads or int(cfg.num_attention_heads)
        ids = target_layer_ids or tuple(default_target_layer_ids(n_layers, num_hidden_layers))
        emb = target.embed_tokens.weight
        dtype = dtype or emb.dtype
        spec = DFlashSpec(
            hidden_size=h,
            intermediate_size=intermediate_size or int(cfg.intermediate_size),
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            head_dim=h // heads,
            vocab_size=target.vocab_size,
            draft_vocab_size=target.vocab_size,
            target_hidden_size=h,
            block_size=block_size,
            mask_token_id=target.vocab_size - 1 if mask_token_id is None else mask_token_id,
            target_layer_ids=tuple(ids),
            num_target_layers=n_layers,
            layer_causal=(False,) * num_hidden_layers,  # bidirectional in the block, sliding or not
            layer_types=None
            if sliding_window is None
            else ("sliding_attention",) * num_hidden_layers,
            sliding_window=sliding_window,
            rms_norm_eps=float(getattr(cfg, "rms_norm_eps", 1e-6)),
            dtype=str(dtype).removeprefix("torch."),
        )
        d = cls(spec, device=device or emb.device, dtype=dtype)
        d.attach_target(target)
        return d

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
    ) -> DFlashDrafter:
        """Read a DFlash checkpoint in z-lab's or speculators' layout (its one reader,
        methods/dflash/checkpoint/read.py `read_dflash`: a local folder or a hub id),
        strictly."""
        from eagle3kit.methods.dflash.checkpoint.read import read_dflash

        spec, tensors, head = read_dflash(str(path))
        dt = dtype if isinstance(dtype, torch.dtype) else None  # "auto": the config's
        return cls.from_tensors(spec, tensors, device=device, dtype=dt, where=head.source)

    @classmethod
    def from_tensors(cls, spec, tensors, *, device="cpu", dtype=None, where="checkpoint"):
        """A drafter holding exactly `tensors` (missing, extra or misshapen ones refused); an
        embedding or lm_head it lacks is the target's (`attach_target`), as the engines run
        it; a reduced draft vocabulary needs its own lm_head (and d2t)."""
        own_head = "lm_head.weight" in tensors
        own_embed = "embed_tokens.weight" in tensors
        if spec.has_vocab_map and not own_head:
            raise bad(where, "lm_head.weight: missing (a reduced draft vocabulary needs its own)")
        if "t2d" in tensors and "t2d" not in spec.tensors:
            spec = spec.replace(tensors=tuple(sorted({*spec.tensors, "t2d"})))
        dt = dtype or getattr(torch, spec.dtype)
        d = cls(spec, own_head=own_head, own_embed=own_embed, device=device, dtype=dt)
        own = d.state_dict()
        missing = sorted(set(own) - set(tensors))
        extra = sorted(set(tensors) - set(own))
        if missing or extra:
            raise bad(where, f"DFlash tensors: missing {missing[:4]}, unexpected {extra[:4]}")
        for n, t in tensors.items():
            if tuple(t.shape) != tuple(own[n].shape):
                raise bad(where, f"{n}: expected shape {list(own[n].shape)}, found {list(t.shape)}")
        d.load_state_dict(tensors, strict=True)
        return d

    @staticmethod
    def check_buildable(spec: DFlashSpec) -> None:
        """What this module implements: DFlash proper, B - 1 proposals (a subclass building
        a variant states its own)."""
        where = f"{spec.architecture} config"
        if spec.variant != "dflash":
            raise bad(where, f"variant: expected dflash (the one built here), found {spec.variant}")
        if spec.sample_from_anchor:
            raise bad(where, "sample_from_anchor: expected false (B - 1 proposals), found true")

    def save_pretrained(self, path: str | Path, *, verifier: str | None = None) -> Path:
        """Write the checkpoint in `spec.layout` (methods/dflash/checkpoint/write.py `save_dflash`),
        replacing `path` atomically."""
        sd = {n: t.detach().contiguous().cpu() for n, t in self.state_dict().items()}
        return save_dflash_tensors(path, self.spec, sd, verifier=verifier)


def save_dflash_tensors(
    path: str | Path, spec: DFlashSpec, tensors: dict[str, torch.Tensor], *, verifier=None
) -> Path:
    """A drafter's `state_dict()` tensors (whole, on the CPU: what a sharded run gathers)
    written in `spec.layout`, dtype taken from `fc.weight`, replacing `path` atomically."""
    from eagle3kit.core.atomic import atomic_dir
    from eagle3kit.methods.dflash.checkpoint.write import save_dflash

    spec = spec.replace(dtype=str(tensors["fc.weight"].dtype).removeprefix("torch."))
    p = Path(path)
    with atomic_dir(p) as tmp:
        save_dflash(tmp / "d", spec, tensors, verifier=verifier)
        for f in (tmp / "d").iterdir():
            f.rename(tmp / f.name)
        (tmp / "d").rmdir()
    return p


def load_drafter(path: str, *, device: str = "cpu", dtype: Any = "float32") -> LoadedDrafter:
    """A DFlash drafter in z-lab's or speculators' layout (`DFlashDrafter.from_pretrained`)."""
    d = DFlashDrafter.from_pretrained(path, device=device, dtype=parse_dtype(dtype))
    return LoadedDrafter(d.eval().requires_grad_(False), d.spec, f"dflash-{d.spec.layout}")
