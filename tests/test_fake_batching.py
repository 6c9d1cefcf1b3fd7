"""The fake engine's running batch (tests/fake_batching.py): concurrent greedy requests share
one target forward per step and still get exactly the target's greedy tokens, each from its
own prompt; prompt lookup's counts in the batch are its accept rule's, step by step."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from fake_engine import FakeEngine

from eagle3kit.decode import greedy_generate
from eagle3kit.live.client import Deadline, stream
from eagle3kit.methods.lookup.decode import lookup_generate

TEXTS = ["def main(", "import os\nimport ", "class Point:\n    def ", "    return x"]


@pytest.fixture(scope="module")
def target():
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    return TargetModel.from_pretrained(zoo.get("llama-v1", size="tiny"))


def _ask(url: str, text: str) -> str:
    body = {"prompt": text, "max_tokens": 12, "temperature": 0, "stream": True}
    return stream(url, "/v1/completions", body, Deadline(120)).text


@pytest.mark.parametrize("drafter", [None, "ngram"])
@pytest.mark.slow
def test_batched_requests_get_their_own_greedy_tokens(target, drafter):
    tok, eos = target.tokenizer, target.tokenizer.eos_token_id
    want = {}
    for t in TEXTS:
        ids = tok(t)["input_ids"]
        want[t] = greedy_generate(target, ids, max_new_tokens=12, eos_token_id=eos).tokens
        target.reset()
    with FakeEngine(target, drafter, depth=3, batching=True, lifetime=120) as eng:
        with ThreadPoolExecutor(len(TEXTS)) as pool:
            texts = list(pool.map(lambda t: _ask(eng.url, t), TEXTS))
        log, steps = list(eng.log), list(eng.batcher.steps)
    assert max(steps) > 1  # requests did share steps
    for t, got in zip(TEXTS, texts, strict=True):
        assert got == tok.decode(want[t]), t
    assert sorted(tuple(e["tokens_ids"]) for e in log) == sorted(tuple(w) for w in want.values())
    if drafter == "ngram":  # each request's cycles are batch-1 lookup's, cycle for cycle
        for t in TEXTS:
            g = lookup_generate(
                target,
                tok(t)["input_ids"],
                max_new_tokens=12,
                num_output_tokens=3,
                eos_token_id=eos,
            )
            e = next(e for e in log if e["tokens_ids"] == g.tokens)
            assert e["accepted"] == [c.accepted for c in g.stats.cycles]
