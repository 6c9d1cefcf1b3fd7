"""The fast subset checks losslessness with a drafter that actually gets accepted (issue 18):
greedy speculative decoding (chain and tree) equals transformers' own greedy decoding, with a
measured accept length tau > 1.5, on the tiny llama-v1 target and a cached trained drafter."""

from __future__ import annotations

import pytest
import torch
from decode_helpers import HELD_OUT, accepting_drafter_dir, hf_greedy_ids

from eagle3kit.decode import TreeShape, speculative_generate
from eagle3kit.model.loading import load_pair

N_NEW = 32
PROMPTS = [*HELD_OUT, "def ", "class ", "import "]


@pytest.fixture(scope="module")
def pair():
    from eagle3kit import zoo

    torch.set_num_threads(1)
    return load_pair(str(zoo.get("llama-v1", size="tiny")), accepting_drafter_dir())


@pytest.mark.parametrize("tree", [None, TreeShape(topk=3, budget=10)], ids=["chain", "tree"])
@pytest.mark.slow
def test_lossless_with_an_accepting_drafter(pair, tree):
    target, drafter = pair
    eos = target.tokenizer.eos_token_id
    accepted = cycles = 0
    for text in PROMPTS:
        ids = target.tokenizer(text)["input_ids"]
        want = [t for t in hf_greedy_ids(target, ids, N_NEW, eos) if t != eos]
        g = speculative_generate(
            target, drafter, ids, max_new_tokens=N_NEW, depth=3, tree=tree, eos_token_id=eos
        )
        assert g.tokens == want, text
        accepted += sum(c.accepted + 1 for c in g.stats.cycles)
        cycles += len(g.stats.cycles)
    tau = accepted / cycles
    assert tau > 1.5, f"tau {tau:.2f}: the drafter is not accepted enough to test acceptance"
