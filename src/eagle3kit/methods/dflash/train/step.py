"""Training a DFlash block drafter: anchors, blocks of mask tokens, one pass, weighted loss.

Per sample (tokens x_0..x_{T-1}, loss mask m_t, the target's aux states h_t), per step:

    anchors   N positions a drawn at random among {t : m_t, t < T - B} (z-lab/speculators)
    blocks    block j = [x_{a_j}, mask × (B-1)] at positions a_j .. a_j+B-1
    one pass  all N blocks at once: block j's queries see the context h_t for t < a_j (the
              target states of the tokens before its anchor, same sample) and the whole of
              block j (bidirectional), nothing else (`block_mask`)
    targets   slot k (1 <= k < B) of block j guesses x_{a_j+k}; it counts when m_{a_j+k}
    loss      Σ w_k ℓ_{j,k} / Σ w_k over the counted slots, w_k = exp(-(k-1)/γ) (or D-PACE's
              weights from the drafter's own detached CE, `dpace_weights`) and ℓ the
              `--loss` of the slot (train/losses.py `position_losses`; default kl) against
              the data token x_{a+k}     (--dflash-loss ce: a one-hot teacher; kl and ce
                                          are then both -log p(x_{a+k})), or
              the target's law of x_{a+k} (--dflash-loss kl: its logits at a+k-1; kl is
                                          the soft cross entropy, KL(teacher ‖ drafter) plus
                                          the teacher's entropy: KL's gradient)
    accept    a block's accepted drafts r_j = the leading slots whose argmax equals the
              target's own greedy token there (its argmax at a+k-1); over blocks whose B-1
              slots all count: per-position acceptance P(r ≥ i) and the expected accept
              length τ = 1 + Σ_i P(r ≥ i) (the bonus token counted, as decoding counts it)

The drafter's embedding and lm_head are the target's, frozen; everything else trains.
Checkpoints are written in z-lab's layout (methods/dflash/model.py `save_pretrained`). The run (its
loop, torchrun/FSDP2, RUN/best, RUN/state, --resume) is methods/dflash/train/loop.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.methods.dflash.checkpoint.layout import default_target_layer_ids
from eagle3kit.methods.dflash.model import DFlashDrafter
from eagle3kit.train.losses import position_losses, teacher_from_logp, token_teacher

if TYPE_CHECKING:
    from eagle3kit.model.target import TargetModel


@dataclass
class DFlashOptions:
    """The DFlash-specific settings of `train --method dflash`."""

    block_size: int = 8
    draft_layers: int = 1
    anchors: int = 16  # blocks per sample per step
    gamma: float = 4.0  # position weights exp(-(k-1)/gamma)
    loss: str = "kl"  # "kl" to the target's law (speculators), "ce" on the data tokens
    weights: str = "exp"  # "exp": exp(-(k-1)/gamma); "dpace": D-PACE (needs loss "ce")
    dpace_alpha: float = 0.5
    mask_token_id: int | None = None  # default: the last vocabulary id
    target_layer_ids: tuple[int, ...] | None = None  # z-lab ids; default z-lab's spacing
    sliding_window: int | None = None  # every layer sliding, bidirectional in the block

    def validate(self) -> None:
        if self.block_size < 2:
            raise Eagle3Error(f"--block-size: expected >= 2, found {self.block_size}")
        if self.weights not in ("exp", "dpace") or (self.weights == "dpace" and self.loss != "ce"):
            raise Eagle3Error(
                f"--position-weights: expected exp, or dpace with --dflash-loss ce, found "
                f"{self.weights} with {self.loss}"
            )
        if self.loss not in ("ce", "kl"):
            raise Eagle3Error(f"--dflash-loss: expected 'ce' or 'kl', found {self.loss!r}")
        if self.anchors < 1 or self.draft_layers < 1 or not self.gamma > 0:
            raise Eagle3Error(
                "--anchors/--draft-layers/--gamma: expected positive values, found "
                f"{self.anchors}/{self.draft_layers}/{self.gamma}"
            )


# ---------------------------------------------------------------- the batch of blocks

Gen = torch.Generator | list[torch.Generator]  # one for every row, or one per row


@dataclass
class Blocks:
    """N anchored blocks per sample, shapes with Bt samples."""

    anchors: torch.Tensor  # Long [Bt, N]
    valid: torch.Tensor  # Bool [Bt, N, B]: slot counts (slot 0 never does)
    ids: torch.Tensor  # Long [Bt, N*B]: [x_a, mask, ...] per block
    position_ids: torch.Tensor  # Long [Bt, T + N*B]: the context's, then the blocks'
    mask: torch.Tensor  # Bool [Bt, 1, N*B, T + N*B]
    src: torch.Tensor  # Long [Bt, N, B]: a + k, the position slot k guesses (clamped)


def select_anchors(loss_mask: torch.Tensor, n: int, b: int, gen: Gen) -> tuple:
    """Up to n anchors per row [Bt, T] among loss-mask positions t < T - B, sorted; pads
    repeat position 0 and are marked invalid. `gen`: one generator for all rows or one per
    row. Returns (anchors [Bt, n], real [Bt, n])."""
    bt, t = loss_mask.shape
    anchors = torch.zeros(bt, n, dtype=torch.long)
    real = torch.zeros(bt, n, dtype=torch.bool)
    ok = loss_mask.cpu().clone()
    ok[:, max(0, t - b) :] = False
    for i in range(bt):
        cand = ok[i].nonzero().view(-1)
        g = gen[i] if isinstance(gen, list) else gen
        pick = cand[torch.randperm(cand.numel(), generator=g)[:n]].sort().values
        anchors[i, : pick.numel()], real[i, : pick.numel()] = pick, True
    return anchors.to(loss_mask.device), real.to(loss_mask.device)


def block_mask(anchors: torch.Tensor, ctx_ok: torch.Tensor, b: int) -> torch.Tensor:
    """Bool [Bt, 1, N*B, T + N*B]: block j sees context t < a_j (real tokens) and itself."""
    bt, n = anchors.shape
    t = ctx_ok.shape[1]
    q_anchor = anchors.repeat_interleave(b, dim=1)  # [Bt, N*B]
    ctx = torch.arange(t, device=anchors.device)[None, None] < q_anchor[:, :, None]
    ctx = ctx & ctx_ok[:, None, :]  # [Bt, N*B, T]
    blk = torch.arange(n * b, device=anchors.device) // b  # [N*B] block of each slot
    own = (blk[:, None] == blk[None, :]).expand(bt, -1, -1)  # [Bt, N*B, N*B]
    return torch.cat([ctx, own], dim=-1)[:, None]


def make_blocks(feats: Any, n: int, b: int, mask_id: int, gen: Gen) -> Blocks:
    """Anchors, block inputs, positions and mask for a Features batch (module docstring)."""
    lm = feats.loss_mask & feats.attention_mask  # [Bt, T]
    anchors, real = select_anchors(lm, n, b, gen)
    return blocks_at(feats, anchors, real, b, mask_id)


def blocks_at(feats: Any, anchors: torch.Tensor, real: torch.Tensor, b: int, mask_id: int):
    """Blocks at given anchors [Bt, N] (`real` marks the ones that count)."""
    ids, lm = feats.input_ids, feats.loss_mask & feats.attention_mask  # [Bt, T]
    bt, t = ids.shape
    n = anchors.shape[1]
    k = torch.arange(b, device=ids.device)
    src = anchors[:, :, None] + k  # [Bt, N, B]
    inside = src < t
    src = src.clamp(max=t - 1)
    valid = lm.gather(1, src.view(bt, -1)).view(bt, n, b) & inside & real[:, :, None]
    valid[:, :, 0] = False
    block_ids = torch.full((bt, n, b), mask_id, dtype=torch.long, device=ids.device)
    block_ids[:, :, 0] = ids.gather(1, anchors)
    ctx_pos = torch.arange(t, device=ids.device).expand(bt, t)
    pos = torch.cat([ctx_pos, (anchors[:, :, None] + k).view(bt, -1)], dim=1)
    mask = block_mask(anchors, feats.attention_mask, b)
    return Blocks(anchors, valid, block_ids.view(bt, -1), pos, mask, src)


# ---------------------------------------------------------------- loss and acceptance


def position_weights(b: int, gamma: float, device: Any = None) -> torch.Tensor:
    """[B]: slot 0 = 0, slot k = exp(-(k-1)/gamma)."""
    k = torch.arange(b, dtype=torch.float32, device=device)
    w = torch.exp(-(k - 1) / gamma)
    w[0] = 0.0
    return w


def dpace_weights(ce: torch.Tensor, valid: torch.Tensor, alpha: float) -> torch.Tensor:
    """D-PACE (arXiv 2605.18810, speculators' `dpace_loss_decay`), detached, [Bt, N, B]:
    q_i = exp(-CE_i), q̃_i = (1-α) q_i + α (1 where slot i does not count),
    w_j = Σ_{m≥j} Π_{i≤m} q̃_i over counted m, 0 where slot j does not count."""
    with torch.no_grad():
        s = torch.where(valid, (1 - alpha) * torch.exp(-ce.float()) + alpha, 1.0)
        prefix = torch.cumprod(s, dim=-1) * valid
        return prefix.flip(-1).cumsum(-1).flip(-1) * valid


def _gather_slots(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """x [Bt, T, ...] at positions src [Bt, N, B] -> [Bt, N, B, ...]."""
    bt, n, b = src.shape
    idx = src.reshape(bt, n * b)
    if x.ndim == 2:
        return x.gather(1, idx).view(bt, n, b)
    flat = idx[:, :, None].expand(-1, -1, x.shape[-1])
    return x.gather(1, flat).view(bt, n, b, x.shape[-1])


def block_logits(drafter: DFlashDrafter, feats: Any, blocks: Blocks) -> torch.Tensor:
    """One pass over all blocks: logits [Bt, N, B, V] (`block_outputs`' first)."""
    return block_outputs(drafter, feats, blocks)[0]


def block_outputs(drafter: DFlashDrafter, feats: Any, blocks: Blocks) -> tuple:
    """One pass over all blocks: (logits [Bt, N, B, V] float, hidden [Bt, N, B, H], the
    teacher-forced previous tokens [Bt, N, B]: x_{a+k-1}, slot 0 the anchor's own). The
    drafter maps hidden to logits given those tokens (`train_logits`: DFlash ignores them; a
    variant with a head over the previous token reads them)."""
    bt, n, b = blocks.valid.shape
    hidden = drafter(blocks.ids, feats.aux, blocks.position_ids, None, blocks.mask)
    hidden = hidden.view(bt, n, b, -1)
    prev = _gather_slots(feats.input_ids, (blocks.src - 1).clamp(min=0))
    prev[:, :, 0] = blocks.ids.view(bt, n, b)[:, :, 0]
    return drafter.train_logits(hidden, prev).float(), hidden, prev


def block_loss(
    logits,
    feats,
    blocks: Blocks,
    gamma: float,
    kind: str,
    weights: str = "exp",
    alpha: float = 0.5,
    loss: str = "kl",
) -> torch.Tensor:
    """Σ w_k ℓ / Σ w_k over the counted slots (module docstring; D-PACE weights on request)."""
    s, w = block_loss_terms(logits, feats, blocks, gamma, kind, weights, alpha, loss)
    return s / w.clamp(min=1e-9)


def block_loss_terms(
    logits,
    feats,
    blocks: Blocks,
    gamma: float,
    kind: str,
    weights: str = "exp",
    alpha: float = 0.5,
    loss: str = "kl",
) -> tuple:
    """(Σ w_k ℓ, Σ w_k) over the counted slots: a sharded run divides by the global Σ w.
    ℓ: `loss` per slot (train/losses.py) against the data token (`kind` ce: a one-hot
    teacher, kl and ce being its cross entropy) or the target's law (`kind` kl)."""
    bt, n, b, v = logits.shape
    if kind == "ce":
        teacher = token_teacher(_gather_slots(feats.input_ids, blocks.src))  # x_{a+k}
    else:  # the teacher's law of x_{a+k}: its logits at a+k-1
        prev = (blocks.src - 1).clamp(min=0)
        t_logp = _gather_slots(feats.teacher_logp, prev)  # [Bt, N, B, K]
        ids = None if t_logp.shape[-1] == v else _gather_slots(feats.teacher_ids, prev)
        teacher = teacher_from_logp(loss, t_logp, ids)
    teacher = teacher.map(lambda x: x.reshape(bt, n * b, *x.shape[3:]))
    ell = position_losses(loss, logits.view(bt, n * b, v), teacher).view(bt, n, b)
    if weights == "dpace":
        w = dpace_weights(ell, blocks.valid, alpha)
    else:
        w = position_weights(b, gamma, logits.device) * blocks.valid
    return (w * ell).sum(), w.sum()


def block_runs(logits, feats, blocks: Blocks) -> tuple[torch.Tensor, torch.Tensor]:
    """Per block, the leading slots equal to the target's greedy token (r_j), and which
    blocks count (all B-1 slots counted): ([Bt, N], [Bt, N])."""
    prev = (blocks.src - 1).clamp(min=0)
    want = _gather_slots(feats.target_argmax, prev)  # [Bt, N, B]
    hit = (logits.argmax(-1) == want)[:, :, 1:]  # [Bt, N, B-1]
    runs = hit.long().cumprod(-1).sum(-1)
    return runs, blocks.valid[:, :, 1:].all(-1)


def acceptance(runs: torch.Tensor, depth: int) -> dict[str, Any]:
    """From the runs of the counted blocks: per-position acceptance P(r ≥ i), τ, and the
    conditional acceptance P(r ≥ i | r ≥ i-1)."""
    if runs.numel() == 0:
        return {"tau_every_position": None, "per_position_acceptance": [], "blocks": 0}
    acc = [float((runs >= i).float().mean()) for i in range(1, depth + 1)]
    cond = [a / p if p > 0 else 0.0 for a, p in zip(acc, [1.0] + acc[:-1], strict=True)]
    return {
        "tau_every_position": 1.0 + sum(acc),
        "per_position_acceptance": acc,
        "conditional_acceptance": cond,
        "blocks": int(runs.numel()),
    }


@torch.no_grad()
def evaluate_blocks(drafter, batches, opts: DFlashOptions, seed: int = 0) -> dict[str, Any]:
    """Offline acceptance of a DFlash drafter over Features batches (fixed anchors by seed),
    plus the mean loss."""
    gen = torch.Generator().manual_seed(seed)
    runs, losses = [], []
    for feats in batches:
        blocks = make_blocks(
            feats, opts.anchors, drafter.spec.block_size, drafter.spec.mask_token_id, gen
        )
        logits = block_logits(drafter, feats, blocks)
        o = opts
        loss = block_loss(logits, feats, blocks, o.gamma, o.loss, o.weights, o.dpace_alpha)
        losses.append(float(loss))
        r, counted = block_runs(logits, feats, blocks)
        runs.append(r[counted])
    out = acceptance(torch.cat(runs) if runs else torch.zeros(0), drafter.spec.num_proposals)
    out["loss"] = sum(losses) / max(1, len(losses))
    return out


# ---------------------------------------------------------------- the run


def new_drafter(target: TargetModel, opts: DFlashOptions, init_from: str | None, device: str):
    """A warm start from a DFlash checkpoint (z-lab layout), or a fresh drafter."""
    if init_from:
        d = DFlashDrafter.from_pretrained(init_from, device=device)
        if d.spec.aux_layers != tuple(target.aux_layers):
            raise bad(init_from, f"target_layer_ids: expected {list(target.aux_layers)} - 1")
        d.attach_target(target)
        for name in ("embed_tokens", "lm_head"):  # a speculators-layout start's own: frozen
            if hasattr(d, name):
                getattr(d, name).requires_grad_(False)
        return d
    ids = opts.target_layer_ids or tuple(
        default_target_layer_ids(target.num_layers, opts.draft_layers)
    )
    return DFlashDrafter.for_target(
        target,
        num_hidden_layers=opts.draft_layers,
        block_size=opts.block_size,
        mask_token_id=opts.mask_token_id,
        target_layer_ids=ids,
        device=device,
        dtype=torch.float32,
        sliding_window=opts.sliding_window,
    )


def layer_ids(cfg: Any, opts: DFlashOptions, num_layers: int) -> tuple[int, ...]:
    """The z-lab ids the run uses: the warm start's, the option, else z-lab's default."""
    if cfg.init_from:
        dc = json.loads((Path(cfg.init_from) / "config.json").read_text()).get("dflash_config")
        return tuple((dc or {}).get("target_layer_ids") or ())
    return opts.target_layer_ids or tuple(default_target_layer_ids(num_layers, opts.draft_layers))
