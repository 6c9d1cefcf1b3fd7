"""P-EAGLE at the train layer (the part core/registry.py asks for): trained by the
training-time-test loop (train/loop.py, `TTT`) with its own objective, K parallel depths in one
causal pass, depths subsampled (COD); a start becomes P-EAGLE (`prepare`); its drafters are
written in speculators' peagle layout (`save`).

Alignment as in TTT (train/ttt.py): the element (anchor t, depth d) sits at rotary position
t+d and predicts x[t+2+d] against the teacher at t+1+d; call p = t+d its position. Depth 0 is
the plain EAGLE-3 pass over every position (aux[t], embed(x[t+1])); depth d >= 1 reads the mask
token's embedding and fc(mask_hidden) (methods/peagle/model.py). An element counts when its
prediction
is an assistant token inside the draft vocabulary: valid(p) = loss_mask[p+2] and
t2d[target_argmax[p+1]].

COD sampling (speculators src/speculators/models/peagle/data.py, P-EAGLE paper): with n the
number of valid depth-0 positions, r = `ratio` (0.7) and r_min = `floor` (0.2),

    A_0 = every position t (the context; loss on the valid ones)
    C_d = {t in A_{d-1} : valid(t+d)}                    (a chain continues one more token)
    A_d = a uniform subset of C_d of size int(max(0, n-d) * max(r^d, r_min)) (all of C_d when
          it is smaller)

so depth d costs about n * max(r^d, r_min) elements instead of n. One forward runs all of them
under the mask (speculators src/speculators/models/peagle/attention.py)

    (d, t) sees (0, s) for s <= t        (the causal context)
           and  (d', t) for 1 <= d' <= d (the earlier depths of its own chain)

which is the mask decoding builds (the cache, then slots 1..j). Loss: soft cross entropy
against the teacher over every counted element, averaged over them, with no per-depth weight
(speculators' default: KL, which differs from this by the teacher's entropy, a constant: the
same gradient). `--loss` picks another per-element loss against the same teacher
(train/losses.py `position_losses`, `ttt.batch_teacher`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.methods.eagle3.train import config, run, summary_lines
from eagle3kit.train import distributed as dist_
from eagle3kit.train.losses import Teacher, position_losses
from eagle3kit.train.ttt import batch_teacher

if TYPE_CHECKING:
    from eagle3kit.methods.peagle.model import PEagleDrafter
    from eagle3kit.model.protocols import Target

__all__ = [
    "config",
    "TTT",
    "cod_anchors",
    "cod_layout",
    "cod_loss",
    "loss",
    "prepare",
    "run",
    "save",
    "summary_lines",
]
TTT = True  # trained by train/loop.py, with its own loss


def cod_anchors(
    valid: torch.Tensor, k: int, ratio: float, floor: float, gen: torch.Generator | None = None
) -> list[torch.Tensor]:
    """A_1..A_{k-1} (long, sorted, on the CPU) for one row; valid [T] bool: valid(p)."""
    valid = valid.cpu()
    t = valid.shape[0]
    n = int(valid.sum())
    kept = torch.arange(t)  # A_0
    out = []
    for d in range(1, k):
        p = kept + d
        cand = kept[(p < t) & valid[p.clamp(max=t - 1)]]  # C_d
        size = int(max(0, n - d) * max(ratio**d, floor))
        if size <= 0 or cand.numel() == 0:
            break
        if cand.numel() > size:
            cand = cand[torch.randperm(cand.numel(), generator=gen)[:size]].sort().values
        out.append(cand)
        kept = cand
    return out


def cod_layout(t: int, anchors: list[torch.Tensor], device: Any) -> tuple[torch.Tensor, ...]:
    """(anchor [N], depth [N], mask [N, N] bool) of one row: depth 0's T positions, then A_d."""
    anchor = torch.cat([torch.arange(t)] + anchors).to(device)  # [N]
    depth = torch.cat(
        [torch.zeros(t, dtype=torch.long)]
        + [torch.full((a.numel(),), d + 1, dtype=torch.long) for d, a in enumerate(anchors)]
    ).to(device)  # [N]
    context = (depth[None, :] == 0) & (anchor[None, :] <= anchor[:, None])  # [N, N]
    chain = (
        (anchor[None, :] == anchor[:, None])
        & (depth[None, :] >= 1)
        & (depth[None, :] <= depth[:, None])
    )
    return anchor, depth, context | chain


def valid_positions(drafter: PEagleDrafter, feats: Any) -> torch.Tensor:
    """valid [B, T] bool: position p predicts an assistant token x[p+2] whose teacher argmax
    (at p+1) lies in the draft vocabulary."""
    b, t = feats.input_ids.shape
    out = torch.zeros(b, t, dtype=torch.bool, device=feats.input_ids.device)
    if t >= 2:
        lm = feats.loss_mask[:, 2:]  # [B, T-2]
        out[:, : t - 2] = lm & drafter.t2d[feats.target_argmax[:, 1 : t - 1]]
    return out


def cod_loss(
    drafter: PEagleDrafter,
    feats: Any,
    k: int,
    *,
    ratio: float = 0.7,
    floor: float = 0.2,
    gen: torch.Generator | list[torch.Generator] | None = None,
    loss: str = "kl",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of the loss `loss` over the counted elements, their count), float32 on the
    device; divide the first by the (global) second. `gen`: one generator for every row, or
    one per row (a row's subsets then do not depend on which rank it is on:
    distributed.row_generators)."""
    dtype = drafter.fc.weight.dtype
    valid = valid_positions(drafter, feats)  # [B, T]
    teacher = batch_teacher(feats, int(drafter.d2t.numel()), loss)  # [B, T, K]
    total = torch.zeros((), device=feats.input_ids.device)
    count = torch.zeros((), device=feats.input_ids.device)
    for row in range(feats.input_ids.shape[0]):
        g = gen[row] if isinstance(gen, list) else gen
        args = (k, valid[row], teacher.map(lambda x, r=row: x[r]), ratio, floor, g, dtype, loss)
        s, n = _row_loss(drafter, feats, row, *args)
        total, count = total + s, count + n
    return total, count


def _row_loss(drafter, feats, row, k, valid, teacher: Teacher, ratio, floor, gen, dtype, loss):
    """One row's COD pass: (sum of the loss, count) over its counted elements; `teacher`: the
    row's, [T, K]."""
    ids_row = feats.input_ids[row]  # [T]
    t = ids_row.shape[0]
    anchor, depth, mask = cod_layout(t, cod_anchors(valid, k, ratio, floor, gen), ids_row.device)
    pos = anchor + depth  # [N]: p, also the rotary position
    nxt = torch.cat([ids_row[1:], ids_row.new_zeros(1)])  # [T]: x[t+1]
    slot_ids, slot_hidden = drafter.slot_inputs(1, 1)  # [1, 1], [1, 1, 3Ht]
    first = depth == 0
    ids = torch.where(first, nxt[anchor.clamp(max=t - 1)], slot_ids[0, 0])  # [N]
    aux = feats.aux[row].to(dtype)[anchor]  # [N, 3Ht]
    hidden = torch.where(first[:, None], aux, slot_hidden[0, 0])  # [N, 3Ht]
    out = drafter(ids[None], hidden[None], None, pos[None], mask, from_aux=True)
    ok = valid[pos.clamp(max=t - 1)] & (pos < t)  # [N]
    tp = (pos + 1).clamp(max=t - 1)  # the teacher's position
    ell = position_losses(loss, out.logits, teacher.map(lambda x: x[tp][None]))[0]  # [N]
    return (ell * ok).sum(), ok.sum().float()


def loss(m: Any, feats: Any, k: int, cfg: Any, d: Any, step: int) -> torch.Tensor:
    """One step's loss on this rank's slice: COD over k depths in one pass, each row's
    subsets drawn from its own generator (distributed.row_generators), averaged over the
    global count of counted elements."""
    mine = range(d.rank, cfg.batch_size, d.world)  # this rank's rows of the batch
    gens = dist_.row_generators(cfg.seed, step, mine)
    s, n = cod_loss(m, feats, k, ratio=cfg.cod_ratio, floor=cfg.cod_min, gen=gens, loss=cfg.loss)
    return s / dist_.all_sum(n, d).clamp(min=1)


def prepare(m: Any, cfg: Any, target: Target, info: dict[str, Any] | None) -> Any:
    """The run's drafter: a P-EAGLE start stays one; an EAGLE-3 one (fresh or warm) becomes
    P-EAGLE, every weight and the vocab map kept, `mask_hidden` added (seeded)."""
    from eagle3kit.methods.peagle.model import PEagleDrafter

    if isinstance(m, PEagleDrafter):
        return m
    token = cfg.mask_token_id if cfg.mask_token_id is not None else default_mask_token(target)
    out = PEagleDrafter.from_eagle3(m, token, seed=cfg.seed)
    if info is not None:
        info["peagle"] = {"from": "eagle3", "mask_token_id": token, "mask_hidden": "added"}
    return out


def default_mask_token(target: Target) -> int:
    """The target's pad token when it has one (a token the data never asks the drafter to
    predict), else its last vocabulary id; `--mask-token-id` chooses another."""
    cfg = target.config.to_dict() if hasattr(target.config, "to_dict") else dict(target.config)
    cfg = cfg.get("text_config") or cfg
    pad = cfg.get("pad_token_id")
    if isinstance(pad, int) and not isinstance(pad, bool) and 0 <= pad < target.vocab_size:
        return pad
    return int(target.vocab_size) - 1


def save(out: Path, spec: Any, tensors: dict[str, torch.Tensor], verifier: Any, m: Any) -> None:
    """RUN/best, RUN/step-N in speculators' peagle layout (vLLM serves it; SGLang does not)."""
    from eagle3kit.methods.peagle.model import save_peagle

    save_peagle(out, spec, tensors, m.mask_token_id, verifier)
