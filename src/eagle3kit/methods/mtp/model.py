"""MTP heads: the next-n-token layers a target ships, as one nn.Module (docs/mtp.md).

Two layouts (names relative to the head's prefix in the target's checkpoint):

``deepseek`` (DeepSeek-V3/R1, GLM-4.5+, Kimi): prefix ``model.layers.{L}.``, L =
``num_hidden_layers``. One decoder layer of the target's own architecture (``self_attn.*``,
``mlp.*``, ``input_layernorm``, ``post_attention_layernorm``) plus ``enorm``, ``hnorm``,
``eh_proj`` [H, 2H], ``shared_head.norm``, ``shared_head.head`` [V, H] and ``embed_tokens``
(copies of the target's). Per position t, with h_t the target's returned (final-normed) hidden
state and x_{t+1} the token after t (vLLM ``deepseek_mtp.py``)::

    e   = embed(x_{t+1}),  zeroed where the position is 0
    z   = eh_proj(cat(enorm(e), hnorm(h_t)))                         # [B, T, H]
    z   = decoder_layer(z)                                           # residuals inside
    logits = shared_head.head(shared_head.norm(z));  next step's h = z

``qwen3_next`` (Qwen3-Next, Qwen3.5): prefix ``mtp.``; ``fc`` [H, 2H],
``pre_fc_norm_embedding``, ``pre_fc_norm_hidden``, ``layers.0.*`` (a full-attention layer of the
target's class), ``norm``; the target's ``lm_head`` (vLLM ``qwen3_next_mtp.py``)::

    z   = fc(cat(pre_fc_norm_embedding(e), pre_fc_norm_hidden(h_t)))
    z   = norm(layers.0(z));  logits = lm_head(z);  next step's h = z

The decoder layer is the target's transformers class (``type(target.layers[-1])``), so its
math is the target's. Parameter names of ``head.layer`` are the checkpoint's names after the
prefix, except transformers' fused MoE experts, which ``checkpoint_tensors`` /
``load_checkpoint_tensors`` split into and fuse from the per-expert names the files carry.
The target's embedding (and, for qwen3_next, its lm_head) and rotary embedding are shared,
never parameters of the head.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.methods.mtp.checkpoint.layout import (
    QWEN_CANON,
    head_record,
    mtp_count,
    mtp_prefix,
    mtp_style,
    text_config,
)
from eagle3kit.model.completeness import tensor_problems

if TYPE_CHECKING:
    from eagle3kit.model.target import TargetModel

_FUSED = re.compile(r"^(.*\.experts)\.(gate_up_proj|down_proj)$")
_PER_EXPERT = re.compile(r"^(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")
# tensors a DeepSeek-style layer may omit: they are the target's own (filled from it)
_SHARED = ("embed_tokens.weight", "shared_head.head.weight")


@dataclass
class MTPOutput:
    logits: torch.Tensor  # [B, T, V] over the target's vocabulary
    hidden: torch.Tensor  # [B, T, H] the next recursive step's h


class SharedHead(nn.Module):
    def __init__(self, norm: nn.Module, hidden: int, vocab: int):
        super().__init__()
        self.norm = norm
        self.head = nn.Linear(hidden, vocab, bias=False)


class _QwenParts(nn.Module):
    """Qwen3-Next's ``mtp.*`` module: names fc, pre_fc_norm_*, layers.0, norm."""

    def __init__(self, block: nn.Module, norm_cls: type, hidden: int, eps: float):
        super().__init__()
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        self.pre_fc_norm_embedding = norm_cls(hidden, eps=eps)
        self.pre_fc_norm_hidden = norm_cls(hidden, eps=eps)
        self.layers = nn.ModuleList([block])
        self.norm = norm_cls(hidden, eps=eps)


def _deepseek_layer(layer_cls: type, config: Any, index: int) -> nn.Module:
    """The target's decoder layer class at index L (so MoE where the target's are), with
    DeepSeek's MTP parts added beside its own submodules (names stay flat, as in the file)."""
    layer = type(f"MTP{layer_cls.__name__}", (layer_cls,), {})(config, layer_idx=index)
    h, eps = int(config.hidden_size), float(config.rms_norm_eps)
    norm_cls = type(layer.input_layernorm)
    layer.enorm = norm_cls(h, eps=eps)
    layer.hnorm = norm_cls(h, eps=eps)
    layer.eh_proj = nn.Linear(2 * h, h, bias=False)
    layer.shared_head = SharedHead(norm_cls(h, eps=eps), h, int(config.vocab_size))
    layer.embed_tokens = nn.Embedding(int(config.vocab_size), h)
    return layer


def _qwen_layer(layer_cls: type, config: Any) -> nn.Module:
    cfg = config
    cfg.layer_types = ["full_attention"] * max(1, len(getattr(cfg, "layer_types", []) or []))
    block = layer_cls(cfg, layer_idx=0)
    norm_cls = type(block.input_layernorm)
    return _QwenParts(block, norm_cls, int(cfg.hidden_size), float(cfg.rms_norm_eps))


class MTPHead(nn.Module):
    """One MTP layer of a target; ``forward`` is one draft step (module docstring).

    ``layer`` holds the parameters under the checkpoint's names; ``embed``, ``lm_head`` and
    ``rotary`` are the target's modules, shared and frozen (not in ``state_dict``).
    """

    method = "mtp"  # what decoders and measurements dispatch on

    def __init__(
        self,
        config: Any,
        layer_cls: type,
        rotary: nn.Module,
        embed: nn.Module,
        lm_head: nn.Module | None = None,
        *,
        index: int = 0,
    ):
        super().__init__()
        self.config = copy.deepcopy(text_config(config))
        if getattr(self.config, "_attn_implementation", None) is None:
            self.config._attn_implementation = "eager"  # a bare config: transformers' default
        self.style = mtp_style(config)
        self.prefix = mtp_prefix(config, index)
        n = int(self.config.num_hidden_layers)
        if self.style == "deepseek":
            self.layer = _deepseek_layer(layer_cls, self.config, n + index)
        else:
            self.layer = _qwen_layer(layer_cls, self.config)
        self._block().self_attn.layer_idx = 0  # its own cache holds one layer
        self._shared = (rotary, embed, lm_head)  # not registered: the target's, never saved
        self.trainable()

    @classmethod
    def for_target(cls, target: TargetModel, *, index: int = 0) -> MTPHead:
        """A head sized for ``target`` (a TargetModel), on its device and dtype, with the
        target's embedding, head and rotary shared; its own weights freshly initialised
        (``load_checkpoint_tensors`` or training fills them)."""
        m = target.model
        layers = target.layers
        rotary = getattr(m.get_decoder(), "rotary_emb", None)
        if rotary is None:
            raise Eagle3Error(f"{type(m).__name__}: no rotary embedding found (model.rotary_emb)")
        head = cls(
            m.config,
            type(layers[-1]),
            rotary,
            m.get_input_embeddings(),
            m.get_output_embeddings(),
            index=index,
        )
        head._init_weights()
        head.to(device=target.device, dtype=target.dtype)
        if head.style == "deepseek":
            head.copy_shared()
        return head

    def trainable(self) -> MTPHead:
        """Gradients for the head's own weights; the DeepSeek layout's copies of the target's
        embedding and output head stay frozen (FastMTP trains the MTP layer only)."""
        for name, p in self.layer.named_parameters():
            p.requires_grad_(name not in _SHARED)
        return self

    def _block(self) -> nn.Module:
        return self.layer if self.style == "deepseek" else self.layer.layers[0]

    def _init_weights(self) -> None:
        """Normal(0, initializer_range) for matrices, ones for norms (Qwen3-Next's zero-centred
        norms: zeros), as transformers initialises the target."""
        std = float(getattr(self.config, "initializer_range", 0.02))
        dev = next(self.layer.parameters()).device
        g = torch.Generator(device=dev).manual_seed(0)  # on the weights' device
        with torch.no_grad():
            for name, p in self.layer.named_parameters():
                if p.ndim >= 2:
                    p.copy_(torch.randn(p.shape, generator=g, device=dev, dtype=p.dtype) * std)
                elif "norm" in name or name.endswith("layernorm.weight"):
                    p.fill_(0.0 if self.style == "qwen3_next" else 1.0)
                else:
                    p.zero_()
            for name, b in self.layer.named_buffers():
                if name.endswith("e_score_correction_bias"):
                    b.zero_()

    def copy_shared(self) -> None:
        """DeepSeek layout: embed_tokens and shared_head.head := the target's own."""
        _, embed, lm_head = self._shared
        with torch.no_grad():
            self.layer.embed_tokens.weight.copy_(embed.weight)
            if lm_head is not None:
                self.layer.shared_head.head.weight.copy_(lm_head.weight)

    # ------------------------------------------------------------ math

    def forward(
        self,
        input_ids: torch.Tensor,  # [B, T] x_{t+1}
        hidden: torch.Tensor,  # [B, T, H] h_t: the target's, or the previous step's
        cache: Any = None,  # MTPCache
        position_ids: torch.Tensor | None = None,  # [B, T] default: continue the cache
        attn_mask: torch.Tensor | None = None,  # bool [B, 1, T, S] True = attend
    ) -> MTPOutput:
        b, t = input_ids.shape
        start = cache.length if cache is not None else 0
        if position_ids is None:
            position_ids = (start + torch.arange(t, device=input_ids.device)).expand(b, t)
        rotary, embed, lm_head = self._shared
        dtype = self.layer_dtype
        e = embed(input_ids).to(dtype)  # [B, T, H]
        hidden = hidden.to(dtype)
        if attn_mask is None:
            attn_mask = causal(t, start, input_ids.device).expand(b, 1, t, start + t)
        mask = torch.zeros(attn_mask.shape, dtype=dtype, device=e.device)
        mask.masked_fill_(~attn_mask, torch.finfo(dtype).min)  # additive, as transformers takes
        if self.style == "deepseek":
            e = e.masked_fill((position_ids == 0)[..., None], 0.0)  # vLLM: not needed at 0
            lay = self.layer
            z = lay.eh_proj(torch.cat([lay.enorm(e), lay.hnorm(hidden)], dim=-1))  # [B, T, H]
        else:
            lay = self.layer
            z = lay.fc(
                torch.cat([lay.pre_fc_norm_embedding(e), lay.pre_fc_norm_hidden(hidden)], -1)
            )
        kw = dict(
            attention_mask=mask,
            position_ids=position_ids,
            position_embeddings=rotary(z, position_ids),
        )
        if cache is not None:
            kw.update(cache=cache.kv, use_cache=True)
        z = self._block()(z, **kw)  # [B, T, H]
        if self.style == "deepseek":
            logits = self.layer.shared_head.head(self.layer.shared_head.norm(z))
            return MTPOutput(logits, z)
        z = self.layer.norm(z)
        return MTPOutput(lm_head(z), z)

    @property
    def vocab_size(self) -> int:
        return int(self._shared[1].weight.shape[0])

    @property
    def layer_dtype(self) -> torch.dtype:
        return (self.layer.eh_proj if self.style == "deepseek" else self.layer.fc).weight.dtype

    # ------------------------------------------------------------ I/O

    def checkpoint_tensors(self) -> dict[str, torch.Tensor]:
        """The head's tensors under the target checkpoint's full names (experts split)."""
        return {
            self.prefix + k: v.detach().contiguous()
            for k, v in split_experts(self.layer.state_dict()).items()
        }

    def load_checkpoint_tensors(self, tensors: dict[str, torch.Tensor], where: str) -> None:
        """Load tensors named as in the target's checkpoint (prefix included), strictly: a
        missing or unexpected name, or a wrong shape, is refused naming ``where``."""
        got = {k[len(self.prefix) :]: v for k, v in tensors.items() if k.startswith(self.prefix)}
        got = fuse_experts(got)
        own = self.layer.state_dict()
        optional = _SHARED if self.style == "deepseek" else ()
        missing = [self.prefix + n for n in own if n not in got and n not in optional]
        extra = [self.prefix + n for n in got if n not in own]
        if missing or extra:
            raise bad(where, f"MTP layer {self.prefix}*: {tensor_problems(missing, extra)}")
        for n, v in got.items():
            if tuple(v.shape) != tuple(own[n].shape):
                raise bad(
                    where,
                    f"{self.prefix}{n}: expected shape {list(own[n].shape)}, found {list(v.shape)}",
                )
        if self.style == "deepseek":
            self.copy_shared()  # then the file's own copies, when it has them
        self.layer.load_state_dict({**self.layer.state_dict(), **got}, strict=True)


def causal(t: int, start: int, device: Any) -> torch.Tensor:
    """bool [1, 1, t, start + t]: each of t new positions sees the cache and itself back."""
    cols = torch.arange(start + t, device=device)
    rows = start + torch.arange(t, device=device)
    return (cols[None, :] <= rows[:, None])[None, None]


def split_experts(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' fused experts (``experts.gate_up_proj`` [E, 2I, H], ``experts.down_proj``
    [E, H, I]) as the per-expert ``experts.{e}.{gate,up,down}_proj.weight`` files carry."""
    out: dict[str, torch.Tensor] = {}
    for k, v in state.items():
        m = _FUSED.match(k)
        if not m:
            out[k] = v
            continue
        for e in range(v.shape[0]):
            if m.group(2) == "down_proj":
                out[f"{m.group(1)}.{e}.down_proj.weight"] = v[e]
            else:
                gate, up = v[e].chunk(2, dim=0)
                out[f"{m.group(1)}.{e}.gate_proj.weight"] = gate
                out[f"{m.group(1)}.{e}.up_proj.weight"] = up
    return out


def fuse_experts(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of ``split_experts`` (an expert missing a part is left unfused: the strict
    check then names it)."""
    out: dict[str, torch.Tensor] = {}
    groups: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    for k, v in tensors.items():
        m = _PER_EXPERT.match(k)
        if m:
            groups.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = v
        else:
            out[k] = v
    for base, experts in groups.items():
        ids = sorted(experts)
        whole = ids == list(range(len(ids))) and all(len(p) == 3 for p in experts.values())
        if not whole:
            for e, parts in experts.items():
                out.update({f"{base}.{e}.{p}.weight": t for p, t in parts.items()})
            continue
        out[f"{base}.gate_up_proj"] = torch.stack(
            [torch.cat([experts[e]["gate_proj"], experts[e]["up_proj"]], 0) for e in ids]
        )
        out[f"{base}.down_proj"] = torch.stack([experts[e]["down_proj"] for e in ids])
    return out


class MTPCache:
    """The head's own KV cache (a transformers DynamicCache of one layer), with ``length``
    and ``crop`` as the EAGLE drafter's DraftCache has them."""

    def __init__(self) -> None:
        from transformers import DynamicCache

        self.kv = DynamicCache()

    @property
    def length(self) -> int:
        return int(self.kv.get_seq_length())

    def crop(self, n: int) -> None:
        if n < self.length:
            self.kv.crop(n - self.length)  # a negative count removes that many


class FinalNormTap:
    """The hidden state a target's model returns (its final norm's output, [B, T, H]), kept
    by a forward hook on that norm: what an MTP head reads as h_t (vLLM passes the same)."""

    def __init__(self, target: TargetModel) -> None:
        norm = getattr(target.model.get_decoder(), "norm", None)
        if norm is None:
            raise Eagle3Error(f"{type(target.model).__name__}: no final norm (model.norm) found")
        self._seen: torch.Tensor | None = None
        self._hook = norm.register_forward_hook(self._keep)

    def _keep(self, module: nn.Module, args: Any, output: torch.Tensor) -> None:
        self._seen = output

    def take(self) -> torch.Tensor:
        """The last forward's final hidden states (then forgotten)."""
        if self._seen is None:
            raise Eagle3Error("no target forward since the last take()")
        seen, self._seen = self._seen, None
        return seen

    def close(self) -> None:
        self._hook.remove()


# The standalone head dir (methods/mtp/checkpoint/heads.py ``extract_mtp``'s layout, which
# ``stitch_mtp``
# puts back): tensors under canonical names (methods/mtp/checkpoint/layout.py), config.json's
# ``eagle3kit_mtp.names`` mapping each canonical name to the target checkpoint's.


def canonical_names(head: MTPHead) -> dict[str, str]:
    """canonical name -> the target checkpoint's name, for every tensor of ``head``."""
    out = {}
    for stored in head.checkpoint_tensors():
        rel = stored[len(head.prefix) :]
        if head.style == "qwen3_next":
            rel = QWEN_CANON.get(rel, rel.removeprefix("layers.0."))
        out[rel] = stored
    return out


def head_config(path: str | Path) -> dict[str, Any] | None:
    """A head dir's ``eagle3kit_mtp`` record, or None when ``path`` is not one."""
    import json

    try:
        doc = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return head_record(doc)


def read_head_tensors(model_dir: str | Path, prefix: str) -> dict[str, torch.Tensor]:
    """The head's tensors by the target checkpoint's names: from a head dir (canonical names
    mapped back by its config), else every tensor under ``prefix`` of a target dir (headers
    first, then only those tensors)."""
    from eagle3kit.checkpoint.io.safetensors_io import load_local
    from eagle3kit.checkpoint.io.tensor_read import read_tensor

    ckpt = load_local(model_dir)
    rec = head_config(model_dir)
    if rec is not None:
        names = rec["names"]
        lost = sorted(set(names) - set(ckpt.names()))
        if lost:
            raise bad(
                str(model_dir),
                f"{len(lost)} tensor(s) its config names are missing ({', '.join(lost[:3])})",
            )
        return {stored: read_tensor(ckpt, canon) for canon, stored in names.items()}
    names = [n for n in ckpt.names() if n.startswith(prefix)]
    if not names:
        raise bad(str(model_dir), f"expected MTP tensors {prefix}*, found none")
    return {n: read_tensor(ckpt, n) for n in names}


def load_mtp_head(
    target: TargetModel, source: str | Path | None = None, *, index: int = 0
) -> MTPHead:
    """The target's MTP head ``index``, read from ``source`` (a dir holding its tensors under
    the target's names; default: the target's own dir). Refused when the config has none."""
    src = Path(source or target.name_or_path)
    cfg = target.config
    if source is None and mtp_count(cfg) <= index:
        raise bad(
            f"{src}/config.json",
            f"expected num_nextn_predict_layers > {index}, found "
            f"{mtp_count(cfg)}: this target ships no MTP head (train one: train --method mtp)",
        )
    head = MTPHead.for_target(target, index=index)
    head.load_checkpoint_tensors(read_head_tensors(src, head.prefix), str(src))
    return head.eval().requires_grad_(False)


def is_head_dir(path: str | Path | None) -> bool:
    """A standalone MTP head dir (``train --method mtp``, ``convert`` extract)."""
    return path is not None and head_config(path) is not None


def load_pair(
    target: str, head: str | None = None, *, device: str = "cpu", dtype: Any = "float32"
) -> tuple[Any, MTPHead]:
    """(TargetModel, its MTP head): the head from ``head`` (a head dir) or the target's own
    (what `generate`, `eval` and `bench --method mtp` run; model/loading.py `load_for`)."""
    from eagle3kit.model.loading import load_target

    tm = load_target(target, device=device, dtype=dtype)
    return tm, load_mtp_head(tm, head)
