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
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from eagle3kit.checkpoint.eagle3.reader import read_drafter
from eagle3kit.core.errors import bad
from eagle3kit.core.spec import DraftSpec
from eagle3kit.methods.peagle.checkpoint.read import TOKEN_KEYS, is_peagle_config
from eagle3kit.methods.peagle.checkpoint.spec import MASK_HIDDEN
from eagle3kit.model.drafter import DRAFTER_FIX, DraftCache, DraftOutput, Eagle3Drafter
from eagle3kit.model.loading import LoadedDrafter
from eagle3kit.model.target import parse_dtype


class PEagleDrafter(Eagle3Drafter):
    """An EAGLE-3 drafter that also drafts K tokens in one pass (module docstring)."""

    parallel = True
    method = "peagle"

    def __init__(
        self,
        spec: DraftSpec,
        *,
        mask_token_id: int,
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
        self.mask_token_id = int(mask_token_id)
        with torch.device(device):  # speculators' init: a standard normal [1, 1, 3Ht]
            self.mask_hidden = nn.Parameter(torch.randn(1, 1, spec.fc_in_features, dtype=dtype))

    def blank(self, spec: DraftSpec) -> PEagleDrafter:
        w = self.fc.weight
        return type(self)(spec, mask_token_id=self.mask_token_id, device=w.device, dtype=w.dtype)

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
        """The mask token (`mask_token_of`); `from_pretrained` and `from_read` are
        Eagle3Drafter's."""
        return {"mask_token_id": mask_token_of(config, where)}


def load_drafter(path: str, *, device: str = "cpu", dtype: Any = "float32") -> LoadedDrafter:
    """A P-EAGLE drafter (speculators `peagle` or vLLM native), its checkpoint read once by
    EAGLE-3's reader (its layer 0 and shared tensors, and mask_hidden), the mask token from
    its config."""
    refuse_extra_layers(path)
    spec, tensors, head = read_drafter(str(path))
    cfg = head.ckpt.config
    d = PEagleDrafter.from_read(spec, tensors, cfg, device, parse_dtype(dtype), str(path))
    return LoadedDrafter(d.eval().requires_grad_(False), spec, head.layout)


def refuse_extra_layers(path: str | Path) -> None:
    """One line for a local P-EAGLE checkpoint with more than one decoder layer, before the
    EAGLE-3 reader refuses it as an EAGLE-3 drafter. inspect/compat/convert read such
    checkpoints (methods/peagle/checkpoint); running one is not built: speculators' layers 1..
    (PEagleDraftModel over Eagle3DraftModel's `layers`) are plain decoder layers over the
    first one's output, each with its own KV cache, which this module (one `midlayer`, one
    DraftCache threaded through every decoder and the TTT unroll) does not hold."""
    f = Path(path).expanduser() / "config.json"
    try:
        cfg = json.loads(f.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(cfg, dict) or not is_peagle_config(cfg):
        return
    layer = cfg.get("transformer_layer_config", cfg)
    n = layer.get("num_hidden_layers", 1) if isinstance(layer, dict) else 1
    if isinstance(n, int) and n > 1:
        raise bad(
            str(f),
            f"num_hidden_layers: expected 1 to decode, evaluate or train a P-EAGLE drafter, "
            f"found {n} (inspect, compat and convert read it; running layers 1.. is not built)",
        )


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
    `speculators_model_type: "peagle"`, `mask_token_id` in config.json. `tensors`: canonical
    names (the embedding is left out). The folder is swapped in whole.

    A minimal writer of our own until the checkpoint layer writes P-EAGLE itself."""
    from safetensors.torch import load_file

    from eagle3kit.checkpoint.eagle3.convert import save_drafter
    from eagle3kit.checkpoint.io.safetensors_write import write_safetensors_sparse
    from eagle3kit.core.atomic import atomic_dir, atomic_write_json

    state = {k: v for k, v in tensors.items() if k not in ("embed_tokens.weight", MASK_HIDDEN)}
    mask = tensors[MASK_HIDDEN].detach().float().cpu()
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
        if isinstance(cfg.get("speculators_config"), dict):
            cfg["speculators_config"]["algorithm"] = "peagle"
        atomic_write_json(tmp / "config.json", cfg)
    return cfg
