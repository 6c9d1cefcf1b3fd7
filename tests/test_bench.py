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
    path = zoo.get("dsv3-v1", size="tiny", progress=False)
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
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert {"python", "torch", "transformers", "cpu"} <= set(doc["environment"])
    names = [m["name"] for m in doc["methods"]]
    assert names == ["greedy", "lookup", "lookup-hf", "chain", "tree"]
    for m in doc["methods"]:
        t = m["tokens_per_s"]
        assert 0 < t["min"] <= t["median"] <= t["max"]
        assert m["accept_len"] >= 1.0
        assert m["same_tokens_as_greedy"] is True  # every method is lossless
    greedy = doc["methods"][0]
    assert greedy["speedup"] == 1.0 and greedy["accept_len"] == 1.0
    greedy_ms = doc["decode_ms"]
    for m in doc["methods"]:
        if m["name"] not in ("lookup", "chain", "tree"):
            assert "upper_bound" not in m and "bound_with_draft_cost" not in m
            continue
        # the two bounds from their definitions, with the row's own measured times
        upper = m["tau"] * greedy_ms / m["verify_ms"]
        with_draft = m["tau"] * greedy_ms / (m["draft_ms"] + m["verify_ms"])
        assert m["upper_bound"] == pytest.approx(upper, rel=1e-9)
        assert m["bound_with_draft_cost"] == pytest.approx(with_draft, rel=1e-9)
        assert m["bound_with_draft_cost"] < m["upper_bound"]
        assert m["fraction_of_bound"] == pytest.approx(m["speedup"] / with_draft, rel=1e-9)
        assert "ideal_speedup" not in m and "fraction_of_ideal" not in m
    assert 0 < doc["target_distinct4"] <= 1


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
