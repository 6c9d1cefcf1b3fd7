"""Golden tests of prepare's loss mask: five chat templates, renders and masks written by hand.

Each template (tests/fixtures/templates/*.jinja, written from the public definitions; the zoo's
comes with its tokenizer) tokenises the same two-turn conversation. The expected full text and
the expected masked text (assistant content + end-of-turn token, nothing else) are spelled out
here; the tokenizer is a small byte-level BPE trained on the fly with the template's special
tokens added.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eagle3kit.data.templates import ChatEncoder, marks_generation

FIXTURES = Path(__file__).parent / "fixtures" / "templates"

TURNS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And 1+1?"},
    {"role": "assistant", "content": "It is 2."},
]

# name -> (bos, eos, other special tokens, template kwargs, expected render, expected masked text)
GOLDEN = {
    "llama3": (
        "<|begin_of_text|>",
        "<|eot_id|>",
        ["<|start_header_id|>", "<|end_header_id|>"],
        {},
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nParis.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nAnd 1+1?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nIt is 2.<|eot_id|>",
        "Paris.<|eot_id|>It is 2.<|eot_id|>",
    ),
    "qwen3": (
        None,
        "<|im_end|>",
        ["<|im_start|>", "<think>", "</think>"],
        {"enable_thinking": False},
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\nParis.<|im_end|>\n"
        "<|im_start|>user\nAnd 1+1?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nIt is 2.<|im_end|>\n",
        "Paris.<|im_end|>It is 2.<|im_end|>",
    ),
    "deepseek_v3": (
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
        ["<｜User｜>", "<｜Assistant｜>"],
        {},
        "<｜begin▁of▁sentence｜>Be brief.<｜User｜>What is the capital of France?"
        "<｜Assistant｜>Paris.<｜end▁of▁sentence｜><｜User｜>And 1+1?"
        "<｜Assistant｜>It is 2.<｜end▁of▁sentence｜>",
        "Paris.<｜end▁of▁sentence｜>It is 2.<｜end▁of▁sentence｜>",
    ),
    "kimi_k2": (
        None,
        "<|im_end|>",
        ["<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>"],
        {},
        "<|im_system|>system<|im_middle|>Be brief.<|im_end|>"
        "<|im_user|>user<|im_middle|>What is the capital of France?<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>Paris.<|im_end|>"
        "<|im_user|>user<|im_middle|>And 1+1?<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|>It is 2.<|im_end|>",
        "Paris.<|im_end|>It is 2.<|im_end|>",
    ),
}

_TEXTS = [
    "What is the capital of France? Paris is the capital of France. And 1+1? It is 2.",
    "Be brief. def f(x):\n    return x + 1\n",
] * 4


def _tokenizer(bos, eos, extra):
    from transformers import PreTrainedTokenizerFast

    from eagle3kit.zoo.corpus import train_tokenizer

    kw = dict(bos_token=bos) if bos else {}
    return PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(_TEXTS, 300),
        eos_token=eos,
        additional_special_tokens=extra,
        clean_up_tokenization_spaces=False,
        **kw,
    )


def _masked_runs(tok, ids, mask):
    """Decoded text of each maximal run of masked tokens."""
    runs, cur = [], []
    for i, m in zip(ids, mask, strict=True):
        if m:
            cur.append(i)
        elif cur:
            runs.append(tok.decode(cur))
            cur = []
    if cur:
        runs.append(tok.decode(cur))
    return runs


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_template_mask(name):
    bos, eos, extra, kwargs, render, masked = GOLDEN[name]
    tok = _tokenizer(bos, eos, extra)
    enc = ChatEncoder(
        tok, template=(FIXTURES / f"{name}.jinja").read_text(), template_kwargs=kwargs
    )
    assert enc.mode == "prefix-diff"  # none of these public templates marks generation
    assert enc.render(TURNS) == render
    ids, mask = enc.encode(TURNS)
    assert ids == tok(render, add_special_tokens=False)["input_ids"]
    assert tok.decode([i for i, m in zip(ids, mask, strict=True) if m]) == masked
    # one run per assistant turn, each ending on the end-of-turn token
    assert _masked_runs(tok, ids, mask) == [f"Paris.{eos}", f"It is 2.{eos}"]


def test_qwen3_empty_think_block_is_prompt_not_loss():
    """Non-thinking mode: the last turn carries `<think>\\n\\n</think>\\n\\n` (as the server's
    generation prompt does), unmasked; the answer after it is masked."""
    bos, eos, extra, _, _, _ = GOLDEN["qwen3"]
    tok = _tokenizer(bos, eos, extra)
    enc = ChatEncoder(
        tok,
        template=(FIXTURES / "qwen3.jinja").read_text(),
        template_kwargs={"enable_thinking": False},
    )
    prompt = enc.render(TURNS[:4], generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    ids, mask = enc.encode(TURNS)
    think = tok("<think>\n\n</think>\n\n", add_special_tokens=False)["input_ids"]
    last = max(k for k, m in enumerate(mask) if not m and k < len(mask) - 1 and mask[k + 1])
    assert ids[last + 1 - len(think) : last + 1] == think
    assert not any(mask[last + 1 - len(think) : last + 1])
    # the sequence up to the last answer is exactly the serving-time prompt
    assert tok.decode(ids[: last + 1]) == prompt


def test_llama3_trims_content_and_masks_what_it_renders():
    bos, eos, extra, _, _, _ = GOLDEN["llama3"]
    tok = _tokenizer(bos, eos, extra)
    enc = ChatEncoder(tok, template=(FIXTURES / "llama3.jinja").read_text())
    turns = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "  Paris. \n"}]
    ids, mask = enc.encode(turns)
    assert _masked_runs(tok, ids, mask) == ["Paris.<|eot_id|>"]


@pytest.fixture(scope="module")
def zoo_tokenizer():
    from transformers import AutoTokenizer

    from eagle3kit import zoo

    return AutoTokenizer.from_pretrained(zoo.get("llama-v1", size="tiny"))


def test_zoo_template_generation_marks(zoo_tokenizer):
    tok = zoo_tokenizer
    enc = ChatEncoder(tok)
    assert enc.mode == "generation" and marks_generation(enc.template)
    ids, mask = enc.encode(TURNS)
    assert tok.decode(ids) == (
        "<s><|system|>\nBe brief.</s>\n<|user|>\nWhat is the capital of France?</s>\n"
        "<|assistant|>\nParis.</s>\n<|user|>\nAnd 1+1?</s>\n<|assistant|>\nIt is 2.</s>\n"
    )
    assert _masked_runs(tok, ids, mask) == ["Paris.</s>", "It is 2.</s>"]


def test_zoo_template_without_marks_gives_the_same_mask(zoo_tokenizer):
    """The prefix-diff fallback agrees with {% generation %} on the zoo's template."""
    tok = zoo_tokenizer
    marked = ChatEncoder(tok).encode(TURNS)
    plain_tpl = re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", tok.chat_template)
    enc = ChatEncoder(tok, template=plain_tpl)
    assert enc.mode == "prefix-diff" and enc.eot == "</s>" and enc.post == "</s>\n"
    assert enc.encode(TURNS) == marked


def test_both_methods_agree_on_zoo_chat_samples(zoo_tokenizer):
    """Real multi-turn text (stdlib code with its whitespace): generation marks == prefix diff."""
    from eagle3kit.zoo import corpus as _corpus

    pairs = [p["messages"] for p in _corpus.chat_samples(_corpus.files("lib", limit=8))][:30]
    convs = [pairs[i] + pairs[i + 1] + pairs[i + 2] for i in range(0, len(pairs) - 2, 3)]
    assert len(convs) >= 5
    tok = zoo_tokenizer
    plain = re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", tok.chat_template)
    marked, diffed = ChatEncoder(tok), ChatEncoder(tok, template=plain)
    for c in convs:
        ids, mask = marked.encode(c)
        assert diffed.encode(c) == (ids, mask)
        answers = [t["content"] + "</s>" for t in c if t["role"] == "assistant"]
        assert _masked_runs(tok, ids, mask) == answers


def test_unusable_templates_are_one_clear_error():
    from eagle3kit.core.errors import Eagle3Error

    tok = _tokenizer(None, "<|im_end|>", [])
    with pytest.raises(Eagle3Error, match="found none \\(pass --chat-template FILE\\)"):
        ChatEncoder(tok)
    # the answer is not rendered after the generation prompt: no way to tell prompt from answer
    odd = (
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}>>{% endif %}"
    )
    with pytest.raises(Eagle3Error, match="does not extend its generation prompt"):
        ChatEncoder(tok, template=odd)


def test_qwen3_thinking_mode_reasoning_dropped_from_history():
    """Thinking mode (the template's default): the model writes its think block itself, so the
    last answer's think block is loss; an earlier answer's reasoning is dropped from history by
    the template, and only what history keeps is masked there."""
    bos, eos, extra, _, _, _ = GOLDEN["qwen3"]
    tok = _tokenizer(bos, eos, extra)
    enc = ChatEncoder(tok, template=(FIXTURES / "qwen3.jinja").read_text())
    turns = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "<think>\nFrance: Paris.\n</think>\n\nParis."},
        {"role": "user", "content": "And 1+1?"},
        {"role": "assistant", "content": "<think>\nadd\n</think>\n\nIt is 2."},
    ]
    ids, mask = enc.encode(turns)
    assert tok.decode(ids) == (
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\nParis.<|im_end|>\n"
        "<|im_start|>user\nAnd 1+1?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nadd\n</think>\n\nIt is 2.<|im_end|>\n"
    )
    assert _masked_runs(tok, ids, mask) == [
        "Paris.<|im_end|>",
        "<think>\nadd\n</think>\n\nIt is 2.<|im_end|>",
    ]
