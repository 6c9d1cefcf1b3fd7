"""core.diversity: per-output and cross-prompt figures, and the canned-output warning that
`bench` and `eval --online` carry beside tau (issue 22)."""

from __future__ import annotations

import json
import re

import pytest
import torch

from eagle3kit.core import diversity as dv


def test_figures_by_hand():
    a, b = [1, 2, 3, 4, 5], [1, 2, 3, 4, 6]
    # a's 4-grams: 1234 2345; b's: 1234 2346 -> 3 distinct of 4
    assert dv.pooled_distinct([a, b]) == 3 / 4
    assert dv.pooled_distinct([a, a, a]) == 2 / 6  # the same answer thrice: 1/N
    assert dv.pooled_distinct([[1, 2, 3], [4]]) == 1.0  # no 4-gram at all
    assert dv.distinct_outputs([a, b, list(a)]) == 2
    assert dv.distinct_openings([a, b], k=4) == 1 / 2  # both open with 1 2 3 4
    assert dv.distinct_openings([a, b], k=5) == 1.0
    assert dv.distinct_ngram_ratio([1, 2] * 20) == 2 / 37
    assert dv.distinct_ngram_ratio([5, 5, 5]) == 1.0


def test_no_4gram_spans_two_outputs():
    # joined, [1,2],[3,4] would form 1234; pooled, neither output has a 4-gram
    assert dv.pooled_distinct([[1, 2], [3, 4], [1, 2, 3, 4]]) == 1.0


def test_canned_outputs_warn_and_varied_ones_do_not():
    canned = [[7, 8, 9, 10, 11, 12, 13, 14, 15, 16]] * 6
    doc = dv.cross_prompt(canned)
    assert doc["outputs"] == 6 and doc["distinct_outputs"] == 1
    assert doc["canned"] is True and "barely depend on the prompt" in doc["warning"]
    assert doc["pooled_distinct4"] == pytest.approx(1 / 6, abs=1e-4)  # rounded to 4 places
    varied = [list(range(10 * i, 10 * i + 10)) for i in range(6)]
    doc = dv.cross_prompt(varied)
    assert doc["canned"] is False and doc["warning"] is None
    assert doc["distinct_openings"] == 1.0 and doc["pooled_distinct4"] == 1.0
    assert dv.cross_prompt([[1, 2, 3, 4, 5]])["canned"] is False  # one output: no verdict


def test_real_function_sources_are_not_canned():
    """The figures on real outputs: the stdlib's own answers to held-out requests (the
    functions' true sources) differ from one another; the same answer repeated does not."""
    from eagle3kit.zoo import corpus

    fns = corpus.functions(corpus.files("lib", held_out=True))[:24]
    words = [re.findall(r"\w+|\S", fn.code) for fn in fns]  # words and punctuation
    doc = dv.cross_prompt(words)
    assert doc["canned"] is False and doc["distinct_outputs"] == len(set(map(tuple, words)))
    assert doc["pooled_distinct4"] > 0.6
    assert dv.cross_prompt([words[0]] * 24)["canned"] is True


@pytest.fixture(scope="module")
def canned_target(tmp_path_factory):
    """A tiny zoo member made deaf to its prompt: every token embeds to the same vector, so
    every position sees the same inputs and it answers every prompt alike."""
    import shutil

    from safetensors.torch import load_file, save_file

    from eagle3kit import zoo

    torch.set_num_threads(1)
    src = zoo.get("llama-v1", size="tiny")
    dst = tmp_path_factory.mktemp("canned") / "llama-v1-canned"
    shutil.copytree(src, dst)
    w = load_file(dst / "model.safetensors")
    key = next(k for k in w if k.endswith("embed_tokens.weight"))
    w[key] = w[key][:1].expand_as(w[key]).contiguous()  # every row = row 0
    save_file(w, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def test_bench_warns_on_a_canned_target(cli, canned_target):
    r = cli(
        "bench",
        "--target",
        str(canned_target),
        "--prompts",
        "4",
        "--repeats",
        "1",
        "--max-new-tokens",
        "12",
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)["target_diversity"]
    assert doc["outputs"] == 4 and doc["distinct_outputs"] == 1
    assert doc["canned"] is True and "barely depend on the prompt" in doc["warning"]


def test_online_eval_warns_on_a_canned_target(canned_target):
    from decode_helpers import new_drafter

    from eagle3kit.measure.bench import default_prompts
    from eagle3kit.measure.evaluate import evaluate_online
    from eagle3kit.model.target import TargetModel

    tm = TargetModel.from_pretrained(canned_target)
    prompts = default_prompts(tm.tokenizer, 3)
    doc = evaluate_online(tm, new_drafter(tm), prompts, 2, max_new_tokens=10, repeats=1)
    div = doc["target_diversity"]
    assert div["outputs"] == 3 and div["distinct_outputs"] == 1 and div["canned"] is True
    assert 0 < doc["target_distinct4"] <= 1
