"""Prompt lookup in our own KV-cache loop (eagle3kit.methods.lookup.decode): the n-gram rule equals
transformers' PromptLookupCandidateGenerator, and decoding is lossless with tau > 1."""

from __future__ import annotations

import random

import pytest
import torch
from decode_helpers import HELD_OUT

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode import greedy_generate
from eagle3kit.methods.lookup.decode import lookup_candidates, lookup_generate


def hf_candidates(seq, num, ngram, max_length, eos):
    """transformers' own rule (the oracle): the drafts get_candidates appends to seq."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    g = PromptLookupCandidateGenerator(
        eos_token_id=None if eos is None else torch.tensor([eos]),
        num_output_tokens=num,
        max_matching_ngram_size=ngram,
        max_length=max_length,
    )
    out, _ = g.get_candidates(torch.tensor([seq]))
    return out[0, len(seq) :].tolist()


def test_candidates_equal_transformers():
    rng = random.Random(0)
    for trial in range(400):
        n = rng.randint(2, 40)
        seq = [rng.randint(0, 5) for _ in range(n)]  # a small alphabet: many matches
        num, ngram = rng.randint(1, 6), rng.randint(1, 4)
        max_length = n + rng.randint(1, 8)
        eos = rng.choice([None, 0, 3])
        want = hf_candidates(seq, num, ngram, max_length, eos)
        got = lookup_candidates(
            seq,
            num_output_tokens=num,
            max_matching_ngram_size=ngram,
            max_length=max_length,
            eos_token_id=eos,
        )
        assert got == want, (trial, seq, num, ngram, max_length, eos)


def test_candidates_hand_example():
    # trailing bigram (7, 8) first occurs at 0: drafts are what followed it there
    seq = [7, 8, 1, 2, 3, 7, 8, 4, 7, 8]
    assert lookup_candidates(seq, num_output_tokens=3) == [1, 2, 3]
    assert lookup_candidates(seq, num_output_tokens=3, eos_token_id=2) == [1]
    assert lookup_candidates([1, 2, 3], num_output_tokens=3) == []  # no earlier match


@pytest.fixture(scope="module", params=["llama-v1", "dsv3-v1"])
def target(request):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    return TargetModel.from_pretrained(zoo.get(request.param, size="tiny"))


def hf_lookup_forwards(target, ids, n, eos):
    """transformers' generate with prompt lookup: (new tokens, target forwards after prefill)."""
    calls = []
    h = target.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        with torch.no_grad():
            out = target.model.generate(
                torch.tensor([ids]),
                do_sample=False,
                max_new_tokens=n,
                prompt_lookup_num_tokens=4,
                eos_token_id=eos,
                pad_token_id=0,
            )[0, len(ids) :].tolist()
    finally:
        h.remove()
    return (out[: out.index(eos)] if eos in out else out), len(calls) - 1


@pytest.mark.slow  # seconds; the full suite runs it (fast subset under 3 min)
def test_lookup_lossless_and_same_forwards_as_transformers(target):
    eos = target.tokenizer.eos_token_id
    taus = []
    for text in HELD_OUT:
        ids = target.tokenizer(text)["input_ids"]
        want = greedy_generate(target, ids, max_new_tokens=40, eos_token_id=eos).tokens
        g = lookup_generate(target, ids, max_new_tokens=40, num_output_tokens=4, eos_token_id=eos)
        assert g.tokens == want
        st = g.stats
        assert st.method == "lookup" and st.new_tokens == len(want)
        # tau is tokens per target forward after the prefill: the cycles account for them all
        assert sum(c.accepted + 1 for c in st.cycles) == len(want) - 1 + (len(want) < 40)
        hf_tokens, hf_forwards = hf_lookup_forwards(target, ids, 40, eos)
        assert hf_tokens == want
        assert len(st.cycles) == hf_forwards  # same rule, same drafts: same forwards
        taus.append(st.tau_online)
    assert max(taus) > 1.0  # the tiny targets repeat themselves: lookup gets accepted


def test_lookup_bad_input(target):
    with pytest.raises(Eagle3Error, match="max_new_tokens"):
        lookup_generate(target, [1, 2], max_new_tokens=0)
    with pytest.raises(Eagle3Error, match="num_output_tokens"):
        lookup_generate(target, [1, 2], num_output_tokens=0)
