"""`eagle3kit eval` (offline teacher-forced and online decoding) and `plan --from`."""

from __future__ import annotations

import json

import pytest
import torch
from decode_helpers import chat_jsonl, new_drafter, save_drafter_dir, self_text, train_drafter


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("eval")
    path = zoo.get("llama-v1", size="tiny", progress=False)
    tm = TargetModel.from_pretrained(path)
    d = train_drafter(tm, self_text(tm, n=16)[:6], steps=30)  # some acceptance, quickly
    return {"target": str(path), "drafter": save_drafter_dir(d, tmp / "drafter"),
            "jsonl": chat_jsonl(tmp / "conv.jsonl", n=3), "tmp": tmp, "tm": tm}  # fmt: skip


def test_offline_json_contract(cli, setup):
    r = cli("eval", "--target", setup["target"], "--drafter", setup["drafter"],
            "--data", setup["jsonl"], "--depth", "3", "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["mode"] == "offline" and doc["depth"] == 3
    acc, cond = doc["per_position_acceptance"], doc["conditional_acceptance"]
    assert len(acc) == len(cond) == 3
    assert all(0.0 <= x <= 1.0 for x in acc + cond)
    # tau = 1 + sum_i prod_{j<=i} cond_j, written out by hand
    want = 1 + cond[0] + cond[0] * cond[1] + cond[0] * cond[1] * cond[2]
    assert abs(doc["accept_len"] - want) < 1e-9
    assert doc["samples"] == 3 and min(doc["counted"]) > 0


def test_online_json_contract_and_plan_from(cli, setup):
    out = setup["tmp"] / "eval.json"
    r = cli("eval", "--target", setup["target"], "--drafter", setup["drafter"],
            "--data", setup["jsonl"], "--online", "--depth", "2", "--repeats", "2",
            "--max-new-tokens", "12", "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["mode"] == "online" and doc["depth"] == 2
    for key in ("tokens_per_s", "baseline_tokens_per_s", "decode_ms", "cycle_ms"):
        assert doc[key] > 0
    acc = doc["per_position_acceptance"]
    assert len(acc) == 2 and acc[0] >= acc[1]  # reaching position 2 needs position 1
    assert 1.0 <= doc["accept_len"] <= 3.0
    assert abs(doc["accept_len"] - (1 + sum(acc))) < 1e-9  # tau = 1 + sum of P(a >= i)
    assert doc["lossless"] is True
    s = doc["tokens_per_s_spread"]
    assert s["min"] <= s["median"] <= s["max"]
    assert "accept_len" in doc["offline"] and "offline_online_gap" in doc
    out.write_text(r.out)
    p = cli("plan", "--from", str(out), "--json")
    assert p.code in (0, 1), p.err
    plan = json.loads(p.out)
    assert abs(plan["accept_len"] - doc["accept_len"]) < 1e-6
    assert abs(plan["baseline_tps"] - 1000 / doc["decode_ms"]) < 1e-6 * plan["baseline_tps"]


def test_eval_on_a_data_dir(cli, setup):
    data = setup["tmp"] / "data"
    r = cli(
        "data", "prepare", setup["jsonl"], "--target", setup["target"], "-o", str(data), "--json"
    )
    assert r.code == 0, r.err
    r = cli("eval", "--target", setup["target"], "--drafter", setup["drafter"],
            "--data", str(data), "--depth", "2", "--json")  # fmt: skip
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["mode"] == "offline" and doc["samples"] == 1  # 5% held out of 3, at least 1


def test_eval_bad_input(cli, setup, tmp_path):
    base = ("eval", "--target", setup["target"], "--drafter", setup["drafter"])
    r = cli(*base, "--data", str(tmp_path / "missing.jsonl"))
    assert r.code == 2 and "missing.jsonl" in r.err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"nope": 1}\n')
    r = cli(*base, "--data", str(bad))
    assert r.code == 2 and "bad.jsonl" in r.err and "2 unusable" in r.err and "bad.jsonl:1" in r.err
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(open(setup["jsonl"]).readline() + '{"nope": 1}\n')
    r = cli(*base, "--data", str(mixed), "--depth", "1", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["skipped"] == 1 and json.loads(r.out)["samples"] == 1
    junk = tmp_path / "eval.json"
    junk.write_text('{"mode": "offline"}')
    r = cli("plan", "--from", str(junk))
    assert r.code == 2 and "accept_len" in r.err


def test_offline_random_drafter_accepts_less_than_trained(setup):
    """The offline metric separates a trained drafter from a random one (it can fail)."""
    from eagle3kit.decode.loading import load_pair
    from eagle3kit.evaluate import evaluate_offline, load_eval_data

    tm, trained = load_pair(setup["target"], setup["drafter"])
    data = load_eval_data(setup["jsonl"], tm.tokenizer)
    rand = new_drafter(tm, seed=5)
    a = evaluate_offline(tm, trained, data, 2)["accept_len"]
    b = evaluate_offline(tm, rand, data, 2)["accept_len"]
    assert b < a
