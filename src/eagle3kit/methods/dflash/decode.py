"""Block (DFlash) speculative decoding, batch 1: one drafter pass per cycle, chain verify.

State between cycles: the committed tokens x_0..x_m; x_m (the last emitted token) is not yet
in the target's KV cache, which holds x_0..x_{m-1}. The drafter's cache holds the context
keys/values of positions 0..m-C-1; `pending` holds the target's aux states of positions
m-C..m-1 (the tokens verified last cycle, or the prompt), not yet projected.

One cycle (z-lab's `dflash_generate`, vLLM's DFlashProposer):

    draft    one pass over the block [x_m, mask × K] at positions m..m+K with `pending` as new
             context; d_k = argmax of slot k's logits (k = 1..K); the drafter's cache is then
             cropped to m (the context stays, the block's keys/values go)
    verify   one target forward over [x_m, d_1..d_K]: row j is the target's law for x_{m+j+1}
    accept   greedy: the longest prefix with d_{j+1} = argmax row j, then the bonus argmax;
             sampling, a one-hot draft: draw y_j from row j, accept while y_j = d_{j+1}; the
             first y_j that differs (or y_K) is the bonus. This is min(1, p/q) with q one-hot
             on d: accept with p(d), else the residual max(p - q, 0) ∝ p off d, which is
             exactly y_j conditioned on y_j ≠ d. Either way a+1 tokens, each from the target.
    crop     target cache -> x_0..x_{m+a}; pending <- aux rows 0..a (x_m and the accepted
             drafts), the next cycle's new context; x_{m+a+1} = the bonus

Greedy output equals the target's greedy decoding token for token, for any drafter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode.generation import Generation, Output, prompt_tensor, stop_set
from eagle3kit.decode.sampling import GREEDY, Sampling, draw, make_generator, probs
from eagle3kit.decode.speculative import Draft, Step, run_cycles
from eagle3kit.decode.stats import DecodeStats
from eagle3kit.methods.dflash.model import DFlashCache, DFlashDrafter

if TYPE_CHECKING:
    from eagle3kit.model.target import TargetModel


class BlockDecoder:
    """Target, DFlash drafter, the drafter's cache and pending context, the sampling rule."""

    def __init__(
        self, target: TargetModel, drafter: DFlashDrafter, k: int, s: Sampling, seed: int = 0
    ):
        self.target, self.drafter, self.k, self.s = target, drafter, k, s
        self.gen = None if s.greedy else make_generator(target.device, seed)
        self.cache = DFlashCache(drafter.spec.num_hidden_layers)
        self.last = -1  # x_m
        self.pending: torch.Tensor | None = None  # [1, C, n*H] aux of positions m-C..m-1

    def choose(self, logits: torch.Tensor) -> int:
        """The target's token from its logits [V]: argmax, or a draw from its law."""
        return int(logits.argmax()) if self.s.greedy else draw(probs(logits, self.s), self.gen)

    def prefill(self, ids: torch.Tensor) -> int:
        """The prompt [1, P] into the target's cache; its aux states become the context."""
        out = self.target.prefill(ids)  # logits [1, P, V], aux [1, P, n*H]
        self.pending = out.aux
        self.last = self.choose(out.logits[0, -1])
        return self.last

    def draft(self) -> Draft:
        m, dev = self.target.seq_len, self.target.device
        c = self.pending.shape[1]
        mask_id = self.drafter.spec.mask_token_id
        block = torch.tensor([[self.last] + [mask_id] * self.k], device=dev)  # [1, 1+K]
        pos = torch.arange(m - c, m + 1 + self.k, device=dev)[None]  # [1, C+1+K]
        hidden = self.drafter(block, self.pending, pos, self.cache)  # [1, 1+K, H]
        self.cache.crop(m)  # keep the context 0..m-1, drop the block
        drafts = self.drafter.logits(hidden[0, 1:]).argmax(-1)  # [K]
        return Draft(m, drafts.tolist())

    def verify(self, d: Draft):
        """One target forward over [x_m, d_1..d_K]: logits [1, K+1, V], aux [1, K+1, n*H]."""
        ids = torch.tensor([[self.last] + d.tokens], device=self.target.device)
        return self.target.verify(ids)

    def accept(self, d: Draft, v) -> Step:
        rows = v.logits[0]  # [K+1, V]
        if self.s.greedy:
            best = rows.argmax(-1).tolist()  # the target's choice after each input
            a = 0
            while a < len(d.tokens) and d.tokens[a] == best[a]:
                a += 1
            return Step(list(range(a + 1)), d.tokens[:a] + [best[a]])
        a = 0
        while True:  # one draw per emitted token, in order
            y = self.choose(rows[a])
            if a == len(d.tokens) or y != d.tokens[a]:
                return Step(list(range(a + 1)), d.tokens[:a] + [y])
            a += 1

    def crop(self, d: Draft, step: Step) -> None:
        """Target cache -> x_0..x_m + the accepted drafts; x_{m+a+1} = the bonus."""
        self.target.crop(d.m + len(step.rows))
        self.last = step.new[-1]

    def catch_up(self, step: Step, v) -> None:
        """The accepted tokens' target states (x_m and the drafts) are the next context."""
        self.pending = v.aux[:, : len(step.rows)]


def block_generate(
    target: TargetModel,
    drafter: DFlashDrafter,
    prompt_ids: list[int] | torch.Tensor,
    *,
    max_new_tokens: int = 128,
    depth: int | None = None,
    sampling: Sampling = GREEDY,
    eos_token_id: int | None = None,
    seed: int = 0,
    on_tokens: Callable[[list[int]], None] | None = None,
) -> Generation:
    """Decode with a DFlash drafter, K = `depth` drafts per cycle (default B - 1)."""
    k = drafter.spec.num_proposals if depth is None else depth
    check_block(target, drafter, k, max_new_tokens)
    ids = prompt_tensor(prompt_ids, target.device)  # [1, P]
    dec = BlockDecoder(target, drafter, k, sampling, seed)
    out = Output(stop_set(eos_token_id), max_new_tokens, on_tokens)
    stats = DecodeStats(depth=k, method="dflash", prompt_tokens=ids.shape[1])
    return run_cycles(dec, ids, out, stats)  # type: ignore[arg-type]


def check_block(target: TargetModel, drafter: DFlashDrafter, k: int, max_new_tokens: int) -> None:
    """Refuse what block decoding cannot do losslessly or at all, naming the field."""
    spec = drafter.spec
    if not 1 <= k <= spec.num_proposals:
        raise Eagle3Error(
            f"depth: expected 1..{spec.num_proposals} drafts for block size {spec.block_size}, "
            f"found {k}"
        )
    if max_new_tokens < 1:
        raise Eagle3Error(f"max_new_tokens: expected >= 1, found {max_new_tokens}")
    if tuple(target.aux_layers) != spec.aux_layers:
        raise Eagle3Error(
            f"target aux layers: expected {list(spec.aux_layers)} (the drafter's "
            f"target_layer_ids {list(spec.target_layer_ids)} + 1), found {list(target.aux_layers)}"
        )
    if not drafter.embed_loaded:
        raise Eagle3Error("dflash drafter: no embedding/lm_head; call attach_target(target)")


def generate(target: TargetModel, drafter: DFlashDrafter, prompt_ids: Any, **kw: Any) -> Generation:
    """Block decoding with decode/speculative.py's keywords (the part core/registry.py asks
    for): K = `depth` drafts per cycle."""
    if kw.pop("tree", None) is not None:
        raise Eagle3Error("tree: a DFlash drafter proposes one block (a chain), not a tree")
    return block_generate(target, drafter, prompt_ids, **kw)
