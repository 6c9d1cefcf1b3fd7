"""`eagle3kit bench` end to end on a tiny zoo target: the JSON contract and losslessness."""

from __future__ import annotations

import json

import pytest
import torch
from decode_helpers import new_drafter, save_drafter_dir


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    path = zoo.get("dsv3-v1", size="tiny")
    tm = TargetModel.from_pretrained(path)
    return str(path), save_drafter_dir(new_drafter(tm), tmp_path_factory.mktemp("b") / "d")


def test_bench_json_contract(cli, pair):
    path, d = pair
    r = cli(
        "bench",
        "--target",
        path,
        "--drafter",
        d,
        "--prompts",
        "1",
        "--repeats",
        "2",
        "--max-new-tokens",
        "10",
        "--depth",
        "2",
        "--tree-depth",
        "2",
        "--topk",
        "2",
        "--budget",
        "4",
        "--concurrency",
        "1,2",
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    _check_costs(doc)
    assert {"python", "torch", "transformers", "cpu"} <= set(doc["environment"])
    names = [m["name"] for m in doc["methods"]]
    assert names == ["greedy", "lookup", "lookup-hf", "chain", "tree"]
    for m in doc["methods"]:
        t = m["tokens_per_s"]
        assert 0 < t["min"] <= t["median"] <= t["max"]
        assert m["tokens_per_forward"] >= 1.0
        assert m["same_tokens_as_greedy"] is True  # every method is lossless
    greedy = doc["methods"][0]
    assert greedy["speedup"] == 1.0 and greedy["tokens_per_forward"] == 1.0
    greedy_ms = doc["decode_ms"]
    for m in doc["methods"]:
        if m["name"] not in ("lookup", "chain", "tree"):
            assert "upper_bound" not in m and "bound_with_draft_cost" not in m
            continue
        # the two bounds from their definitions, with the row's own measured times
        upper = m["tau_online"] * greedy_ms / m["verify_ms"]
        with_draft = m["tau_online"] * greedy_ms / (m["draft_ms"] + m["verify_ms"])
        assert m["upper_bound"] == pytest.approx(upper, rel=1e-9)
        assert m["bound_with_draft_cost"] == pytest.approx(with_draft, rel=1e-9)
        assert m["bound_with_draft_cost"] < m["upper_bound"]
        assert m["fraction_of_bound"] == pytest.approx(m["speedup"] / with_draft, rel=1e-9)
        assert "ideal_speedup" not in m and "fraction_of_ideal" not in m
    assert 0 < doc["target_distinct4"] <= 1


def _check_costs(doc):
    """The costs `plan --methods` reads (docs/methods.md): level 1 from the loops, level 2
    scaled by batched forwards; each loop's overhead is its cycle minus the composed parts."""
    levels = doc["costs"]["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 2]
    lv1 = levels[0]
    assert lv1["plain_ms"] > 0 and lv1["pass_ms"]["eagle3"] > 0
    chain = next(m for m in doc["methods"] if m["name"] == "chain")
    assert (chain["method"], chain["label"], chain["drafted_per_cycle"]) == ("eagle3", "eagle3", 2)
    # depth 2: two drafter passes and a verify of 3 tokens (a measured point)
    parts = 2 * lv1["pass_ms"]["eagle3"] + lv1["verify_ms"]["3"]
    assert lv1["overhead_ms"]["eagle3"] == pytest.approx(chain["cycle_ms"] - parts, rel=1e-9)
    assert set(lv1["overhead_ms"]) >= {"ngram", "eagle3", "eagle3 (tree)"}
    assert levels[1]["isolated"]["concurrency"] == 2
    assert doc["costs"]["new_tokens"] > 0


@pytest.mark.slow  # a second bench run (seconds); the fast subset keeps the contract test
def test_plan_methods_reads_bench(cli, pair, tmp_path):
    path, d = pair
    out = tmp_path / "bench.json"
    args = ["--prompts", "1", "--repeats", "1", "--max-new-tokens", "8", "--depth", "2"]
    r = cli("bench", "--target", path, "--drafter", d, *args, "--concurrency", "1,2", "--json")
    assert r.code == 0, r.err
    out.write_text(r.out)
    r = cli("plan", "--methods", "eagle3,ngram,dflash", "--costs", out, "--accept", out, "--json")
    assert r.code in (0, 1), r.err
    doc = json.loads(r.out)
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 2]
    labels = {m["label"] for m in doc["levels"][0]["methods"]}
    assert labels == {"plain", "eagle3", "eagle3 (tree)", "ngram"}
    assert any(n.startswith("dflash:") for n in doc["notes"])  # asked for, not measured


def test_bench_without_drafter_and_table(cli, pair):
    path, _ = pair
    r = cli("bench", "--target", path, "--prompts", "1", "--repeats", "1", "--max-new-tokens", "6")
    assert r.code == 0, r.err
    assert "greedy" in r.out and "lookup-hf" in r.out and "chain" not in r.out
    assert "distinct-4" in r.out


def test_bench_bad_input(cli, pair):
    path, _ = pair
    r = cli("bench", "--target", path, "--repeats", "0")
    assert r.code == 2 and "repeats" in r.err


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


PROMPT_ROWS = [
    {"prompt": "Write the Python function add(a, b)."},
    {"messages": [{"role": "user", "content": "Write the Python function mul(a, b)."}]},
    {"conversations": [{"from": "human", "value": "Write the Python function neg(a)."}]},
    {"conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": ""}]},
    {"neither": "a row with no prompt"},
]


def test_bench_data_of_prompts_only(cli, pair, tmp_path):
    """A benchmark needs prompts only: prompt rows, conversations without answers (both
    forms) are measured; an unusable row is skipped with one warning line, as prepare does."""
    path, _ = pair
    f = _write_jsonl(tmp_path / "prompts.jsonl", PROMPT_ROWS)
    r = cli(
        "bench", "--target", path, "--data", f, "--repeats", "1", "--max-new-tokens", "4", "--json"
    )
    assert r.code == 0, r.err
    assert json.loads(r.out)["prompts"] == 4
    assert f"warning: {f}: skipped 1 unusable records" in r.err and f"{f}:5:" in r.err


def test_bench_prompts_are_the_chat_template_up_to_the_first_answer(pair, tmp_path):
    from transformers import AutoTokenizer

    from eagle3kit.measure.bench import data_prompts
    from eagle3kit.measure.evaluate import load_eval_data

    tok = AutoTokenizer.from_pretrained(pair[0])
    conv = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Write the Python function add(a, b)."},
        {"role": "assistant", "content": "def add(a, b):\n    return a + b"},
        {"role": "user", "content": "And mul?"},
        {"role": "assistant", "content": "def mul(a, b):\n    return a * b"},
    ]
    full = _write_jsonl(tmp_path / "full.jsonl", [{"messages": conv}])
    got, skipped = data_prompts(full, tok, 8)
    # the same prompt eval takes from a conversation with answers (its first assistant token)
    assert got == load_eval_data(full, tok).prompts and skipped == []
    only = _write_jsonl(tmp_path / "only.jsonl", [{"prompt": "Hi."}])
    want = tok.apply_chat_template(
        [{"role": "user", "content": "Hi."}], add_generation_prompt=True, return_dict=True
    )["input_ids"]
    assert data_prompts(only, tok, 8)[0] == [list(want)]


def test_training_data_still_needs_an_answer(pair, tmp_path):
    from transformers import AutoTokenizer

    from eagle3kit.core.errors import Eagle3Error
    from eagle3kit.measure.evaluate import load_eval_data

    tok = AutoTokenizer.from_pretrained(pair[0])
    f = _write_jsonl(tmp_path / "prompts.jsonl", PROMPT_ROWS[:3])
    with pytest.raises(Eagle3Error, match="at least one sample with an assistant turn"):
        load_eval_data(f, tok)


def _bench_costs(cli, path, *extra):
    args = ["--prompts", "1", "--repeats", "1", "--max-new-tokens", "8", "--depth", "2"]
    r = cli("bench", "--target", path, *extra, *args, "--concurrency", "1,2", "--json")
    assert r.code == 0, r.err
    return json.loads(r.out)


@pytest.mark.parametrize(
    "method, passes",
    [("mtp", 2), pytest.param("dflash", 1, marks=pytest.mark.slow)],
)
def test_costs_of_other_drafters(cli, pair, tmp_path, method, passes):
    """An MTP head (the tiny member's own) or a DFlash drafter (the shipped tiny K2 one) under
    `bench --concurrency`: its pass is keyed by its method at every level (plan --methods
    prices it: a crash, then a key `eagle3` no MTP or DFlash candidate reads, before), and a
    cycle is that many passes (MTP: one per draft; DFlash: one block) plus the verify."""
    from eagle3kit.zoo.shipping import shipped

    path, _ = pair
    dflash = ("--drafter", str(shipped("k2-dflash-tiny")))
    extra = ("--method", "mtp") if method == "mtp" else dflash
    doc = _bench_costs(cli, path, *extra)
    levels = doc["costs"]["levels"]
    assert [set(lv["pass_ms"]) for lv in levels] == [{method}, {method}]
    assert all(lv["pass_ms"][method] > 0 for lv in levels)
    chain = next(m for m in doc["methods"] if m["name"] == "chain")
    assert (chain["method"], chain["label"]) == (method, method)
    lv1 = levels[0]
    # a cycle's drafting time is `passes` passes (the row's draft_ms: its own mean per cycle)
    assert passes * lv1["pass_ms"][method] == pytest.approx(chain["draft_ms"], rel=1e-6)
    out = tmp_path / "bench.json"
    out.write_text(json.dumps(doc))
    r = cli("plan", "--methods", f"{method},ngram", "--costs", out, "--accept", out, "--json")
    assert r.code in (0, 1), r.err
    plan = json.loads(r.out)
    for lv in plan["levels"]:
        assert method in {m["label"] for m in lv["methods"]}
