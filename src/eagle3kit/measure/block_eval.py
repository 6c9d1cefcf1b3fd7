"""Offline acceptance of a DFlash block drafter on held-out answers (`eval` without --online).

For each held-out sample (tokens x_t, answer mask m_t) the drafter runs once with a block at
every answer position a (one pass, block mask: block a sees the target's states of t < a and
itself, so each block's drafts are exactly what decoding at a would propose). Its run r_a is
the number of leading drafts d_k (slot k guesses x_{a+k}) equal to the target's greedy token
there (the target's argmax at a+k-1); a draft past the sample's end is a miss.

    walked cycles   a_0 = the first answer position, a_{c+1} = a_c + r_{a_c} + 1, while a_c is
                    an answer position before the last: on an answer the target wrote
                    itself by greedy decoding, the cycles online block decoding goes through
                    tau_walk = mean(r + 1) (`accept_len`), per-position acceptance P(r ≥ i)
    every position  every answer position as a cycle start (`all_positions`):
                    tau_every_position = 1 + Σ_i P(r ≥ i)

The JSON carries the names `eval` uses for EAGLE-3 drafters, with "method": "dflash".
"""

from __future__ import annotations

from typing import Any

import torch

from eagle3kit.core.artifacts import few_sequences, stamp
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.progress import Progress, emit
from eagle3kit.plan.forecast import conditional
from eagle3kit.train.dflash import block_logits, blocks_at

CHUNK = 64  # anchors per pass (bounds the block mask's size)


def _runs(target: Any, drafter: Any, ids: torch.Tensor, lm: torch.Tensor) -> torch.Tensor:
    """r_a for every position a of one sample ([T], -1 where a is no answer position)."""
    from eagle3kit.data.features import compute_features

    b, t = drafter.spec.block_size, ids.shape[0]
    d2t = torch.zeros(target.vocab_size, dtype=torch.long)
    am = torch.ones(1, t, dtype=torch.bool)
    feats = compute_features(target, ids[None], am, lm[None].bool(), d2t)
    dev = next(drafter.parameters()).device
    feats = feats.to(dev)
    feats.loss_mask = torch.ones_like(feats.loss_mask)  # count slots up to the sample's end
    runs = torch.full((t,), -1, dtype=torch.long)
    pos = lm.nonzero().view(-1)
    for i in range(0, pos.numel(), CHUNK):
        anchors = pos[i : i + CHUNK][None].to(dev)
        real = torch.ones_like(anchors, dtype=torch.bool)
        blocks = blocks_at(feats, anchors, real, b, drafter.spec.mask_token_id)
        logits = block_logits(drafter, feats, blocks)
        hit_ok = blocks.valid[:, :, 1:]  # slots inside the sample
        prev = (blocks.src - 1).clamp(min=0)
        want = feats.target_argmax.gather(1, prev.view(1, -1)).view_as(prev)
        hit = (logits.argmax(-1) == want)[:, :, 1:] & hit_ok
        runs[anchors[0].cpu()] = hit.long().cumprod(-1).sum(-1)[0].cpu()
    return runs


def _walk(runs: torch.Tensor) -> list[int]:
    """The cycles' runs r along the walk a_{c+1} = a_c + r + 1 over answer positions."""
    pos = (runs >= 0).nonzero().view(-1)
    out, a = [], int(pos[0]) if pos.numel() else runs.numel()
    while a < runs.numel() - 1 and runs[a] >= 0:  # a cycle emits at least x_{a+1}
        out.append(int(runs[a]))
        a += int(runs[a]) + 1
    return out


def evaluate_offline_dflash(
    target: Any,
    drafter: Any,
    data: Any,
    depth: int | None = None,
    *,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """`eval`'s offline document for a DFlash drafter (module docstring)."""
    k = drafter.spec.num_proposals if depth is None else min(depth, drafter.spec.num_proposals)
    if k < 1:
        raise Eagle3Error(f"depth: expected draft steps >= 1, found {k}")
    walked, every = [], []
    with torch.no_grad():
        for j, (ids, lm) in enumerate(data.samples):
            runs = _runs(target, drafter, ids, lm).clamp(max=k)
            walked += _walk(runs)
            every += [int(r) for r in runs[runs >= 0]]
            emit(progress, "offline eval", j + 1, len(data.samples), "samples")
    if not walked:
        raise Eagle3Error(f"{data.source}: no answer tokens to evaluate on")
    w, e = torch.tensor(walked), torch.tensor(every)
    acc_w = [float((w >= i).float().mean()) for i in range(1, k + 1)]
    acc_e = [float((e >= i).float().mean()) for i in range(1, k + 1)]
    tau_walk, tau_every = float((w + 1).float().mean()), 1.0 + sum(acc_e)
    doc = {
        "mode": "offline",
        "method": "dflash",
        "depth": k,
        "block_size": drafter.spec.block_size,
        "accept_len": tau_walk,
        "tau_walk": tau_walk,
        "tau_every_position": tau_every,
        "per_position_acceptance": acc_w,
        "conditional_acceptance": conditional(acc_w),
        "cycles": len(walked),
        "all_positions": {
            "accept_len": tau_every,
            "per_position_acceptance": acc_e,
            "conditional_acceptance": conditional(acc_e),
            "counted": len(every),
        },
        "samples": len(data.samples),
        "skipped": len(data.skipped),
        "warnings": few_sequences(len(data.samples), "offline acceptance"),
    }
    return stamp(doc, "eval")
