"""DSparkDrafter: a DFlash block drafter (methods/dflash/model.py) with DSpark's two heads
(speculators 0.9.0 `models/dspark/{core,model_definitions}.py`; vLLM 0.33
`v1/worker/gpu/spec_decode/dspark/speculator.py` `_sample_sequential`).

One backbone pass gives each slot's hidden h_k and base logits z_k = lm_head(h_k) (draft
vocabulary). The Markov head then corrects slot k by the token before it, prev_k (a target id):

    e_k      = markov_w1[prev_k]                                    [r]
    vanilla  bias_k = markov_w2 e_k
    gated    bias_k = markov_w2 (sigmoid(gate_proj([h_k; e_k])) * e_k)
    rnn      s_0 = 0; g, c, o = joint_proj([s_{k-1}; e_k; h_k]);
             s_k = σ(g) s_{k-1} + (1-σ(g)) tanh(c);
             bias_k = markov_w2 tanh(o)
    logits_k = z_k + bias_k;     confidence_k = proj([h_k; e_k]) (or proj(h_k))

Which slots draft and what prev_k is (sample_from_anchor, speculators' default): the block is
[x_p, mask × (N-1)] at positions p..p+N-1, slot k drafts x_{p+k+1}, prev_0 = x_p and prev_k =
the draft of slot k-1 (decoding) or the true x_{p+k} (training); without it the block is
[x_p, mask × N], slots 1..N draft x_{p+k}, prev_1 = x_p, prev_k = slot k-1's token. Decoding
draws the slots one after the other, each from its corrected logits (`propose`), as vLLM does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from eagle3kit.core.errors import bad
from eagle3kit.methods.dflash.checkpoint.spec import DFlashSpec
from eagle3kit.methods.dflash.model import DFlashDrafter
from eagle3kit.methods.dspark.checkpoint.spec import DSparkSpec
from eagle3kit.model.loading import LoadedDrafter
from eagle3kit.model.target import parse_dtype

METHOD = "dspark"


class MarkovHead(nn.Module):
    """markov_w1 [V, r], markov_w2 [Vd, r] (and the gated/rnn projections)."""

    def __init__(self, spec: DSparkSpec):
        super().__init__()
        r, h = spec.markov_rank, spec.hidden_size
        self.kind = spec.markov_head_type
        self.markov_w1 = nn.Embedding(spec.vocab_size, r)
        self.markov_w2 = nn.Linear(r, spec.draft_vocab_size, bias=False)
        if self.kind == "gated":
            self.gate_proj = nn.Linear(h + r, r)
        elif self.kind == "rnn":
            self.joint_proj = nn.Linear(2 * r + h, 3 * r)

    def step(self, e: torch.Tensor, h: torch.Tensor, state: torch.Tensor | None):
        """(bias [..., Vd], the next state) of one slot from e [..., r] and h [..., H]."""
        if self.kind == "vanilla":
            return self.markov_w2(e), state
        if self.kind == "gated":
            gate = torch.sigmoid(self.gate_proj(torch.cat([h.to(e.dtype), e], dim=-1)))
            return self.markov_w2(gate * e), state
        state = torch.zeros_like(e) if state is None else state
        g, c, o = self.joint_proj(torch.cat([state, e, h.to(e.dtype)], dim=-1)).chunk(3, dim=-1)
        g = torch.sigmoid(g)
        state = g * state + (1.0 - g) * torch.tanh(c)
        return self.markov_w2(torch.tanh(o)), state

    def block(self, prev_ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Teacher-forced biases [..., B, Vd] of slots whose previous tokens are prev_ids."""
        e = self.markov_w1(prev_ids.long())  # [..., B, r]
        if self.kind != "rnn":
            return self.step(e, hidden, None)[0]
        out, state = [], None
        for k in range(e.shape[-2]):
            b, state = self.step(e[..., k, :], hidden[..., k, :], state)
            out.append(b)
        return torch.stack(out, dim=-2)


class ConfidenceHead(nn.Module):
    def __init__(self, spec: DSparkSpec):
        super().__init__()
        extra = spec.markov_rank if spec.confidence_head_with_markov else 0
        self.proj = nn.Linear(spec.hidden_size + extra, 1)


class DSparkDrafter(DFlashDrafter):
    """A DFlash drafter with DSpark's heads (module docstring); `spec` is the backbone's,
    `dspark` the whole DSparkSpec."""

    method = METHOD
    # the block loss's slot weights [B] for the confidence loss (given by its train part,
    # methods/dspark/train.py, which owns the training rules); None: not trained here
    slot_weights = None

    def __init__(
        self,
        spec: DSparkSpec,
        *,
        own_head: bool = False,
        own_embed: bool | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__(
            spec.backbone, own_head=own_head, own_embed=own_embed, device=device, dtype=dtype
        )
        self.dspark = spec
        with torch.device(device):
            if spec.markov_rank > 0:
                self.markov_head = MarkovHead(spec)
            if spec.enable_confidence_head:
                self.confidence_head = ConfidenceHead(spec)
        self.to(dtype=dtype)

    @staticmethod
    def check_buildable(spec: DFlashSpec) -> None:
        if spec.variant != METHOD:
            raise bad(
                f"{spec.architecture} config", f"variant: expected dspark, found {spec.variant}"
            )

    # ------------------------------------------------------------ the heads

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The base logits over the draft vocabulary [..., Vd] (no scatter)."""
        w = self._io()[1]
        return F.linear(hidden.to(w.dtype), w)

    def to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids] if self.spec.has_vocab_map else draft_ids

    def head_logits(self, hidden: torch.Tensor, prev_ids: torch.Tensor):
        """Teacher-forced (logits [..., B, Vd], confidence logits [..., B] or None) of block
        states [..., B, H] whose previous tokens are prev_ids [..., B] (target ids)."""
        logits = self.draft_logits(hidden).float()
        e = None
        if hasattr(self, "markov_head"):
            logits = logits + self.markov_head.block(prev_ids, hidden).float()
            e = self.markov_head.markov_w1(prev_ids.long())
        return logits, self._confidence(hidden, e)

    def _confidence(self, hidden: torch.Tensor, e: torch.Tensor | None):
        if not hasattr(self, "confidence_head"):
            return None
        x = (
            hidden
            if not self.dspark.confidence_head_with_markov
            else torch.cat([hidden, e.to(hidden.dtype)], dim=-1)
        )
        return self.confidence_head.proj(x.to(self.confidence_head.proj.weight.dtype))[..., 0]

    def train_logits(self, hidden: torch.Tensor, prev_ids: torch.Tensor) -> torch.Tensor:
        """The Markov-corrected logits on the target's vocabulary (-inf off the draft one)."""
        logits = self.head_logits(hidden, prev_ids)[0]
        if not self.spec.has_vocab_map:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.spec.vocab_size), float("-inf"))
        ids = torch.arange(self.spec.draft_vocab_size, device=logits.device) + self.d2t
        return full.index_copy(-1, ids, logits)

    def aux_loss_terms(self, hidden, prev_ids, logits, feats, blocks) -> tuple | None:
        """The confidence head's BCE against each counted slot's acceptance a_k = 1 -
        TV(drafter, target) (detached), weighted as the block loss (speculators
        `models/dspark/metrics.py`, alpha 1)."""
        if not hasattr(self, "confidence_head") or self.slot_weights is None:
            return None
        conf = self.head_logits(hidden, prev_ids)[1]
        with torch.no_grad():  # the target's law of each slot's token: its logits one before
            at = (blocks.src - 1).clamp(min=0)  # [Bt, N, B]
            bt, n, b = at.shape
            flat = at.reshape(bt, n * b, 1).expand(-1, -1, feats.teacher_logp.shape[-1])
            t = feats.teacher_logp.float().gather(1, flat).view(bt, n, b, -1).exp()
            a = 1.0 - 0.5 * (logits.float().softmax(-1) - t).abs().sum(-1)
        w = self.slot_weights(logits.shape[2], logits.device) * blocks.valid
        ell = F.binary_cross_entropy_with_logits(conf.float(), a.clamp(0, 1), reduction="none")
        return (w * ell).sum(), w.sum()

    @torch.no_grad()
    def chain(self, rows: torch.Tensor, first_prev: torch.Tensor) -> torch.Tensor:
        """Greedy drafts [C, K] (target ids) of C blocks at once from their slots' states rows
        [C, K, H] and the tokens before their first slots [C]: `propose` without its stops."""
        base = self.draft_logits(rows).float()  # [C, K, Vd]
        prev, state, out = first_prev, None, []
        for k in range(rows.shape[1]):
            z = base[:, k]
            if hasattr(self, "markov_head"):
                e = self.markov_head.markov_w1(prev)
                bias, state = self.markov_head.step(e, rows[:, k], state)
                z = z + bias.float()
            prev = self.to_target(z.argmax(-1))
            out.append(prev)
        return torch.stack(out, dim=1)

    @torch.no_grad()
    def propose(self, rows: torch.Tensor, first_prev: int, *, min_confidence=None, topk=None):
        """The block's drafts (target ids) from its slots' states rows [K, H], drawn one after
        the other with the Markov correction (greedy); with `min_confidence` the block stops
        before the first slot whose running product of confidences falls below it (one slot at
        least); `topk`: the correction over the base logits' top k only (vLLM's
        `dspark_draft_topk`)."""
        base = self.draft_logits(rows).float()  # [K, Vd]
        prev = torch.tensor([first_prev], device=rows.device)
        out, state, keep = [], None, 1.0
        for k in range(rows.shape[0]):
            z, e = base[k], None
            if hasattr(self, "markov_head"):
                e = self.markov_head.markov_w1(prev)[0]
                bias, state = self.markov_head.step(e, rows[k], state)
                z = _corrected(z, bias.float(), topk)
            if min_confidence is not None and out:
                c = self._confidence(rows[k], e)
                keep *= float(torch.sigmoid(c.float())) if c is not None else 1.0
                if keep < min_confidence:
                    break
            prev = self.to_target(z.argmax(-1, keepdim=True))
            out.append(int(prev[0]))
        return out

    # ------------------------------------------------------------ I/O

    def save_tensors(self, path: str | Path, tensors: dict[str, torch.Tensor]) -> Path:
        from eagle3kit.core.atomic import atomic_dir
        from eagle3kit.methods.dspark.checkpoint.write import save_dspark

        dt = str(tensors["fc.weight"].dtype).removeprefix("torch.")
        spec = self.dspark.replace(backbone=self.dspark.backbone.replace(dtype=dt))
        with atomic_dir(Path(path)) as tmp:
            save_dspark(tmp / "d", spec, tensors)
            for f in (tmp / "d").iterdir():
                f.rename(tmp / f.name)
            (tmp / "d").rmdir()
        return Path(path)

    @classmethod
    def from_pretrained(cls, path, *, device="cpu", dtype=None) -> DSparkDrafter:
        from eagle3kit.methods.dspark.checkpoint.read import read_dspark

        spec, tensors, head = read_dspark(str(path))
        dt = dtype if isinstance(dtype, torch.dtype) else None
        return cls.from_dspark(spec, tensors, device=device, dtype=dt, where=head.source)

    @classmethod
    def from_dspark(
        cls, spec: DSparkSpec, tensors, *, device="cpu", dtype=None, where="checkpoint"
    ) -> DSparkDrafter:
        """A drafter holding exactly `tensors` (missing, extra or misshapen ones refused)."""
        b = spec.backbone
        if b.has_vocab_map and "lm_head.weight" not in tensors:
            raise bad(where, "lm_head.weight: missing (a reduced draft vocabulary needs its own)")
        if "t2d" in tensors and "t2d" not in b.tensors:
            spec = spec.replace(backbone=b.replace(tensors=tuple(sorted({*b.tensors, "t2d"}))))
        flags = {
            "own_head": "lm_head.weight" in tensors,
            "own_embed": "embed_tokens.weight" in tensors,
        }
        dt = dtype or getattr(torch, b.dtype, torch.float32)
        d = cls(spec, **flags, device=device, dtype=dt)
        own = d.state_dict()
        missing, extra = sorted(set(own) - set(tensors)), sorted(set(tensors) - set(own))
        if missing or extra:
            raise bad(where, f"DSpark tensors: missing {missing[:4]}, unexpected {extra[:4]}")
        for n, t in tensors.items():
            if tuple(t.shape) != tuple(own[n].shape):
                raise bad(where, f"{n}: expected shape {list(own[n].shape)}, found {list(t.shape)}")
        d.load_state_dict(tensors, strict=True)
        return d


def _corrected(z: torch.Tensor, bias: torch.Tensor, topk: int | None) -> torch.Tensor:
    if topk is None:
        return z + bias
    idx = z.topk(min(topk, z.shape[-1])).indices
    out = torch.full_like(z, float("-inf"))
    return out.index_copy(0, idx, z[idx] + bias[idx])


def load_drafter(path: str, *, device: str = "cpu", dtype: Any = "float32") -> LoadedDrafter:
    """A DSpark drafter in speculators' or SpecForge's layout."""
    d = DSparkDrafter.from_pretrained(path, device=device, dtype=parse_dtype(dtype))
    return LoadedDrafter(d.eval().requires_grad_(False), d.spec, f"dspark-{d.dspark.layout}")


def from_dflash(dflash: DFlashDrafter, spec: DSparkSpec, *, seed: int = 0) -> DSparkDrafter:
    """A warm start from a DFlash drafter: every backbone tensor kept, the heads fresh
    (seeded; speculators' init: markov_w1 ~ N(0, 0.01²))."""
    w = dflash.fc.weight
    torch.manual_seed(seed)
    own = {"own_head": hasattr(dflash, "lm_head"), "own_embed": hasattr(dflash, "embed_tokens")}
    out = DSparkDrafter(spec, **own, device=w.device, dtype=w.dtype)
    if hasattr(out, "markov_head"):
        nn.init.normal_(out.markov_head.markov_w1.weight, std=0.01)
    missing = out.load_state_dict(dflash.state_dict(), strict=False).missing_keys
    fresh = [n for n in missing if not n.startswith(("markov_head.", "confidence_head."))]
    if fresh:
        raise bad("--init-from", f"DFlash tensors not in the DSpark drafter: {fresh[:4]}")
    out.target_io = dflash.target_io
    return out
