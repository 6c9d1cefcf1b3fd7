"""DSpark decoding, batch 1: DFlash's cycle (methods/dflash/decode.py `BlockDecoder`: the
drafter's cache of the context, one target forward over [x_m, d_1..d_K], the longest prefix
that matches, the bonus token, the crop) with DSpark's draft: one backbone pass over the
block, then its slots drawn one after the other through the Markov head (methods/dspark/model.py
`propose`), as vLLM's `DSparkSpeculator._sample_sequential` does.

    sample_from_anchor   block [x_m, mask × (K-1)] at positions m..m+K-1; slot k drafts x_{m+k+1}
    otherwise            block [x_m, mask × K] at m..m+K; slots 1..K draft x_{m+k}

Drafts are one-hot (their argmax), so both greedy and sampled verification keep the target's
law exactly, whatever the heads say. `min_confidence` stops a block early (the running
product of the confidence head's probabilities, vLLM's adaptive verification ranks slots by
it); `draft_topk` corrects only the base logits' top k (vLLM's `dspark_draft_topk`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode.generation import Generation, Output, prompt_tensor, stop_set
from eagle3kit.decode.sampling import GREEDY, Sampling
from eagle3kit.decode.speculative import Draft, run_cycles
from eagle3kit.decode.stats import DecodeStats
from eagle3kit.methods.dflash.decode import BlockDecoder, check_block

if TYPE_CHECKING:
    from eagle3kit.methods.dspark.model import DSparkDrafter
    from eagle3kit.model.target import TargetModel

METHOD = "dspark"


class DSparkDecoder(BlockDecoder):
    """BlockDecoder drafting with the Markov chain over the block's slots."""

    min_confidence: float | None = None
    draft_topk: int | None = None

    def draft(self) -> Draft:
        m, dev = self.target.seq_len, self.target.device
        c = self.pending.shape[1]
        anchor = self.drafter.spec.sample_from_anchor
        n = self.k if anchor else 1 + self.k
        mask_id = self.drafter.spec.mask_token_id
        block = torch.tensor([[self.last] + [mask_id] * (n - 1)], device=dev)  # [1, n]
        pos = torch.arange(m - c, m + n, device=dev)[None]  # [1, C+n]
        hidden = self.drafter(block, self.pending, pos, self.cache)  # [1, n, H]
        self.cache.crop(m)  # keep the context 0..m-1, drop the block
        rows = hidden[0, : self.k] if anchor else hidden[0, 1:]
        kw = {"min_confidence": self.min_confidence, "topk": self.draft_topk}
        return Draft(m, self.drafter.propose(rows, self.last, **kw))


def dspark_generate(
    target: TargetModel,
    drafter: DSparkDrafter,
    prompt_ids: list[int] | torch.Tensor,
    *,
    max_new_tokens: int = 128,
    depth: int | None = None,
    sampling: Sampling = GREEDY,
    eos_token_id: int | None = None,
    seed: int = 0,
    on_tokens: Callable[[list[int]], None] | None = None,
    min_confidence: float | None = None,
    draft_topk: int | None = None,
) -> Generation:
    """Decode with a DSpark drafter, K = `depth` drafts per cycle (default: its proposals,
    B with sample_from_anchor, else B - 1)."""
    k = drafter.spec.num_proposals if depth is None else depth
    check_block(target, drafter, k, max_new_tokens)
    if min_confidence is not None and not 0.0 <= min_confidence <= 1.0:
        raise Eagle3Error(f"min_confidence: expected 0..1, found {min_confidence}")
    ids = prompt_tensor(prompt_ids, target.device)  # [1, P]
    dec = DSparkDecoder(target, drafter, k, sampling, seed)
    dec.min_confidence, dec.draft_topk = min_confidence, draft_topk
    out = Output(stop_set(eos_token_id), max_new_tokens, on_tokens)
    stats = DecodeStats(depth=k, method=METHOD, prompt_tokens=ids.shape[1])
    return run_cycles(dec, ids, out, stats)  # type: ignore[arg-type]


def generate(target: TargetModel, drafter: DSparkDrafter, prompt_ids: Any, **kw: Any) -> Generation:
    """DSpark decoding with decode/speculative.py's keywords (the part core/registry.py asks
    for), and its own: `min_confidence`, `draft_topk`."""
    if kw.pop("tree", None) is not None:
        raise Eagle3Error("tree: a DSpark drafter proposes one block (a chain), not a tree")
    return dspark_generate(target, drafter, prompt_ids, **kw)
