"""EAGLE-3 speculative decoding, batch 1: the whole algorithm in `speculative_generate`.

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
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode.sampling import Sampling, accept_sampled, draft_probs_on_target, draw, probs
from eagle3kit.decode.stats import Cycle, DecodeStats
from eagle3kit.decode.tree import draft_tree, walk
from eagle3kit.model.drafter import DraftCache


@dataclass(frozen=True)
class TreeShape:
    """A draft tree: top-``topk`` expansion per step, ``budget`` nodes sent to the target."""

    topk: int = 4
    budget: int = 16


@dataclass
class Generation:
    prompt_ids: list[int]
    tokens: list[int]  # the continuation, without the EOS token
    stats: DecodeStats


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _chooser(s: Sampling, gen: torch.Generator | None) -> Callable[[torch.Tensor], int]:
    if s.greedy:
        return lambda logits: int(logits.argmax())
    return lambda logits: draw(probs(logits, s), gen)


def speculative_generate(
    target,
    drafter,
    prompt_ids: list[int] | torch.Tensor,
    *,
    max_new_tokens: int = 128,
    depth: int = 4,
    tree: TreeShape | None = None,
    sampling: Sampling = Sampling(),
    eos_token_id: int | None = None,
    seed: int = 0,
    on_tokens: Callable[[list[int]], None] | None = None,
) -> Generation:
    """Decode up to ``max_new_tokens`` after ``prompt_ids`` (see the module docstring)."""
    _check(drafter, depth, tree, max_new_tokens)
    dev = target.device
    gen = torch.Generator(device=dev).manual_seed(seed) if not sampling.greedy else None
    choose = _chooser(sampling, gen)
    ids = torch.as_tensor(prompt_ids, dtype=torch.long, device=dev).reshape(1, -1)  # [1, P]
    stats = DecodeStats(depth=depth, method="tree" if tree else "chain", prompt_tokens=ids.shape[1])
    t_start = time.perf_counter()
    with torch.inference_mode():
        out = target.prefill(ids)  # logits [1, P, V], aux [1, P, 3Ht]
        x = choose(out.logits[0, -1])
        cache = DraftCache()
        nxt = torch.cat([ids[:, 1:], ids.new_tensor([[x]])], dim=1)  # [1, P]: x_{t+1}
        d = drafter(nxt, out.aux.to(drafter.fc.weight.dtype), cache, from_aux=True)
        stats.prefill_s = _now(dev) - t_start
        tokens: list[int] = []
        done = _emit(tokens, [x], eos_token_id, max_new_tokens, on_tokens)[0]
        step = _tree_cycle if tree is not None else _chain_cycle
        while not done:
            t0 = time.perf_counter()
            m = target.seq_len  # x_m = tokens[-1] sits at position m
            logits, hidden = d.logits[0, -1], d.hidden[:, -1:]  # [Vd], [1, 1, H]
            r = step(target, drafter, cache, logits, hidden, tokens[-1], depth, tree, sampling, gen)
            cache.crop(m)
            done, made = _emit(tokens, r.new, eos_token_id, max_new_tokens, on_tokens)
            t3 = time.perf_counter()
            if not done:  # catch the drafter up: pairs (aux of kept row, the token after it)
                aux = r.aux.to(drafter.fc.weight.dtype)  # [1, a+1, 3Ht]
                d = drafter(ids.new_tensor([r.new]), aux, cache, from_aux=True)
            t4 = _now(dev)
            draft_s = (r.t_drafted - t0) + (t4 - t3)
            accepted = min(r.accepted, made - 1)  # the end (EOS, limit) cuts the last cycle
            stats.cycles.append(Cycle(r.drafted, accepted, draft_s, r.verify_s, t4 - t0))
    stats.total_s = time.perf_counter() - t_start
    stats.new_tokens = len(tokens)
    return Generation(ids[0].tolist(), tokens, stats)


@dataclass
class _Verified:
    """One cycle's outcome: counts, the new tokens, the aux rows of the kept inputs, times."""

    drafted: int
    accepted: int
    new: list[int]  # accepted drafts + the bonus token
    aux: torch.Tensor  # [1, a+1, 3Ht] aux of x_m and of the accepted drafts
    t_drafted: float  # perf_counter when drafting ended
    verify_s: float


def _chain_cycle(target, drafter, cache, logits, hidden, last, depth, _tree, s, gen) -> _Verified:
    """Draft a chain, verify [x_m, d_1..d_k], accept, crop the target's cache."""
    m = target.seq_len
    drafts, q = _draft_chain(drafter, cache, logits, hidden, depth, s, gen)
    t1 = _now(target.device)
    v = target.verify(torch.tensor([[last] + drafts], device=target.device))  # [1, k+1, V]
    t2 = _now(target.device)
    if s.greedy:
        best = v.logits[0].argmax(-1).tolist()  # [k+1] the target's choice after each input
        a = 0
        while a < len(drafts) and drafts[a] == best[a]:
            a += 1
        bonus = best[a]
    else:
        p = probs(v.logits[0], s)  # [k+1, V]
        a, bonus = accept_sampled(p, draft_probs_on_target(q, drafter, p.shape[-1]), drafts, gen)
    target.crop(m + a + 1)  # x_0..x_m, d_1..d_a
    return _Verified(len(drafts), a, drafts[:a] + [bonus], v.aux[:, : a + 1], t1, t2 - t1)


def _tree_cycle(target, drafter, cache, logits, hidden, last, depth, tree, s, gen) -> _Verified:
    """Draft a tree, verify it in one forward, walk it, gather the accepted path's cache."""
    m = target.seq_len
    tr = draft_tree(drafter, cache, logits, hidden, m, tree.topk, depth, tree.budget)
    t1 = _now(target.device)
    ids = torch.tensor([[last] + tr.tokens], device=target.device)  # [1, N+1]
    v = target.verify_tree(ids, tr.position_ids(m), tr.mask())  # logits [1, N+1, V]
    t2 = _now(target.device)
    choose = _chooser(s, gen)
    rows = v.logits[0]  # [N+1, V]
    path, bonus = walk(tr, lambda i: choose(rows[i]))
    keep = [0] + path  # verify rows kept: x_m and the accepted path
    target.keep(list(range(m)) + [m + i for i in keep])
    new = [tr.tokens[i - 1] for i in path] + [bonus]
    return _Verified(len(tr), len(path), new, v.aux[:, keep], t1, t2 - t1)


def _now(dev: torch.device) -> float:
    _sync(dev)
    return time.perf_counter()


def _check(drafter, depth: int, tree: TreeShape | None, max_new_tokens: int) -> None:
    if depth < 1:
        raise Eagle3Error(f"depth: expected >= 1, found {depth}")
    if max_new_tokens < 1:
        raise Eagle3Error(f"max_new_tokens: expected >= 1, found {max_new_tokens}")
    if tree is not None and (tree.topk < 1 or tree.budget < 1):
        raise Eagle3Error(f"tree: expected topk >= 1 and budget >= 1, found {tree}")
    if not getattr(drafter, "embed_loaded", True):
        raise Eagle3Error(
            "drafter: no input embedding loaded (call drafter.set_embedding(target.embed_tokens.weight))"
        )


def _draft_chain(drafter, cache, logits, hidden, k: int, s: Sampling, gen):
    """k draft tokens (target ids) and, when sampling, their draft distributions q [k, Vd]."""
    drafts, qs = [], []
    for i in range(k):
        if s.greedy:
            dd = int(logits.argmax())
        else:
            qs.append(probs(logits, s))  # [Vd]
            dd = draw(qs[-1], gen)
        drafts.append(dd + int(drafter.d2t[dd]))
        if i + 1 < k:
            out = drafter(
                torch.tensor([[drafts[-1]]], device=hidden.device), hidden, cache, from_aux=False
            )
            logits, hidden = out.logits[0, -1], out.hidden[:, -1:]  # [Vd], [1, 1, H]
    return drafts, (torch.stack(qs) if qs else None)


def _emit(tokens: list[int], new: list[int], eos: int | None, limit: int, on_tokens):
    """Append the cycle's tokens up to EOS (dropped) or the limit. (done, made): True when
    generation ends; how many of `new` were produced, an EOS included."""
    done, made = False, len(new)
    if eos is not None and eos in new:
        made = new.index(eos) + 1
        new, done = new[: made - 1], True
    if len(tokens) + len(new) >= limit:
        new, done = new[: limit - len(tokens)], True
        made = min(made, len(new))
    tokens.extend(new)
    if on_tokens is not None and new:
        on_tokens(new)
    return done, made


def greedy_generate(
    target,
    prompt_ids: list[int] | torch.Tensor,
    *,
    max_new_tokens: int = 128,
    eos_token_id: int | None = None,
) -> Generation:
    """Plain greedy decoding with the KV cache, one target forward per token, timed per step
    (the baseline; ``stats.cycles[i].verify_s`` is decode step i)."""
    dev = target.device
    ids = torch.as_tensor(prompt_ids, dtype=torch.long, device=dev).reshape(1, -1)  # [1, P]
    stats = DecodeStats(depth=0, method="greedy", prompt_tokens=ids.shape[1])
    t_start = time.perf_counter()
    tokens: list[int] = []
    with torch.inference_mode():
        x = int(target.prefill(ids).logits[0, -1].argmax())
        stats.prefill_s = _now(dev) - t_start
        while not _emit(tokens, [x], eos_token_id, max_new_tokens, None)[0]:
            t0 = time.perf_counter()
            x = int(target.verify(ids.new_tensor([[x]])).logits[0, -1].argmax())
            dt = _now(dev) - t0
            stats.cycles.append(Cycle(0, 0, 0.0, dt, dt))
    stats.total_s = time.perf_counter() - t_start
    stats.new_tokens = len(tokens)
    return Generation(ids[0].tolist(), tokens, stats)
