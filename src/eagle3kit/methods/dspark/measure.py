"""DSpark at the measure layer: the part core/registry.py asks for.

- offline eval is DFlash's (methods/dflash/measure/offline.py: a block at every answer
  position, the walked cycles and every position) with DSpark's own drafts: each block's
  slots drawn one after the other through the Markov head from the drafts before them
  (model.py `chain`, as decoding draws them), for both block conventions: draft j guesses
  x_{a+j+1}, the target's greedy token there is its argmax at a+j;
- the pass cost (`pass_ms`, what `bench --concurrency` measures and `plan` prices, one pass a
  cycle) is one backbone pass over the block as methods/dspark/decode.py drafts it, plus the
  Markov head's K sequential steps over the C blocks of the batch (model.py `chain`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.measure.costs import like, median_ms
from eagle3kit.methods.dflash.measure.offline import CHUNK, evaluate_offline_dflash
from eagle3kit.methods.dflash.train.step import blocks_at

if TYPE_CHECKING:
    from eagle3kit.methods.dspark.model import DSparkDrafter
    from eagle3kit.model.target import TargetModel

__all__ = ["evaluate_offline", "pass_ms"]


def evaluate_offline(
    target: TargetModel, drafter: DSparkDrafter, data: Any, depth: int, **kw: Any
) -> dict:
    """Block acceptance on the held-out samples (module docstring)."""
    return evaluate_offline_dflash(
        target, drafter, data, depth, progress=kw.get("progress"), runs_from=runs_from
    )


def runs_from(drafter: DSparkDrafter, feats: Any, lm: torch.Tensor) -> torch.Tensor:
    """r_a of one sample ([T], -1 where a is no answer position): the leading drafts equal to
    the target's greedy tokens, a draft past the sample's end a miss."""
    spec, dev = drafter.spec, next(drafter.parameters()).device
    feats = feats.to(dev)
    t, k, b = lm.shape[0], spec.num_proposals, spec.block_size
    first = 0 if spec.sample_from_anchor else 1  # the slot of draft 0
    runs = torch.full((t,), -1, dtype=torch.long)
    pos = lm.nonzero().view(-1)
    for i in range(0, pos.numel(), CHUNK):
        anchors = pos[i : i + CHUNK][None].to(dev)  # [1, N]
        real = torch.ones_like(anchors, dtype=torch.bool)
        blocks = blocks_at(feats, anchors, real, b, spec.mask_token_id)
        hidden = drafter(blocks.ids, feats.aux, blocks.position_ids, None, blocks.mask)
        rows = hidden.view(anchors.shape[1], b, -1)[:, first : first + k]
        drafts = drafter.chain(rows, blocks.ids.view(-1, b)[:, 0])  # [N, K]
        at = anchors[0][:, None] + torch.arange(k, device=dev)  # a + j
        want = feats.target_argmax[0].gather(0, at.clamp(max=t - 1).view(-1)).view_as(at)
        hit = (drafts == want) & (at + 1 < t)
        runs[anchors[0].cpu()] = hit.long().cumprod(-1).sum(-1).cpu()
    return runs


def pass_ms(
    target: TargetModel, drafter: DSparkDrafter, ids: torch.Tensor, aux: torch.Tensor, repeats, sync
) -> float:
    """One DSpark draft of C = ids.shape[0] blocks in steady state: the prompt's context but
    its last NEW positions in the drafter's cache, those NEW (about one cycle's accepted
    tokens) as the pass's new context, the backbone over the block, the Markov chain over its
    K slots; the cache cropped back after every call."""
    from eagle3kit.methods.dflash.model import DFlashCache

    spec = drafter.spec
    c, p = ids.shape
    k, new, anchor = spec.num_proposals, min(2, p - 1), spec.sample_from_anchor
    n = k if anchor else 1 + k
    block = torch.full((c, n), spec.mask_token_id, device=ids.device)
    block[:, 0] = ids[:, -1]
    ctx = like(drafter, aux)
    cache = DFlashCache(spec.num_hidden_layers)

    def pos(a: int, b: int) -> torch.Tensor:
        return torch.arange(a, b, device=ids.device).expand(c, -1)

    drafter(block, ctx[:, : p - new], pos(0, p - new + n), cache)  # the earlier context
    cache.crop(p - new)

    def run() -> None:
        hidden = drafter(block, ctx[:, p - new :], pos(p - new, p + n), cache)
        cache.crop(p - new)
        drafter.chain(hidden[:, :k] if anchor else hidden[:, 1:], block[:, 0])

    return median_ms(run, repeats, sync)
