"""`plan --live`: costs and candidates from a `bench --url` run against the fake vLLM engines
(plain, and prompt lookup served as vLLM's `ngram`); the expected acceptance comes from the
fake's own decoder log, never from the code under test."""

from __future__ import annotations

import json

import pytest
from fake_engine import FakeEngine

from eagle3kit.live.bench import LiveConfig, run_live_bench
from eagle3kit.live.suites import Prompt
from eagle3kit.plan.method_inputs import read_live
from eagle3kit.plan.methods import plan_methods

CODE = ["def ", "import os\nimport "]


@pytest.mark.slow  # two fake servers, two levels, two suites (seconds on an idle machine)
def test_live_ngram_server_priced_per_level(tmp_path):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    tm = TargetModel.from_pretrained(zoo.get("llama-v1", size="tiny"))
    ps = [Prompt(s, str(i), (CODE[i],)) for s in ("A", "B") for i in range(len(CODE))]
    cfg = LiveConfig(
        prompts=ps,
        max_tokens=16,
        repeats=1,
        endpoint="completions",
        timeout=600,
        concurrency=(1, 2),
    )
    kw = {"engine": "vllm", "lifetime": 300, "dev_mode": True}
    with FakeEngine(tm, None, **kw) as base, FakeEngine(tm, "ngram", depth=3, **kw) as ng:
        doc = run_live_bench([ng.url], base.url, cfg)
        plain_log, look_log = list(base.log), list(ng.log)
    assert doc["errors"] == []
    # prompt lookup is lossless: every answer is one the plain server gave
    assert len(look_log) == 2 * len(ps)  # every prompt at both levels
    assert {tuple(e["tokens_ids"]) for e in look_log} <= {tuple(e["tokens_ids"]) for e in plain_log}
    f = tmp_path / "live.json"
    f.write_text(json.dumps(doc))
    levels, cands = read_live(f)
    assert [lv.concurrency for lv in levels] == [1, 2]
    (c,) = cands
    assert c.method == "ngram" and c.label == "ngram"
    # P(a >= i) over level 1's cycles (its blocks run first: suites A and B), from the log
    acc = [a for e in look_log[: 2 * len(CODE)] for a in e["accepted"]]
    want = [sum(a >= i for a in acc) / len(acc) for i in range(1, 4)]
    assert list(c.per_position) == pytest.approx(want)
    mp = plan_methods(cands, levels)
    got = next(p for p in mp.best[1] if p.label == "ngram")
    spec = next(d for d in doc["deployments"] if d["role"] == "speculative")
    tps = spec["levels"][0]["decode_tokens_per_s_pooled"]
    tau = spec["levels"][0]["acceptance"]["tau_online"]
    # a server's cycle is measured whole: 1000 * tau / its decode rate, priced at its depth
    assert got.depth == 3 and got.cycle_ms == pytest.approx(1000 * tau / tps)
    a_only, _ = read_live(f, suite="A")
    assert [lv.concurrency for lv in a_only] == [1, 2]
