"""Training features from a target: the ONE function that online and offline training share.

For a batch of token ids, the drafter learns from (per position t):

- ``aux[t]`` = cat(h[a_1][t], h[a_2][t], h[a_3][t]): the target's hidden states at its aux
  layers (HF ``output_hidden_states`` indices, ``TargetModel.aux_layers``), width 3*Ht;
- ``target_argmax[t]`` = argmax_v z_t[v] over the FULL target vocab (z_t = the target's
  next-token logits at t, a target id);
- the teacher: the target's next-token distribution restricted to the draft vocab,

      teacher_logp[t, i] = log_softmax_i( z_t[i + d2t[i]] ),   i = 0 .. Vd-1

  (d2t is the offset map: target id = draft id + d2t[draft id]). With ``topk=K`` only the K
  largest entries are kept (``teacher_ids`` = their draft ids, descending log-prob, NOT
  renormalised: sum_k exp(teacher_logp[t, k]) is the teacher mass kept); ``topk=None`` keeps
  all Vd (``teacher_ids[t] = arange(Vd)``).

Padding positions (attention_mask False) carry zeros in ``aux``, ``target_argmax`` and
``teacher_logp`` (and ``teacher_ids`` 0 for top-K), so the online path and the feature store
(``eagle3kit.data.store``) give identical batches.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import Eagle3Error

if TYPE_CHECKING:
    from eagle3kit.model.protocols import RunningTarget


@dataclass
class Features:
    """One padded batch of training features (shapes with B samples, T positions)."""

    input_ids: torch.Tensor  # Long [B, T]
    attention_mask: torch.Tensor  # Bool [B, T]
    loss_mask: torch.Tensor  # Bool [B, T]: token t is an assistant token to predict
    aux: torch.Tensor  # float [B, T, 3*Ht]
    target_argmax: torch.Tensor  # Long [B, T]: target ids
    teacher_ids: torch.Tensor  # Long [B, T, K]: draft ids
    teacher_logp: torch.Tensor  # float [B, T, K]

    def to(self, device: Any = None, dtype: torch.dtype | None = None) -> Features:
        """Move every tensor to ``device``; cast the float ones (aux, teacher_logp) to ``dtype``."""
        moved = {}
        for f in fields(self):
            t = getattr(self, f.name)
            if dtype is not None and t.is_floating_point():
                moved[f.name] = t.to(device=device, dtype=dtype)
            else:
                moved[f.name] = t.to(device=device)
        return replace(self, **moved)

    @property
    def topk(self) -> int:
        return int(self.teacher_ids.shape[-1])


def draft_columns(d2t: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Target ids of the draft vocab: ``i + d2t[i]`` (Long [Vd]); checks they are in range."""
    d2t = torch.as_tensor(d2t).long().flatten()  # [Vd]
    cols = torch.arange(d2t.numel(), dtype=torch.long) + d2t  # [Vd]
    if cols.numel() == 0:
        raise Eagle3Error("d2t: expected a non-empty draft vocab, found 0 entries")
    lo, hi = int(cols.min()), int(cols.max())
    if lo < 0 or hi >= vocab_size:
        raise Eagle3Error(
            f"d2t: maps draft ids to target ids {lo}..{hi}, expected 0..{vocab_size - 1} "
            f"(the target's vocab size {vocab_size})"
        )
    return cols


def teacher_from_logits(
    logits: torch.Tensor, cols: torch.Tensor, topk: int | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """From next-token logits [B, T, V]: (target_argmax [B,T], teacher_ids [B,T,K], teacher_logp).

    Log-probs are computed in float32 whatever the logits' dtype.
    """
    target_argmax = logits.argmax(dim=-1)  # [B, T]
    sub = logits.index_select(-1, cols.to(logits.device)).float()  # [B, T, Vd]
    logp = torch.log_softmax(sub, dim=-1)  # [B, T, Vd]
    vd = int(cols.numel())
    if topk is None or topk >= vd:
        ids = torch.arange(vd, device=logits.device).expand(*logp.shape[:2], vd)  # [B, T, Vd]
        return target_argmax, ids, logp
    if topk < 1:
        raise Eagle3Error(f"topk: expected a positive int, found {topk}")
    vals, ids = logp.topk(topk, dim=-1)  # [B, T, K] each, descending
    return target_argmax, ids, vals


def compute_features(
    target: RunningTarget,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_mask: torch.Tensor,
    d2t: torch.Tensor,
    topk: int | None = None,
) -> Features:
    """Run the target once over a padded batch and return its :class:`Features`.

    ``target``: the model in process or an engine's states (`RunningTarget`,
    model/protocols.py); tensors come back on its device (aux in its dtype, teacher_logp float32).
    """
    dev = target.device
    input_ids = torch.as_tensor(input_ids).long().to(dev)  # [B, T]
    attention_mask = torch.as_tensor(attention_mask).bool().to(dev)  # [B, T]
    loss_mask = torch.as_tensor(loss_mask).bool().to(dev)  # [B, T]
    if input_ids.ndim != 2 or attention_mask.shape != input_ids.shape:
        raise Eagle3Error(
            f"compute_features: expected input_ids and attention_mask of one shape [B, T], "
            f"found {tuple(input_ids.shape)} and {tuple(attention_mask.shape)}"
        )
    if loss_mask.shape != input_ids.shape:
        raise Eagle3Error(
            f"compute_features: loss_mask shape {tuple(loss_mask.shape)}, expected "
            f"{tuple(input_ids.shape)}"
        )
    cols = draft_columns(d2t, target.vocab_size)
    out = target.forward(input_ids, attention_mask.long())
    target_argmax, ids, logp = teacher_from_logits(out.logits, cols, topk)
    keep = attention_mask  # [B, T]
    aux = torch.where(keep[..., None], out.aux, 0.0)  # [B, T, 3H]
    target_argmax = torch.where(keep, target_argmax, 0)  # [B, T]
    logp = torch.where(keep[..., None], logp, 0.0)  # [B, T, K]
    if topk is not None and topk < cols.numel():
        ids = torch.where(keep[..., None], ids, 0)  # [B, T, K]
    return Features(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask & attention_mask,
        aux=aux,
        target_argmax=target_argmax.long(),
        teacher_ids=ids.long(),
        teacher_logp=logp,
    )
