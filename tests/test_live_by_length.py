"""`bench --url --context-lengths` against the fake vLLM engine: prompts of exactly each length
sent as token ids, tau per length from the counters of that length's blocks alone (checked
against the fake's own decoder), and `plan --from` on the file."""

from __future__ import annotations

import json

import pytest
from fake_engine import FakeEngine


@pytest.fixture(scope="module")
def pair():
    from decode_helpers import accepting_drafter_dir

    from eagle3kit import zoo
    from eagle3kit.model.loading import load_pair

    path = str(zoo.get("llama-v1", size="tiny"))
    return path, *load_pair(path, accepting_drafter_dir())


@pytest.mark.slow
def test_bench_url_context_lengths(cli, pair, tmp_path):
    path, tm, d = pair
    with FakeEngine(tm, d, lifetime=600) as spec, FakeEngine(tm, None, lifetime=600) as base:
        r = cli(
            "bench",
            "--url",
            spec.url,
            "--baseline-url",
            base.url,
            "--target",
            path,
            "--context-lengths",
            "96,200",
            "--prompts",
            "2",
            "--max-new-tokens",
            "12",
            "--repeats",
            "2",
            "--json",
        )
        bodies, log = list(spec.bodies), list(spec.log)
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["kind"] == "eagle3kit.bench-live" and doc["lengths"] == [96, 200]
    assert not doc["errors"], doc["errors"]
    sent = [len(b["prompt"]) for b in bodies]  # one at a time: the log follows the bodies
    assert sorted(set(sent)) == [96, 200] and len(sent) == len(log) == 2 * 2 * 2
    for e in doc["by_length"]:
        mine = [g for n, g in zip(sent, log, strict=True) if n == e["context_length"]]
        assert e["suite"] == f"ctx-{e['context_length']}" and e["requests"] == 4
        assert e["prompt_tokens"] == e["context_length"]  # the server's own usage count
        assert e["cycles"] == sum(len(g["accepted"]) for g in mine)
        assert e["tau_online"] == pytest.approx(spec.tau(mine), abs=1e-12)
        assert e["per_position_acceptance"] == pytest.approx(spec.per_position(mine), abs=1e-12)
        assert e["decode_ms"] > 0 and e["cycle_ms"] > 0 and e["new_tokens"] > 0
    out = tmp_path / "live.json"
    out.write_text(r.out)
    p = cli("plan", "--from", str(out), "--json")
    assert p.code in (0, 1), p.err
    plan = json.loads(p.out)
    taus = [e["tau_online"] for e in doc["by_length"]]
    assert [x["tau"] for x in plan["by_length"]] == pytest.approx(taus, abs=1e-6)


def test_context_lengths_need_token_ids_and_a_tokenizer(cli, pair):
    path, *_ = pair
    base = ("bench", "--url", "http://127.0.0.1:9", "--context-lengths", "96")
    r = cli(*base, "--endpoint", "chat", "--target", path)
    assert r.code == 2 and "expected completions or generate" in r.err
    r = cli(*base)
    assert r.code == 2 and "--target: expected the served target" in r.err
