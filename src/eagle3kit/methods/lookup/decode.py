"""Prompt lookup decoding in eagle3kit's own KV-cache loop (batch 1, greedy, lossless).

The drafts come from the text itself, by the n-gram rule of transformers'
``PromptLookupCandidateGenerator.get_candidates`` (transformers 5.24.0,
src/transformers/generation/candidate_generator.py), restated here:

    seq = prompt + tokens so far (the last one not yet in the target's cache), L = len(seq)
    for n = min(max_matching_ngram_size, L - 1) down to 1:
        for every i, left to right, where seq[i:i+n] == seq[L-n:]   (the trailing n-gram,
                                                                      its own spot included):
            s = i + n;  e = min(s + num_output_tokens, L, max_length)
            if s < e: drafts = seq[s:e], cut before the first EOS; stop searching
    no match: no drafts (the cycle is a plain greedy step)

with max_length = prompt length + max_new_tokens, and no drafts at all when L + 1 equals it.
The first (leftmost) occurrence of the longest matching n-gram wins, as in transformers.

One cycle verifies [x_m, d_1..d_j] in one target forward, accepts the longest prefix of drafts
equal to the target's argmax, then the target's own next token: a + 1 new tokens, exactly the
target's greedy output. The stats are the chain decoder's (``DecodeStats``; ``drafted`` = j,
which varies by cycle and is 0 when nothing matched), so tau = tokens per target forward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode.generation import Clock, Generation, Output, prompt_tensor, stop_set
from eagle3kit.decode.stats import Cycle, DecodeStats

if TYPE_CHECKING:
    from eagle3kit.model.target import TargetModel


def lookup_candidates(
    seq: list[int],
    *,
    num_output_tokens: int = 10,
    max_matching_ngram_size: int = 2,
    max_length: int | None = None,
    eos_token_id: int | None = None,
) -> list[int]:
    """Draft tokens for the sequence ``seq`` by the n-gram rule above ([] when none match)."""
    n_in = len(seq)
    if max_length is not None and max_length == n_in + 1:
        return []
    for n in range(min(max_matching_ngram_size, n_in - 1), 0, -1):
        tail = seq[n_in - n :]
        for i in range(n_in - n + 1):
            if seq[i : i + n] != tail:
                continue
            start = i + n
            end = min(start + num_output_tokens, n_in)
            if max_length is not None:
                end = min(end, max_length)
            if start < end:
                chosen = seq[start:end]
                if eos_token_id is not None and eos_token_id in chosen:
                    chosen = chosen[: chosen.index(eos_token_id)]
                return chosen
    return []


def lookup_generate(
    target,
    prompt_ids: list[int] | torch.Tensor,
    *,
    max_new_tokens: int = 128,
    num_output_tokens: int = 10,
    max_matching_ngram_size: int = 2,
    eos_token_id: int | None = None,
    on_tokens: Callable[[list[int]], None] | None = None,
) -> Generation:
    """Greedy decoding drafted by prompt lookup (module docstring); output == plain greedy.
    Each cycle's tokens go to ``on_tokens`` as they come."""
    if max_new_tokens < 1:
        raise Eagle3Error(f"max_new_tokens: expected >= 1, found {max_new_tokens}")
    if num_output_tokens < 1 or max_matching_ngram_size < 1:
        raise Eagle3Error(
            "prompt lookup: expected num_output_tokens >= 1 and max_matching_ngram_size >= 1, "
            f"found {num_output_tokens} and {max_matching_ngram_size}"
        )
    ids = prompt_tensor(prompt_ids, target.device)  # [1, P]
    prompt = ids[0].tolist()
    stats = DecodeStats(depth=num_output_tokens, method="lookup", prompt_tokens=len(prompt))
    out = Output(stop_set(eos_token_id), max_new_tokens, on_tokens)
    clock = Clock(target.device)
    with torch.inference_mode():
        done = out.add([int(target.prefill(ids).logits[0, -1].argmax())])[0]
        stats.prefill_s = clock.lap()
        while not done:
            rule = {
                "num_output_tokens": num_output_tokens,
                "max_matching_ngram_size": max_matching_ngram_size,
                "max_length": len(prompt) + max_new_tokens,
                "eos_token_id": eos_token_id,
            }
            done, cycle = _lookup_cycle(target, ids, prompt, out, clock, rule)
            stats.cycles.append(cycle)
    stats.total_s = clock.total()
    stats.new_tokens = len(out.tokens)
    return Generation(prompt, out.tokens, stats)


def _lookup_cycle(target, ids, prompt, out: Output, clock: Clock, rule: dict):
    """Draft by lookup, verify in one forward, accept the leading run the target agrees with,
    crop its cache. (done, Cycle)."""
    m = target.seq_len  # x_m = the last committed token sits at position m
    clock.lap(sync=False)
    drafts = lookup_candidates(prompt + out.tokens, **rule)
    t_draft = clock.lap(sync=False)
    v = target.verify(ids.new_tensor([[out.tokens[-1]] + drafts]))  # logits [1, j+1, V]
    t_verify = clock.lap()
    best = v.logits[0].argmax(-1).tolist()  # [j+1] the target's choice after each
    a = 0
    while a < len(drafts) and drafts[a] == best[a]:
        a += 1
    target.crop(m + a + 1)  # x_0..x_m, d_1..d_a
    done, made = out.add(drafts[:a] + [best[a]])
    accepted = min(a, made - 1)  # the end (EOS, limit) cuts the last cycle
    return done, Cycle(len(drafts), accepted, t_draft, t_verify, t_draft + t_verify + clock.lap())


def generate(target: TargetModel, drafter: None, prompt_ids: Any, **kw: Any) -> Generation:
    """Prompt lookup with decode/speculative.py's keywords (the part core/registry.py asks
    for; no drafter): `depth` is the most tokens one lookup proposes. Greedy only."""
    if drafter is not None or kw.pop("tree", None) is not None:
        raise Eagle3Error("prompt lookup: drafts from the context alone (no drafter, no tree)")
    sampling = kw.pop("sampling", None)
    if sampling is not None and not sampling.greedy:
        raise Eagle3Error("prompt lookup: greedy only (its drafts have no law to sample from)")
    kw.pop("seed", None)
    return lookup_generate(target, prompt_ids, num_output_tokens=kw.pop("depth", 10), **kw)
