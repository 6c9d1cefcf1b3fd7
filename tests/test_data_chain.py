"""The whole data chain through the CLI on a zoo tiny target:
JSONL -> prepare -> regenerate (local) -> prepare -> vocab -> capture -> FeatureStore."""

from __future__ import annotations

import json

import pytest
import torch


@pytest.fixture(scope="module")
def model_dir():
    from eagle3kit import zoo

    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model on a shared 2-core box
    yield str(zoo.get("dsv3-v1", size="tiny"))
    torch.set_num_threads(n)


RECORDS = [
    {
        "id": "a",
        "conversations": [
            {"from": "human", "value": "Write `parse`."},
            {"from": "gpt", "value": "def parse(s):\n    return s"},
        ],
    },
    {
        "id": "b",
        "messages": [
            {"role": "system", "content": "You write Python."},
            {"role": "user", "content": "Write `main`."},
            {"role": "assistant", "content": "def main():\n    pass"},
            {"role": "user", "content": "Shorter?"},
            {"role": "assistant", "content": "main = print"},
        ],
    },
    {
        "id": "c",
        "messages": [
            {"role": "user", "content": "import what?"},
            {"role": "assistant", "content": "import os"},
        ],
    },
]


@pytest.mark.slow
def test_chain(tmp_path, model_dir, cli):
    from eagle3kit.data.prepared import load_prepared
    from eagle3kit.data.store import FeatureStore

    src = tmp_path / "chat.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in RECORDS) + "{not json\n")
    r = cli("data", "prepare", src, "--target", model_dir, "-o", tmp_path / "D0", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["samples"] == 3 and json.loads(r.out)["skipped"][0]["line"] == 4

    regen = tmp_path / "regen.jsonl"
    # sampled: a greedy tiny target may answer some requests with EOS at once (blank turns)
    sampled = ("--temperature", "0.8", "--top-p", "0.95", "--seed", "1")
    args = ("-o", regen, "--target", model_dir, "--max-tokens", "16", *sampled, "--json")
    r = cli("data", "regenerate", src, *args)
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert (doc["done"], doc["failed"], doc["already_done"]) == (3, [], 0)
    out = {x["id"]: x for x in map(json.loads, regen.read_text().splitlines())}
    assert set(out) == {"a", "b", "c"}
    answers = [m["content"] for m in out["b"]["messages"] if m["role"] == "assistant"]
    assert answers != ["def main():\n    pass", "main = print"]  # the target's own, not the input's

    r = cli("data", "prepare", regen, "--target", model_dir, "-o", tmp_path / "D", "--json")
    assert r.code == 0, r.err
    n_ok = sum(
        all(t.strip() for t in _answers(x)) for x in out.values()
    )  # blank answers are skipped
    assert n_ok > 0, out  # something to train on
    assert json.loads(r.out)["samples"] == n_ok
    data = load_prepared(tmp_path / "D")
    tok = _tokenizer(model_dir)
    s = data[data.ids.index("b")] if "b" in data.ids else data[0]
    masked = tok.decode(s.input_ids[s.loss_mask].tolist())
    rec = out[s.id]
    want = "".join(a + tok.eos_token for a in _answers(rec))  # loss on regenerated turns
    # an answer that opens with a newline merges with the template's "\n" into one token,
    # which the mask then covers: compare without whitespace
    assert "".join(masked.split()) == "".join(want.split())

    r = cli(
        "data",
        "vocab",
        tmp_path / "D",
        "--draft-vocab-size",
        "64",
        "-o",
        tmp_path / "v.safetensors",
        "--json",
    )
    assert r.code == 0, r.err
    r = cli(
        "data",
        "capture",
        tmp_path / "D",
        "--target",
        model_dir,
        "-o",
        tmp_path / "S",
        "--vocab",
        tmp_path / "v.safetensors",
        "--topk",
        "8",
        "--json",
    )
    assert r.code == 0, r.err
    man = json.loads(r.out)
    assert man["tokens"] == data.meta["tokens"] and man["bytes_per_token"] > 0
    assert man["vocab"]["draft_vocab_size"] == 64 and man["quantisation"]["topk"] == 8
    fs = FeatureStore(tmp_path / "S", verify=True)
    assert fs.ids == data.ids
    f = fs.get([0])
    assert torch.equal(f.input_ids[0], data[0].input_ids) and f.teacher_ids.shape[-1] == 8


def _answers(rec: dict) -> list[str]:
    if "messages" in rec:
        return [m["content"] for m in rec["messages"] if m["role"] == "assistant"]
    return [t["value"] for t in rec["conversations"] if t["from"] == "gpt"]


def _tokenizer(model_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)
