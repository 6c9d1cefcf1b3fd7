"""PEagleDrafter: P-EAGLE (parallel drafting, arXiv 2602.01469) as an nn.Module.

An EAGLE-3 drafter with one more learned tensor, `mask_hidden` [1, 1, 3*Ht], and a mask token
(`mask_token_id`; vLLM's configs call it `pard_token` or `ptd_token_id`). It drafts K tokens
in one causal pass instead of K sequential steps: after the usual EAGLE-3 pass over the new
pairs (aux_t, x_{t+1}), whose last output drafts d_1, the K-1 later slots run together:

    slot j (j = 1..K-1), rotary position m-1+j (m-1: the last cached pair's position)
      token   mask_token_id                      (its embedding, as any token)
      hidden  fc(mask_hidden)                    (through input_norm / fc_norm as aux is)
      sees    the drafter's cache (every real pair) and slots 1..j   (causal)
      drafts  d_{j+1} = argmax lm_head(norm(h_j))

That is vLLM's PEagleSpeculator (vllm/v1/worker/gpu/spec_decode/eagle/peagle.py: pard slots
after the last valid token, positions last+1.., `mask_hidden` projected by
`combine_hidden_states`) and speculators' training forward (src/speculators/models/peagle/
core.py: depth d>0 reads the mask token and `mask_hidden`, position anchor+d, causal over
depth-0 context and the earlier depths of its own chain). docs/train.md "P-EAGLE".

The slots never read the drafts d_1..d_{j}: the K drafts are conditionally independent given
the context, which is what makes one pass enough. Verification is EAGLE-3's chain, so decoding
stays lossless (methods/peagle/decode.py).

Published P-EAGLE drafters have 2-4 decoder layers. Layer 0 is EAGLE-3's (`midlayer`: q/k/v
read cat(input_layernorm(embed), hidden_norm(h)), 2H wide); layers 1.. are standard pre-norm
decoder layers over the H-wide stream (`layers.{i}`: h += attn(input_layernorm(h)); h +=
mlp(post_attention_layernorm(h))), each with its own KV cache, at the same positions and under
the same mask as layer 0; `norm` and `lm_head` read the last layer's output, which is also
the hidden a later step reads. That is vLLM's `llama_eagle3.py` (`LlamaDecoderLayer`: qkv input
2H for layer_idx 0, H after; one attention layer, so one KV cache, per decoder layer; the
model's final norm over the last layer) and speculators' `Eagle3DraftModel` (first layer
`Eagle3FirstLayerMixin`, the rest plain `LlamaDecoderLayer`/`Qwen3DecoderLayer`, one
`DynamicCache` slot per layer_idx), which `PEagleDraftModel` inherits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from eagle3kit.core.errors import bad
from eagle3kit.core.spec import DraftSpec
from eagle3kit.methods.peagle.checkpoint.read import TOKEN_KEYS, read_peagle
from eagle3kit.methods.peagle.checkpoint.spec import MASK_HIDDEN
from eagle3kit.model.attention import Attention, RMSNorm
from eagle3kit.model.completeness import tensor_problems
from eagle3kit.model.drafter import DRAFTER_FIX, MLP, DraftCache, DraftOutput, Eagle3Drafter
from eagle3kit.model.loading import LoadedDrafter
from eagle3kit.model.target import parse_dtype


class DecoderLayer(nn.Module):
    """A standard pre-norm decoder layer over the H-wide stream (a drafter's layers 1..)."""

    def __init__(self, spec: DraftSpec):
        super().__init__()
        self.input_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.self_attn = Attention(spec, in_features=spec.hidden_size)
        self.post_attention_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.mlp = MLP(spec)

    def forward(
        self,
        h: torch.Tensor,
        pos: torch.Tensor,
        cache: DraftCache | None,
        attn_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), pos, cache, attn_mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class PEagleDrafter(Eagle3Drafter):
    """An EAGLE-3 drafter that also drafts K tokens in one pass (module docstring), with
    `num_layers` decoder layers."""

    parallel = True
    method = "peagle"

    def __init__(
        self,
        spec: DraftSpec,
        *,
        mask_token_id: int,
        num_layers: int = 1,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__(spec, device=device, dtype=dtype)
        if not 0 <= int(mask_token_id) < spec.vocab_size:
            raise bad(
                "mask_token_id",
                f"expected a token id below the target's vocabulary ({spec.vocab_size}), "
                f"found {mask_token_id}",
            )
        _check_layers(spec, num_layers)
        self.mask_token_id = int(mask_token_id)
        self.num_layers = int(num_layers)
        with torch.device(device):  # speculators' init: a standard normal [1, 1, 3Ht]
            self.mask_hidden = nn.Parameter(torch.randn(1, 1, spec.fc_in_features, dtype=dtype))
            if num_layers > 1:
                self.layers = nn.ModuleDict(
                    {str(i): DecoderLayer(spec) for i in range(1, num_layers)}
                ).to(dtype=dtype)

    @property
    def cache_carriers(self) -> tuple[str, ...]:
        later = [(f"layers.{i}", f"layers.{i}.self_attn") for i in range(1, self.num_layers)]
        extra = ("layers", *(n for pair in later for n in pair)) if later else ()
        return (*Eagle3Drafter.cache_carriers, *extra)

    def run_layers(
        self,
        emb: torch.Tensor,
        h: torch.Tensor,
        pos: torch.Tensor,
        cache: DraftCache | None,
        attn_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Layer 0 (EAGLE-3's), then layers 1.. each on its own cache (module docstring)."""
        h = self.midlayer(emb, h, pos, cache, attn_mask)
        for i in range(1, self.num_layers):
            own = cache.layer(i) if cache is not None else None
            h = self.layers[str(i)](h, pos, own, attn_mask)
        return h

    def blank(self, spec: DraftSpec) -> PEagleDrafter:
        w = self.fc.weight
        return type(self)(
            spec,
            mask_token_id=self.mask_token_id,
            num_layers=self.num_layers,
            device=w.device,
            dtype=w.dtype,
        )

    def slot_inputs(self, b: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids [b, n] all mask_token_id, aux-space hidden [b, n, 3Ht] all mask_hidden)."""
        ids = torch.full((b, n), self.mask_token_id, dtype=torch.long, device=self.d2t.device)
        h = self.mask_hidden
        h = h.to_local() if hasattr(h, "to_local") else h  # replicated under FSDP2 (train/)
        return ids, h.expand(b, n, -1)

    def step_inputs(
        self, i: int, ids: torch.Tensor, hidden: torch.Tensor, from_aux: bool
    ) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """Unrolled step i >= 1 (train/ttt.py) is parallel depth i: the mask token and
        mask_hidden [B, T, 3Ht] at every position."""
        if i == 0:
            return ids, hidden, from_aux
        slot_ids, slot_hidden = self.slot_inputs(*ids.shape)
        return slot_ids, slot_hidden, True

    def parallel_slots(
        self,
        n: int,
        cache: DraftCache,
        position_ids: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
    ) -> DraftOutput:
        """The n = K-1 parallel slots after the cache, in one pass: logits [1, n, Vd] of the
        drafts d_2..d_K (their keys are appended to the cache; crop it after)."""
        ids, hid = self.slot_inputs(1, n)
        return self(ids, hid, cache, position_ids, attn_mask, from_aux=True)

    def load_canonical(
        self, tensors: dict[str, torch.Tensor], *, where: str = "drafter checkpoint"
    ) -> None:
        if MASK_HIDDEN not in tensors:
            raise bad(where, f"missing {MASK_HIDDEN} (P-EAGLE's learned slot state); {DRAFTER_FIX}")
        later = [n for n in self.state_dict() if n.startswith("layers.") and n not in tensors]
        if later:  # never a random weight: every later layer's tensor is in the checkpoint
            raise bad(where, f"{tensor_problems(later, [])}; {DRAFTER_FIX}")
        super().load_canonical(tensors, where=where)

    @classmethod
    def from_eagle3(cls, m: Eagle3Drafter, mask_token_id: int, *, seed: int = 0) -> PEagleDrafter:
        """Warm start from an EAGLE-3 drafter: every weight, the vocab map (d2t/t2d) and the
        embedding kept; `mask_hidden` added (seeded standard normal, speculators' init)."""
        w = m.fc.weight
        torch.manual_seed(seed)
        out = cls(m.spec, mask_token_id=mask_token_id, device=w.device, dtype=w.dtype)
        tensors = m.canonical_state(with_embedding=True)
        tensors[MASK_HIDDEN] = out.mask_hidden.detach().clone()
        out.load_canonical(tensors)
        out.embed_loaded = m.embed_loaded
        return out

    @classmethod
    def config_args(cls, config: dict[str, Any], where: str) -> dict[str, Any]:
        """The mask token (`mask_token_of`) and the number of layers; `from_pretrained` and
        `from_read` are Eagle3Drafter's."""
        layer = config.get("transformer_layer_config", config)
        n = layer.get("num_hidden_layers", 1) if isinstance(layer, dict) else 1
        return {"mask_token_id": mask_token_of(config, where), "num_layers": n}


def _check_layers(spec: DraftSpec, n: Any) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise bad("num_hidden_layers", f"expected an int >= 1, found {n!r}")
    if n > 1 and spec.is_mla:
        raise bad(
            "num_hidden_layers",
            f"expected 1 for a P-EAGLE drafter with latent attention (MLA), found {n} "
            "(vLLM's and speculators' later layers are Llama/Qwen3 attention)",
        )


def load_drafter(path: str, *, device: str = "cpu", dtype: Any = "float32") -> LoadedDrafter:
    """A P-EAGLE drafter (speculators `peagle` or vLLM native, 1 or more layers), its
    checkpoint read once by its one reader (methods/peagle/checkpoint/read.py: layer 0 and the
    shared tensors by EAGLE-3's reader, `layers.{i}.*`, mask_hidden viewed as [1, 1, 3Ht]
    whatever its stored shape), the mask token from its config."""
    spec, tensors, head = read_peagle(str(path))
    d = PEagleDrafter.from_tensors(
        spec.draft,
        tensors,
        device=device,
        dtype=parse_dtype(dtype),
        where=str(path),
        mask_token_id=spec.mask_token_id,
        num_layers=spec.num_hidden_layers,
    )
    return LoadedDrafter(d.eval().requires_grad_(False), spec.draft, head.layout)


def mask_token_of(cfg: dict[str, Any], where: str) -> int:
    """The mask token from a config (methods/peagle/checkpoint/read.py `TOKEN_KEYS`:
    speculators `mask_token_id`, vLLM `pard_token` or `ptd_token_id`); refused when none is
    an int."""
    for key in TOKEN_KEYS:
        v = cfg.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    raise bad(where, f"config.json: expected one of {', '.join(TOKEN_KEYS)}, found none")


def save_peagle(
    out: str | Path,
    spec: DraftSpec,
    tensors: dict[str, torch.Tensor],
    mask_token_id: int,
    verifier: str | None,
) -> dict[str, Any]:
    """A servable P-EAGLE directory in speculators' `peagle` layout (vLLM >= 0.16 serves it
    with `"parallel_drafting": true`): the EAGLE-3 speculators layout
    (checkpoint.convert.save_drafter, "vllm") plus `mask_hidden` [1, 1, 3Ht] and
    `speculators_model_type: "peagle"`, `mask_token_id` in config.json, and layers 1.. as
    `layers.{i}.*` (`num_hidden_layers` counts them). `tensors`: canonical names (the
    embedding is left out). The folder is swapped in whole.

    A minimal writer of our own until the checkpoint layer writes P-EAGLE itself."""
    from safetensors.torch import load_file

    from eagle3kit.checkpoint.eagle3.convert import save_drafter, without_identity_maps
    from eagle3kit.checkpoint.eagle3.layouts import set_layer_count
    from eagle3kit.checkpoint.io.safetensors_write import write_safetensors_sparse
    from eagle3kit.core.atomic import atomic_dir, atomic_write_json

    state = {k: v for k, v in tensors.items() if k not in ("embed_tokens.weight", MASK_HIDDEN)}
    if spec.draft_vocab_size == spec.vocab_size:  # as speculators saves one; vLLM 0.33 refuses
        state = without_identity_maps(state)  # a full-vocabulary file carrying d2t
    mask = tensors[MASK_HIDDEN].detach().float().cpu()
    layers = 1 + len({n.split(".")[1] for n in state if n.startswith("layers.")})
    spec = spec.replace(tensors=tuple(sorted(state)), dtype="float32")
    with atomic_dir(out) as tmp:
        cfg = dict(save_drafter(tmp, spec, state, "vllm", verifier=verifier, overwrite=True))
        f = tmp / "model.safetensors"
        stored = load_file(str(f))
        stored[MASK_HIDDEN] = mask
        write_safetensors_sparse(f, stored, {"format": "pt", "eagle3kit_layout": "peagle"})
        cfg.update(
            speculators_model_type="peagle",
            architectures=["PEagleSpeculator"],
            mask_token_id=int(mask_token_id),
        )
        if isinstance(cfg.get("transformer_layer_config"), dict):
            set_layer_count(cfg["transformer_layer_config"], layers)
        if isinstance(cfg.get("speculators_config"), dict):
            cfg["speculators_config"]["algorithm"] = "peagle"
        atomic_write_json(tmp / "config.json", cfg)
    return cfg
