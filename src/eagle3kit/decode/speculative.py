"""EAGLE-3 speculative decoding, batch 1: `SpecDecoder` holds the state, one method per phase.

State between cycles: the committed tokens x_0..x_m, where x_m (the last emitted token) is not
yet in the target's KV cache (which holds x_0..x_{m-1}), and the drafter's cache holds its
pairs (aux_t, x_{t+1}) for t < m: the target's aux hidden states at t with the token after t.
The drafter's output on the last pair is its guess for x_{m+1}.

One cycle:

    draft   chain: d_1..d_k, each from the drafter's output after the previous one
            tree:  the `budget` best nodes of a top-K tree of depth k (decode/tree.py)
    verify  one target forward over [x_m, drafts] (a tree with its 4D tree mask)
    accept  greedy: the longest prefix (tree: path) where every draft is the target's argmax,
            then the target's own next token (the bonus): a+1 new tokens, exactly greedy;
            sampling: min(1, p/q) per draft and a residual draw (decode/sampling.py), or
            for a tree, the target's own sample walked down the tree (lossless for any tree)
    crop    target cache -> x_0..x_m + the accepted drafts (a tree's path is gathered),
            drafter cache -> its pairs for t < m (the draft steps are dropped)
    catch up the drafter on the a+1 new pairs (aux of x_m and of the accepted drafts, each
            with the token after it), whose last output drafts the next cycle.

Greedy output equals the target's greedy decoding token for token, for any drafter.
`speculative_generate` runs the cycles and times each phase from outside (decode/generation.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode.generation import Clock, Generation, Output, prompt_tensor, stop_set
from eagle3kit.decode.sampling import (
    GREEDY,
    Sampling,
    accept_sampled,
    draft_probs_on_target,
    draw,
    make_generator,
    probs,
)
from eagle3kit.decode.stats import Cycle, DecodeStats
from eagle3kit.decode.tree import Tree, draft_tree, walk
from eagle3kit.model.drafter import DraftCache

if TYPE_CHECKING:
    from eagle3kit.model.protocols import Drafter
    from eagle3kit.model.target import TargetModel


@dataclass(frozen=True)
class TreeShape:
    """A draft tree: top-``topk`` expansion per step, ``budget`` nodes sent to the target."""

    topk: int = 4
    budget: int = 16


@dataclass
class Draft:
    """One cycle's drafts, rooted at x_m (position m)."""

    m: int
    tokens: list[int]  # target ids: the chain d_1..d_k, or the tree's nodes in verify order
    q: torch.Tensor | None = None  # chain sampling: the draft distributions [k, Vd]
    tree: Tree | None = None  # tree drafting: the nodes' parents and depths


@dataclass
class Step:
    """What a cycle accepted."""

    rows: list[int]  # verify rows kept: 0 (x_m), then the accepted drafts' rows
    new: list[int]  # the accepted drafts + the bonus token

    @property
    def accepted(self) -> int:
        return len(self.rows) - 1


class SpecDecoder:
    """Target, drafter, the drafter's cache, the sampling rule and its generator."""

    def __init__(
        self,
        target: TargetModel,
        drafter: Drafter,
        depth: int,
        tree: TreeShape | None,
        s: Sampling,
        seed: int = 0,
    ):
        self.target, self.drafter, self.depth, self.tree, self.s = target, drafter, depth, tree, s
        self.gen = None if s.greedy else make_generator(target.device, seed)
        self.cache = DraftCache()
        self.last = -1  # x_m: emitted, not yet in the target's cache
        self.logits: torch.Tensor | None = None  # [Vd] the drafter's output on its last pair
        self.hidden: torch.Tensor | None = None  # [1, 1, H]

    def choose(self, logits: torch.Tensor) -> int:
        """The target's token from its logits [V]: argmax, or a draw from its law."""
        return int(logits.argmax()) if self.s.greedy else draw(probs(logits, self.s), self.gen)

    def _drafter_on(self, ids: torch.Tensor, aux: torch.Tensor) -> None:
        """Run the drafter on pairs (aux_t [1, n, 3Ht], x_{t+1} [1, n]) into its cache."""
        d = self.drafter(ids, aux.to(self.drafter.dtype), self.cache, from_aux=True)
        self.logits, self.hidden = d.logits[0, -1], d.hidden[:, -1:]

    def prefill(self, ids: torch.Tensor) -> int:
        """The prompt [1, P] into both caches; returns x_m, the first emitted token."""
        out = self.target.prefill(ids)  # logits [1, P, V], aux [1, P, 3Ht]
        self.last = self.choose(out.logits[0, -1])
        nxt = torch.cat([ids[:, 1:], ids.new_tensor([[self.last]])], dim=1)  # [1, P]: x_{t+1}
        self._drafter_on(nxt, out.aux)
        return self.last

    def draft(self) -> Draft:
        m = self.target.seq_len
        if self.tree is not None:
            t = self.tree
            tr = draft_tree(
                self.drafter, self.cache, self.logits, self.hidden, m, t.topk, self.depth, t.budget
            )
            return Draft(m, tr.tokens, tree=tr)
        return Draft(m, *self._draft_chain())

    def _draft_chain(self) -> tuple[list[int], torch.Tensor | None]:
        """k draft tokens (target ids) and, when sampling, their draft laws q [k, Vd]: one
        drafter step per token (a method drafting otherwise overrides this)."""
        logits, hidden, drafts, qs = self.logits, self.hidden, [], []
        for i in range(self.depth):
            if self.s.greedy:
                dd = int(logits.argmax())
            else:
                qs.append(probs(logits, self.s))  # [Vd]
                dd = draw(qs[-1], self.gen)
            drafts.append(dd + int(self.drafter.d2t[dd]))
            if i + 1 < self.depth:
                ids = torch.tensor([[drafts[-1]]], device=hidden.device)  # [1, 1]
                out = self.drafter(ids, hidden, self.cache, from_aux=False)
                logits, hidden = out.logits[0, -1], out.hidden[:, -1:]  # [Vd], [1, 1, H]
        return drafts, (torch.stack(qs) if qs else None)

    def verify(self, d: Draft):
        """One target forward over [x_m, drafts]: logits [1, n+1, V], aux [1, n+1, 3Ht]."""
        ids = torch.tensor([[self.last] + d.tokens], device=self.target.device)  # [1, n+1]
        if d.tree is None:
            return self.target.verify(ids)
        dev = self.target.device
        return self.target.verify_tree(ids, d.tree.position_ids(d.m, dev), d.tree.mask(dev))

    def accept(self, d: Draft, v) -> Step:
        rows = v.logits[0]  # [n+1, V]
        if d.tree is not None:  # the target's own choice walked down the tree
            path, bonus = walk(d.tree, lambda i: self.choose(rows[i]))
            return Step([0] + path, [d.tokens[i - 1] for i in path] + [bonus])
        if self.s.greedy:
            best = rows.argmax(-1).tolist()  # [k+1] the target's choice after each input
            a = 0
            while a < len(d.tokens) and d.tokens[a] == best[a]:
                a += 1
            bonus = best[a]
        else:
            p = probs(rows, self.s)  # [k+1, V]
            q = draft_probs_on_target(d.q, self.drafter, p.shape[-1])  # [k, V]
            a, bonus = accept_sampled(p, q, d.tokens, self.gen)
        return Step(list(range(a + 1)), d.tokens[:a] + [bonus])

    def crop(self, d: Draft, step: Step) -> None:
        """Target cache -> x_0..x_m + the accepted drafts; drafter cache -> its pairs t < m."""
        if d.tree is None:
            self.target.crop(d.m + len(step.rows))
        else:
            self.target.keep(list(range(d.m)) + [d.m + i for i in step.rows])
        self.cache.crop(d.m)
        window = getattr(getattr(self.drafter, "spec", None), "sliding_window", None)
        if window:  # later queries sit at positions >= m: slots <= m - W are out of sight
            self.cache.forget(d.m - window + 1)
        self.last = step.new[-1]

    def catch_up(self, step: Step, v) -> None:
        """The drafter on the new pairs (aux of each kept row, the token after it)."""
        ids = torch.tensor([step.new], device=self.target.device)  # [1, a+1]
        self._drafter_on(ids, v.aux[:, step.rows])


def speculative_generate(
    target: TargetModel,
    drafter: Drafter,
    prompt_ids: list[int] | torch.Tensor,
    *,
    max_new_tokens: int = 128,
    depth: int = 4,
    tree: TreeShape | None = None,
    sampling: Sampling = GREEDY,
    eos_token_id: int | None = None,
    seed: int = 0,
    on_tokens: Callable[[list[int]], None] | None = None,
    decoder: type[SpecDecoder] | None = None,
) -> Generation:
    """Decode up to ``max_new_tokens`` after ``prompt_ids`` (see the module docstring);
    ``decoder``: a SpecDecoder that drafts its own way (P-EAGLE's one pass)."""
    _check(drafter, depth, tree, max_new_tokens)
    ids = prompt_tensor(prompt_ids, target.device)  # [1, P]
    dec = (decoder or SpecDecoder)(target, drafter, depth, tree, sampling, seed)
    out = Output(stop_set(eos_token_id), max_new_tokens, on_tokens)
    stats = DecodeStats(depth=depth, method="tree" if tree else "chain", prompt_tokens=ids.shape[1])
    return run_cycles(dec, ids, out, stats)


def run_cycles(dec: SpecDecoder, ids: torch.Tensor, out: Output, stats: DecodeStats) -> Generation:
    """Prefill ``ids`` ([1, P], on the target's device), then timed cycles until ``out`` ends;
    fills ``stats``' times, cycles and token count. Every method's decoder (chain, tree,
    DFlash block, MTP) runs through here."""
    clock = Clock(ids.device)
    with torch.inference_mode():
        x = dec.prefill(ids)
        stats.prefill_s = clock.lap()
        done = out.add([x])[0]
        clock.lap(sync=False)
        while not done:
            done, cycle = timed_cycle(dec, out, clock)
            stats.cycles.append(cycle)
    stats.total_s = clock.total()
    stats.new_tokens = len(out.tokens)
    return Generation(ids[0].tolist(), out.tokens, stats)


def timed_cycle(dec: SpecDecoder, out: Output, clock: Clock) -> tuple[bool, Cycle]:
    """One cycle, draft -> verify -> accept -> crop -> catch up, each phase timed from here.
    The end (EOS, the limit) cuts the last cycle: it counts what it produced."""
    d = dec.draft()
    t_draft = clock.lap()
    v = dec.verify(d)
    t_verify = clock.lap()
    step = dec.accept(d, v)
    dec.crop(d, step)
    done, made = out.add(step.new)
    t_book = clock.lap(sync=False)
    if not done:
        dec.catch_up(step, v)
    t_catch = clock.lap()
    accepted = min(step.accepted, made - 1)
    total = t_draft + t_verify + t_book + t_catch
    return done, Cycle(len(d.tokens), accepted, t_draft + t_catch, t_verify, total)


def _check(drafter, depth: int, tree: TreeShape | None, max_new_tokens: int) -> None:
    if depth < 1:
        raise Eagle3Error(f"depth: expected >= 1, found {depth}")
    if max_new_tokens < 1:
        raise Eagle3Error(f"max_new_tokens: expected >= 1, found {max_new_tokens}")
    if tree is not None and (tree.topk < 1 or tree.budget < 1):
        raise Eagle3Error(f"tree: expected topk >= 1 and budget >= 1, found {tree}")
    if not getattr(drafter, "embed_loaded", True):
        raise Eagle3Error(
            "drafter: no input embedding loaded "
            "(call drafter.set_embedding(target.embed_tokens.weight))"
        )
