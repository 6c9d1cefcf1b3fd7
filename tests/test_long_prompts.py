"""Prompts of a given context length (data/long_prompts.py): exact lengths, the same request
after more or less context, disjoint sets, the refusals."""

from __future__ import annotations

import json

import pytest

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.data import long_prompts as LP


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    from eagle3kit import zoo

    return AutoTokenizer.from_pretrained(str(zoo.get("dsv3-v1", size="tiny")))


def test_parse_lengths():
    assert LP.parse_lengths("128,512,1K,2K") == (128, 512, 1024, 2048)
    assert LP.parse_lengths("2k, 64") == (64, 2048)
    assert LP.parse_lengths("default") == LP.DEFAULT_LENGTHS == (128, 512, 1024, 2048)
    assert LP.parse_lengths("0,64") == (0, 64)
    for text in ("abc", "128,128", ",", "-4", "1.5K"):
        with pytest.raises(Eagle3Error, match="--by-length"):
            LP.parse_lengths(text)


def test_every_prompt_is_exactly_its_length_and_ends_in_the_generation_prompt(tok):
    ps, source = LP.long_prompts(tok, (128, 256, 400), 3, which="A")
    assert "set A" in source
    assert [p.length for p in ps] == [128] * 3 + [256] * 3 + [400] * 3
    from eagle3kit.data.regenerate import chat_prompt_ids

    gen = chat_prompt_ids(tok, [{"role": "user", "content": "x"}])
    end = gen[gen.index(tok.convert_tokens_to_ids("</s>")) :]  # the turn's end, then the prompt
    for p in ps:
        assert len(p.ids) == p.length
        assert list(p.ids[-len(end) :]) == end
        assert p.ids[0] == tok.bos_token_id


def test_prompt_i_is_the_same_request_after_more_context(tok):
    ps, _ = LP.long_prompts(tok, (128, 512), 4, which="B")
    short = {p.index: p for p in ps if p.length == 128}
    long_ = {p.index: p for p in ps if p.length == 512}
    h = len(LP.frame(tok).head)  # the user turn's opening: <s><|user|>\n
    for i in range(4):
        s, g = short[i], long_[i]
        tail = len(s.ids) - s.document_tokens - h
        assert g.document_tokens - s.document_tokens == 512 - 128
        assert s.ids[-tail:] == g.ids[-tail:]  # the same request and frame
        assert s.ids[h : h + s.document_tokens] == g.ids[h + 384 : h + g.document_tokens]
    requests = {tok.decode(list(p.ids[-40:])) for p in short.values()}
    assert len(requests) == 4  # each prompt its own request


def test_sets_a_and_b_are_disjoint_halves(tok):
    a = LP.zoo_source(tok, "A", seed=0)
    b = LP.zoo_source(tok, "B", seed=0)
    everything = LP.zoo_source(tok, "all", seed=0)
    assert a.documents and b.documents
    assert not set(a.documents) & set(b.documents)
    assert not set(a.requests) & set(b.requests)
    assert len(everything.documents) > len(a.documents)
    other = LP.zoo_source(tok, "A", seed=1)
    assert set(other.documents) != set(a.documents)  # the seed draws the halves
    with pytest.raises(Eagle3Error, match="--prompt-set"):
        LP.zoo_source(tok, "C")


def test_a_length_past_the_positions_is_refused(tok):
    with pytest.raises(Eagle3Error, match=r"expected context lengths <= 1984 .*found 2048"):
        LP.long_prompts(tok, (128, 2048), 2, new_tokens=64, max_positions=2048)
    with pytest.raises(Eagle3Error, match="requests of at most"):
        LP.long_prompts(tok, (16, 128), 2)  # no request fits in 16 tokens


def test_a_users_documents(tok, tmp_path):
    rows = [{"text": f"document {i}: " + "word " * 300} for i in range(6)]
    rows.append({"messages": [{"role": "user", "content": "a conversation " * 100}]})
    f = tmp_path / "docs.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows))
    ps, source = LP.long_prompts(tok, (64, 200), 2, prompts_file=f, which="A")
    assert source.startswith("docs.jsonl")
    assert all(len(p.ids) == p.length for p in ps)
    with pytest.raises(Eagle3Error, match="document tokens"):
        LP.long_prompts(tok, (64, 20_000), 2, prompts_file=f)
    with pytest.raises(Eagle3Error, match="no such file"):
        LP.long_prompts(tok, (64,), 1, prompts_file=tmp_path / "missing.jsonl")


def test_optional_by_length_value():
    from eagle3kit.cli._options import optional_value

    args = ["--by-length", "--online", "--by-length"]
    assert optional_value(args, "--by-length", "default") == [
        "--by-length",
        "default",
        "--online",
        "--by-length",
        "default",
    ]
    assert optional_value(["--by-length", "64,128"], "--by-length", "d") == [
        "--by-length",
        "64,128",
    ]
