"""Device checks, light: run on the CPU everywhere and on CUDA when present (`-m gpu`;
benchmarks/gpu_check.py runs them). Greedy speculative decoding on the device must give the
CPU target's own greedy tokens; sampling must run there and repeat with the same seed."""

from __future__ import annotations

import pytest
import torch

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    ),
]
pytestmark = pytest.mark.gpu
PROMPTS = ["def parse(text):", "class Node:"]


@pytest.fixture(scope="module")
def reference():
    """The zoo target's greedy continuations, computed on the CPU by plain greedy decoding."""
    from eagle3kit import zoo
    from eagle3kit.decode import greedy_generate
    from eagle3kit.model.target import TargetModel

    path = str(zoo.get("llama-v1", size="tiny"))
    tm = TargetModel.from_pretrained(path)
    ids = [tm.tokenizer(p)["input_ids"] for p in PROMPTS]
    return path, ids, [greedy_generate(tm, i, max_new_tokens=16).tokens for i in ids]


def _on(path: str, device: str):
    from decode_helpers import new_drafter

    from eagle3kit.model.target import TargetModel

    tm = TargetModel.from_pretrained(path, device=device)
    d = new_drafter(tm, seed=1).to(device)
    d.set_embedding(tm.embed_tokens.weight)
    return tm, d


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_greedy_on_device_is_the_cpu_greedy(reference, device, tree):
    from eagle3kit.decode import TreeShape, speculative_generate

    path, ids, want = reference
    tm, d = _on(path, device)
    shape = TreeShape(4, 8) if tree else None
    got = [speculative_generate(tm, d, i, max_new_tokens=16, tree=shape).tokens for i in ids]
    assert got == want


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_sampling_on_device_repeats_with_its_seed(reference, device, tree):
    from eagle3kit.decode import Sampling, TreeShape, speculative_generate

    path, ids, _ = reference
    tm, d = _on(path, device)
    s, shape = Sampling(temperature=0.9, top_p=0.95), TreeShape(4, 8) if tree else None
    runs = [
        speculative_generate(tm, d, ids[0], max_new_tokens=16, tree=shape, sampling=s, seed=5)
        for _ in range(2)
    ]
    assert runs[0].tokens == runs[1].tokens and len(runs[0].tokens) == 16
