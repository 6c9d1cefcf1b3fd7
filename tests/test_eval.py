"""`eagle3kit eval` (offline teacher-forced and online decoding) and `plan --from`."""

from __future__ import annotations

import json

import pytest
import torch
from decode_helpers import (
    PROMPTS,
    chat_jsonl,
    new_drafter,
    save_drafter_dir,
    self_text,
    train_drafter,
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("eval")
    path = zoo.get("llama-v1", size="tiny")
    tm = TargetModel.from_pretrained(path)
    d = train_drafter(tm, self_text(tm, n=16)[:6], steps=30)  # some acceptance, quickly
    return {
        "target": str(path),
        "drafter": save_drafter_dir(d, tmp / "drafter"),
        "jsonl": chat_jsonl(tmp / "conv.jsonl", n=3),
        "tmp": tmp,
        "tm": tm,
    }


def test_offline_json_contract(cli, setup):
    r = cli(
        "eval",
        "--target",
        setup["target"],
        "--drafter",
        setup["drafter"],
        "--data",
        setup["jsonl"],
        "--depth",
        "3",
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["mode"] == "offline" and doc["depth"] == 3
    acc, cond = doc["per_position_acceptance"], doc["conditional_acceptance"]
    assert len(acc) == len(cond) == 3
    assert all(0.0 <= x <= 1.0 for x in acc + cond)
    assert acc[0] >= acc[1] >= acc[2]  # P(a >= i) over walked cycles
    assert abs(doc["tau_walk"] - (1 + sum(acc))) < 1e-9 and doc["cycles"] > 0
    u = doc["all_positions"]  # training's metric: tau = 1 + sum_i prod_{j<=i} cond_j
    c = u["conditional_acceptance"]
    assert abs(u["tau_every_position"] - (1 + c[0] + c[0] * c[1] + c[0] * c[1] * c[2])) < 1e-9
    assert doc["samples"] == 3 and min(u["counted"]) > 0


def test_walk_by_hand():
    """Cycles of greedy chain decoding replayed on the data, counted by hand."""
    from eagle3kit.train.ttt import walk

    k, T = 3, 16
    ok = torch.zeros(1, T, k, dtype=torch.bool)
    lm = torch.zeros(1, T, dtype=torch.bool)
    lm[0, 3:10] = True  # span 1: x[3..9]; the prompt's prefill emits x[3]
    lm[0, 12:16] = True  # span 2: x[12..15] (a second assistant turn)
    ok[0, 2, :2] = True  # t=2: drafts x[4], x[5] hit, x[6] misses -> a=2, next t=5
    ok[0, 3, :] = True  # t=3 is skipped over by the walk
    ok[0, 5, 1:] = True  # t=5: the first draft misses -> a=0 (later hits do not count)
    ok[0, 6, :] = True  # t=6: a=3, but only x[8], x[9] remain: a=1 (2 tokens), done
    ok[0, 11, :] = True  # t=11: x[13..15] remain; 3 hits but 2 drafts + bonus fill it
    assert walk(ok, lm) == [2, 0, 1, 2]


@pytest.mark.slow  # trains or decodes: a second or more (fast-subset budget)
def test_offline_walk_replays_online_chain(setup):
    """On answers the target wrote itself, offline eval walks the same cycles as decoding."""
    from eagle3kit.decode import greedy_generate, speculative_generate
    from eagle3kit.measure.evaluate import EvalData, evaluate_offline
    from eagle3kit.model.loading import load_pair

    tm, d = load_pair(setup["target"], setup["drafter"])
    eos = tm.tokenizer.eos_token_id
    prompts = [tm.tokenizer(p)["input_ids"] for p in PROMPTS[:4]]
    samples, online = [], []
    for ids in prompts:
        g = greedy_generate(tm, ids, max_new_tokens=40, eos_token_id=eos)
        ans = g.tokens + ([eos] if len(g.tokens) < 40 else [])
        mask = torch.tensor([False] * len(ids) + [True] * len(ans))
        samples.append((torch.tensor(ids + ans), mask))
        s = speculative_generate(tm, d, ids, max_new_tokens=40, depth=3, eos_token_id=eos)
        assert s.tokens == g.tokens
        online += [c.accepted for c in s.stats.cycles]
    off = evaluate_offline(tm, d, EvalData("self", samples, prompts), 3)
    assert off["cycles"] == len(online)
    assert abs(off["tau_walk"] - (1 + sum(online) / len(online))) < 1e-9
    assert sum(online) > 0  # the drafter accepted something: the walk was exercised


def test_online_json_contract_and_plan_from(cli, setup):
    out = setup["tmp"] / "eval.json"
    r = cli(
        "eval",
        "--target",
        setup["target"],
        "--drafter",
        setup["drafter"],
        "--data",
        setup["jsonl"],
        "--online",
        "--depth",
        "2",
        "--repeats",
        "2",
        "--max-new-tokens",
        "12",
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["mode"] == "online" and doc["depth"] == 2
    for key in ("tokens_per_s", "baseline_tokens_per_s", "decode_ms", "cycle_ms"):
        assert doc[key] > 0
    acc = doc["per_position_acceptance"]
    assert len(acc) == 2 and acc[0] >= acc[1]  # reaching position 2 needs position 1
    assert 1.0 <= doc["tau_online"] <= 3.0
    assert abs(doc["tau_online"] - (1 + sum(acc))) < 1e-9  # tau = 1 + sum of P(a >= i)
    assert doc["lossless"] is True
    s = doc["tokens_per_s_spread"]
    assert s["min"] <= s["median"] <= s["max"]
    assert "tau_walk" in doc["offline"] and "offline_online_gap" in doc
    out.write_text(r.out)
    p = cli("plan", "--from", str(out), "--json")
    assert p.code in (0, 1), p.err
    plan = json.loads(p.out)
    assert abs(plan["tau"] - doc["tau_online"]) < 1e-6
    assert abs(plan["baseline_tps"] - 1000 / doc["decode_ms"]) < 1e-6 * plan["baseline_tps"]
    # the request end to end: the prefill emits one token, (N-1)/tau cycles the rest
    n, pre = doc["new_tokens"], doc["prefill_ms"]
    want = 1000 * n / (pre + (n - 1) / doc["tau_online"] * doc["cycle_ms"])
    assert n > 1 and pre > 0 and abs(plan["request"]["tps"] - want) < 1e-3 * want


def test_eval_on_a_data_dir(cli, setup):
    data = setup["tmp"] / "data"
    r = cli(
        "data", "prepare", setup["jsonl"], "--target", setup["target"], "-o", str(data), "--json"
    )
    assert r.code == 0, r.err
    r = cli(
        "eval",
        "--target",
        setup["target"],
        "--drafter",
        setup["drafter"],
        "--data",
        str(data),
        "--depth",
        "2",
        "--json",
    )
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
    junk.write_text('{"mode": "offline"}')  # no kind: not read as an eval by its keys
    r = cli("plan", "--from", str(junk))
    assert r.code == 2 and "kind: expected 'eagle3kit.eval'" in r.err
    junk.write_text('{"kind": "eagle3kit.eval", "schema": 1, "mode": "offline"}')
    r = cli("plan", "--from", str(junk))
    assert r.code == 2 and "tau_walk" in r.err


def test_offline_random_drafter_accepts_less_than_trained(setup):
    """The offline metric separates a trained drafter from a random one (it can fail)."""
    from eagle3kit.measure.evaluate import evaluate_offline, load_eval_data
    from eagle3kit.model.loading import load_pair

    tm, trained = load_pair(setup["target"], setup["drafter"])
    data = load_eval_data(setup["jsonl"], tm.tokenizer)
    rand = new_drafter(tm, seed=5)
    a = evaluate_offline(tm, trained, data, 2)["tau_walk"]
    b = evaluate_offline(tm, rand, data, 2)["tau_walk"]
    assert b < a
