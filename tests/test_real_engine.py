"""The live verbs against the real vLLM engine (CPU build), the twins of tests/test_live.py's
fake-engine tests (issue 46). Skipped, with the reason, where the engine's venv is missing
(`python benchmarks/real_engine.py --setup`).

The expected figures come from the engine itself, never from the client under test: its
`/metrics` counters read here with a regex of our own, its per-request
`metrics.speculative_decoding` block (`--per-request-spec-decode-metrics summary`), and its
plain server's greedy answers.
"""

from __future__ import annotations

import json
import re
import shutil
import urllib.request

import pytest
from real_engine import real_engine

from eagle3kit.live.bench import LiveConfig, run_live_bench
from eagle3kit.live.client import Deadline, stream
from eagle3kit.live.suites import Prompt

pytestmark = [pytest.mark.real_engine, pytest.mark.slow, real_engine]

CODE = ["def ", "import ", "class ", "for i in ", "    return ", "x = ["]
COUNTER = re.compile(r"^vllm:spec_decode_num_(drafts|accepted_tokens)_total\{[^}]*\} (\S+)$", re.M)


def prompts(n: int = 4) -> list[Prompt]:
    return [Prompt("s", str(i), (CODE[i % len(CODE)],)) for i in range(n)]


def counters(url: str) -> dict[str, float]:
    """The engine's own spec-decode counters, summed over their labels."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out = {"drafts": 0.0, "accepted_tokens": 0.0}
    for name, value in COUNTER.findall(text):
        out[name] += float(value)
    return out


def complete(url: str, model: str, prompt: str, max_tokens: int = 48) -> dict:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    body |= {"stream": True, "stream_options": {"include_usage": True}}
    s = stream(url, "/v1/completions", body, Deadline(120))
    return {"text": s.text, "tokens": s.completion_tokens, "spec": s.spec}


def test_bench_tau_is_the_engines_own_and_excludes_earlier_traffic(real_servers):
    spec, base = real_servers.url("eagle3-v1"), real_servers.url("plain-v1")
    complete(spec, "llama-v1", "while ")  # traffic before the run: must not count
    c0 = counters(spec)
    cfg = LiveConfig(prompts=prompts(4), max_tokens=48, repeats=1, endpoint="completions")
    doc = run_live_bench([spec], base, cfg)
    c1 = counters(spec)
    assert doc["errors"] == []
    dep = next(d for d in doc["deployments"] if d["role"] == "speculative")
    acc = dep["levels"][0]["acceptance"]
    assert acc["source"] == "counters"
    # the engine's counters, read by us around the run: nothing else ran on this server
    drafts, accepted = c1["drafts"] - c0["drafts"], c1["accepted_tokens"] - c0["accepted_tokens"]
    assert (acc["counters"]["drafts"], acc["counters"]["accepted"]) == (drafts, accepted)
    assert acc["tau_online"] == pytest.approx(1 + accepted / drafts, abs=1e-12)
    # and the engine's per-request accounting of the same requests agrees with its counters
    req = acc["per_request"]
    assert (req["steps"], req["accepted"]) == (drafts, accepted)
    assert 1.0 < acc["tau_online"] <= 4.0  # a trained drafter gets accepted; depth 3 caps it
    # both speedups, each from its own rates, and the one plan --from prices named
    base_dep = next(d for d in doc["deployments"] if d["role"] == "baseline")
    lv, bl = dep["levels"][0], base_dep["levels"][0]
    cmp = doc["comparison"][0]
    pooled = lv["decode_tokens_per_s_pooled"] / bl["decode_tokens_per_s_pooled"]
    median = lv["decode_tokens_per_s"]["median"] / bl["decode_tokens_per_s"]["median"]
    assert cmp["decode_speedup_pooled"] == pytest.approx(pooled, rel=1e-12)
    assert cmp["decode_speedup"] == pytest.approx(median, rel=1e-12)
    assert doc["speedups"]["plan_prices"] == "decode_speedup_pooled"


def test_speculative_answers_equal_the_plain_servers(real_servers):
    """vLLM's speculative decoding is lossless at temperature 0: token for token the plain
    server's greedy answer (the rejection sampler keeps the target's argmax)."""
    spec, base = real_servers.url("eagle3-v1"), real_servers.url("plain-v1")
    for p in CODE:
        a, b = complete(spec, "llama-v1", p), complete(base, "llama-v1", p)
        assert a["text"] == b["text"], p
        assert a["spec"] is not None and b["spec"] is None


def test_concurrency_levels_batch_on_the_real_engine(real_servers):
    """Real batching: at concurrency 4 the requests share engine steps, so each request's rate
    falls below batch 1's while the counters still account every decoded token."""
    spec = real_servers.url("eagle3-v1")
    cfg = LiveConfig(
        prompts=prompts(4), max_tokens=48, repeats=1, endpoint="completions", concurrency=(1, 4)
    )
    doc = run_live_bench([spec], None, cfg)
    assert doc["errors"] == []
    levels = {lv["concurrency"]: lv for lv in doc["deployments"][0]["levels"]}
    assert set(levels) == {1, 4}
    for lv in levels.values():
        c = lv["acceptance"]["counters"]
        assert lv["acceptance"]["per_request"]["steps"] == c["drafts"]


def test_an_http_error_is_one_line_and_the_rest_is_measured(real_servers):
    """The real server refuses a request longer than --max-model-len (HTTP 400): one line."""
    spec = real_servers.url("eagle3-v1")
    long = Prompt("s", "long", ("x " * 1500,))
    cfg = LiveConfig(prompts=[*prompts(2), long], max_tokens=16, repeats=1, endpoint="completions")
    doc = run_live_bench([spec], None, cfg)
    lines = [e for e in doc["errors"] if spec in e]
    assert len(lines) == 1 and lines[0].startswith("1 of 3 requests failed"), lines
    assert "HTTP 400" in lines[0]
    lv = doc["deployments"][0]["levels"][0]
    assert lv["requests"] == 2 and lv["acceptance"]["tau_online"] is not None


def test_eval_online_url(real_servers, cli, tmp_path):
    spec = real_servers.url("eagle3-v1")
    g = tmp_path / "g.jsonl"
    g.write_text("".join(json.dumps({"question": q}) + "\n" for q in CODE[:3]))
    c0 = counters(spec)
    r = cli(
        "eval",
        "--online",
        "--url",
        spec,
        "--suite",
        f"gsm8k={g}",
        "--limit",
        "3",
        "--repeats",
        "1",
        "--max-new-tokens",
        "32",
        "--endpoint",
        "completions",
        "--json",
    )
    c1 = counters(spec)
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    acc = doc["deployments"][0]["levels"][0]["acceptance"]
    d = c1["drafts"] - c0["drafts"]
    assert acc["tau_online"] == pytest.approx(
        1 + (c1["accepted_tokens"] - c0["accepted_tokens"]) / d
    )


def test_probe_url_new_target_against_the_old(real_servers, cli, tmp_path):
    """NEW: llama-v2 with llama-v1's drafter; OLD: llama-v1 with it. The retention is the
    engines' own (tau_NEW - 1) / (tau_OLD - 1), each tau from that engine's counters."""
    from eagle3kit.measure.verdict import PLUG_IN_RETENTION, WARM_START_RETENTION

    new, old = real_servers.url("eagle3-v2"), real_servers.url("eagle3-v1")
    g = tmp_path / "g.jsonl"
    g.write_text("".join(json.dumps({"question": q}) + "\n" for q in CODE[:4]))
    n0, o0 = counters(new), counters(old)
    r = cli(
        "probe",
        "--url",
        new,
        "--reference-url",
        old,
        "--suite",
        f"gsm8k={g}",
        "--samples",
        "4",
        "--repeats",
        "1",
        "--max-new-tokens",
        "32",
        "--endpoint",
        "completions",
        "--json",
    )
    n1, o1 = counters(new), counters(old)
    assert r.code == 0, r.err
    doc = json.loads(r.out)

    def tau(a, b):
        return 1 + (b["accepted_tokens"] - a["accepted_tokens"]) / (b["drafts"] - a["drafts"])

    t_new, t_old = tau(n0, n1), tau(o0, o1)
    assert doc["tau_online"]["new"] == pytest.approx(t_new)
    assert doc["tau_online"]["reference"] == pytest.approx(t_old)
    ret = (t_new - 1) / (t_old - 1)
    assert doc["retention"] == pytest.approx(ret)
    want = (
        "from-scratch"
        if ret < WARM_START_RETENTION
        else "plug-in"
        if ret >= PLUG_IN_RETENTION
        else "fine-tune"
    )
    assert doc["verdict"] == want


def test_regenerate_with_a_fleet_of_two_real_servers(real_servers, cli, tmp_path):
    """Both servers serve llama-v1 greedily (one plainly, one speculatively): every answer is
    the plain server's own, whichever server the fleet sent it to."""
    plain, spec = real_servers.url("plain-v1"), real_servers.url("eagle3-v1")
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [
        {
            "id": str(i),
            "conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": "?"}],
        }
        for i, q in enumerate(CODE)
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = cli(
        "data",
        "regenerate",
        str(src),
        "-o",
        str(out),
        "--server",
        plain,
        "--server",
        spec,
        "--max-tokens",
        "32",
        "--concurrency",
        "4",
        "--json",
    )
    assert r.code == 0, r.err
    got = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert sorted(g["id"] for g in got) == [str(i) for i in range(len(CODE))]
    for g in got:
        msgs = g.get("conversations") or g.get("messages")
        answer = msgs[-1].get("value", msgs[-1].get("content"))
        q = CODE[int(g["id"])]
        want = chat(plain, q)
        assert answer == want, q


def chat(url: str, q: str) -> str:
    body = {
        "model": "llama-v1",
        "messages": [{"role": "user", "content": q}],
        "max_tokens": 32,
        "temperature": 0,
    }
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    doc = json.loads(urllib.request.urlopen(req, timeout=120).read())
    return doc["choices"][0]["message"]["content"]


def test_zoo_verify_builds_each_members_config_with_vllms_code(tmp_path):
    """vLLM's own config code on the shipped members, and on a DeepSeek member whose config
    lacks the router keys (as shipped before issue 46): that one is refused, naming the key."""
    from eagle3kit.zoo import shipping
    from eagle3kit.zoo.verify import engine_configs

    for name in ("llama-v1", "dsv3-v1"):
        shutil.copytree(shipping.ROOT / name, tmp_path / name)
    old = tmp_path / "dsv3-v1-old"
    shutil.copytree(shipping.ROOT / "dsv3-v1", old)
    cfg = json.loads((old / "config.json").read_text())
    for k in ("topk_method", "scoring_func"):
        cfg.pop(k)
    (old / "config.json").write_text(json.dumps(cfg))
    doc = engine_configs(tmp_path)
    assert doc["checked"], doc["reason"]
    rows = {r["dir"]: r for r in doc["members"]}
    assert rows["llama-v1"]["ok"] and rows["dsv3-v1"]["ok"], rows
    assert rows["dsv3-v1"]["topk_method"] == "noaux_tc"
    assert not rows["dsv3-v1-old"]["ok"] and "noaux_tc" in rows["dsv3-v1-old"]["error"]


def test_context_lengths_on_the_real_engine(real_servers, cli):
    """`bench --url --context-lengths`: the engine counts exactly L prompt tokens (the prompts
    go as token ids), and the per-length counter deltas add up to the engine's own counters
    over the run."""
    spec, base = real_servers.url("eagle3-v1"), real_servers.url("plain-v1")
    c0 = counters(spec)
    r = cli(
        "bench",
        "--url",
        spec,
        "--baseline-url",
        base,
        "--target",
        "llama-v1",
        "--context-lengths",
        "128,512",
        "--prompts",
        "2",
        "--max-new-tokens",
        "32",
        "--repeats",
        "1",
        "--json",
    )
    c1 = counters(spec)
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["errors"] == []
    drafts, accepted = c1["drafts"] - c0["drafts"], c1["accepted_tokens"] - c0["accepted_tokens"]
    assert [e["context_length"] for e in doc["by_length"]] == [128, 512]
    for e in doc["by_length"]:
        assert e["prompt_tokens"] == e["context_length"] and e["requests"] == 2
        assert 1.0 <= e["tau_online"] <= 4.0 and e["decode_ms"] > 0
    assert sum(e["cycles"] for e in doc["by_length"]) == drafts
    got = sum((e["tau_online"] - 1) * e["cycles"] for e in doc["by_length"])
    assert got == pytest.approx(accepted, abs=1e-6)
