"""P-EAGLE decoding: EAGLE-3's cycle with the chain drafted in one pass (methods/peagle/model.py).

`PEagleDecoder` is decode/speculative.py's `SpecDecoder` with `parallel_chain` in place of its
sequential chain, so `generate`, `eval --online` and `bench` run a P-EAGLE drafter as they run
an EAGLE-3 one (`generate` is the part core/registry.py asks for). Everything but the draft is
SpecDecoder's:
the state between cycles, verification of [x_m, d_1..d_k] in one target forward, the
acceptance rule (greedy, or min(1, p/q) with a residual draw), the crop of both caches to
the committed prefix, and the catch-up on the accepted pairs, whose last output drafts d_1.

    draft   d_1      from the catch-up's last output (the drafter's guess after x_m)
            d_2..d_k one forward over k-1 parallel slots (mask token, mask_hidden) after the
                     drafter's cache, at rotary positions m..m+k-2
            (sampling: each d_j drawn from its own q_j; the q_j are what verification uses)

The slots' keys enter the drafter's cache like draft steps' do, and `crop` drops them with
the rest (the cache keeps its pairs t < m). Greedy output equals the target's greedy decoding
token for token whatever the drafter, since verification is unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode.generation import Generation
from eagle3kit.decode.sampling import Sampling, draw, probs
from eagle3kit.decode.speculative import SpecDecoder, speculative_generate

if TYPE_CHECKING:
    from eagle3kit.methods.peagle.model import PEagleDrafter
    from eagle3kit.model.target import TargetModel


def parallel_chain(
    drafter, cache, logits: torch.Tensor, depth: int, s: Sampling, gen
) -> tuple[list[int], torch.Tensor | None]:
    """k = ``depth`` draft tokens (target ids) from one pass, and when sampling their draft
    laws q [k, Vd]. ``logits`` [Vd]: the drafter's output on its last cached pair (d_1)."""
    rows = [logits]  # [Vd]: d_1
    if depth > 1:
        out = drafter.parallel_slots(depth - 1, cache)  # logits [1, k-1, Vd]: d_2..d_k
        rows += list(out.logits[0].unbind(0))
    drafts, qs = [], []
    for row in rows:
        if s.greedy:
            dd = int(row.argmax())
        else:
            qs.append(probs(row, s))  # [Vd]
            dd = draw(qs[-1], gen)
        drafts.append(dd + int(drafter.d2t[dd]))
    return drafts, (torch.stack(qs) if qs else None)


class PEagleDecoder(SpecDecoder):
    """SpecDecoder drafting its chain in one parallel pass."""

    def _draft_chain(self) -> tuple[list[int], torch.Tensor | None]:
        return parallel_chain(self.drafter, self.cache, self.logits, self.depth, self.s, self.gen)


def generate(target: TargetModel, drafter: PEagleDrafter, prompt_ids: Any, **kw: Any) -> Generation:
    """Speculative decoding with a P-EAGLE drafter (decode/speculative.py's keywords)."""
    if kw.get("tree") is not None:
        raise Eagle3Error("tree: a P-EAGLE drafter drafts a chain in one pass; drop the tree")
    return speculative_generate(target, drafter, prompt_ids, decoder=PEagleDecoder, **kw)
