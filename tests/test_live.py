"""`bench --url` against fake SGLang and vLLM engines doing real speculative decoding.

The expected figures come from the fake's own decoder (its log of every generation's
accepted-drafts-per-cycle), never from the client under test.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from fake_engine import FakeEngine

from eagle3kit.live.bench import LiveConfig, run_live_bench
from eagle3kit.live.client import Deadline, stream
from eagle3kit.live.suites import Prompt

ROOT = Path(__file__).resolve().parents[1]
CODE = ["def ", "import ", "class ", "for i in ", "    return ", "x = ["]


@pytest.fixture(scope="module")
def pair():
    """The zoo's tiny target and a drafter trained briefly on its own greedy text (the
    committed fixture, decode_helpers.accepting_drafter_dir)."""
    from decode_helpers import accepting_drafter_dir

    from eagle3kit import zoo
    from eagle3kit.model.loading import load_pair

    return load_pair(str(zoo.get("llama-v1", size="tiny")), accepting_drafter_dir())


def prompts(n: int = 3, suite: str = "s") -> list[Prompt]:
    return [Prompt(suite, str(i), (CODE[i % len(CODE)],)) for i in range(n)]


def cfg(**kw) -> LiveConfig:
    base = dict(prompts=prompts(), max_tokens=20, repeats=2, endpoint="completions", timeout=60)
    base.update(kw)
    return LiveConfig(**base)


def warm(url: str, path: str = "/v1/completions") -> None:
    """Traffic sent before the run (must not count in the run's figures)."""
    body = {"model": "zoo-tiny", "prompt": "while ", "max_tokens": 24, "stream": True}
    if path == "/generate":
        body = {"text": "while ", "sampling_params": {"max_new_tokens": 24}, "stream": True}
    stream(url, path, body, Deadline(30))


def only_level(doc: dict, role: str = "speculative") -> dict:
    d = next(x for x in doc["deployments"] if x["role"] == role)
    assert len(d["levels"]) == 1
    return d["levels"][0]


def test_vllm_tau_from_counter_diff_and_per_request_equal_the_decoder(pair):
    tm, d = pair
    with FakeEngine(tm, d, per_request=True) as spec, FakeEngine(tm, None) as base:
        warm(spec.url)
        before = list(spec.log)
        assert sum(map(sum, (e["accepted"] for e in before))) > 0  # warm-up accepted drafts
        doc = run_live_bench([spec.url], base.url, cfg())
        run = spec.log[len(before) :]
    assert doc["kind"] == "eagle3kit.bench-live" and doc["schema"] == 1
    assert len(run) == 2 * 3
    acc = only_level(doc)["acceptance"]
    cycles = sum(len(e["accepted"]) for e in run)
    accepted = sum(sum(e["accepted"]) for e in run)
    assert acc["source"] == "counters"
    assert (acc["counters"]["drafts"], acc["counters"]["accepted"]) == (cycles, accepted)
    assert acc["tau_online"] == pytest.approx(spec.tau(run), abs=1e-12)
    assert acc["per_position_acceptance"] == pytest.approx(spec.per_position(run), abs=1e-12)
    req = acc["per_request"]
    assert (req["steps"], req["accepted"]) == (cycles, accepted)
    assert req["per_position_acceptance"] == pytest.approx(spec.per_position(run), abs=1e-12)
    assert doc["tau_online"] == acc["tau_online"] and doc["depth"] == 3


def test_decode_rate_agrees_with_the_servers_own_timing(pair):
    tm, d = pair
    with FakeEngine(tm, d) as spec:
        doc = run_live_bench([spec.url], None, cfg(max_tokens=40, repeats=1))
        run = list(spec.log)
    lv = only_level(doc)
    server = sorted(e["tokens"] / e["total_s"] for e in run)[len(run) // 2]
    client = lv["decode_tokens_per_s"]["median"]
    assert 0.5 < client / server < 2.0, (client, server)
    assert lv["completion_tokens"]["median"] == sorted(e["tokens"] for e in run)[len(run) // 2]


def test_sglang_generate_per_request_tau_and_the_cumulative_average_kept_apart(pair):
    tm, d = pair
    with FakeEngine(tm, d, engine="sglang") as spec, FakeEngine(tm, None, engine="sglang") as b:
        warm(spec.url, "/generate")
        n0 = len(spec.log)
        doc = run_live_bench([spec.url], b.url, cfg(endpoint="generate", repeats=1))
        run = spec.log[n0:]
        life = spec.life["tokens"] / spec.life["cycles"]
    dep = next(x for x in doc["deployments"] if x["role"] == "speculative")
    assert dep["server"]["engine"] == "sglang"
    assert dep["server"]["speculative"]["num_draft_tokens"] == 4
    assert dep["server"]["speculative"]["draft_model"] == "/models/zoo-drafter"
    acc = dep["levels"][0]["acceptance"]
    assert acc["source"] == "per-request"
    assert acc["tau_online"] == pytest.approx(spec.tau(run), abs=1e-12)
    assert acc["per_position_acceptance"] == pytest.approx(spec.per_position(run), abs=1e-12)
    # SGLang's spec_accept_length counts the prefill token: tokens / verify steps per request
    own = sorted(e["tokens"] / len(e["accepted"]) for e in run if e["accepted"])
    assert acc["per_request"]["engine_accept_length"]["median"] == pytest.approx(
        own[len(own) // 2] if len(own) % 2 else (own[len(own) // 2 - 1] + own[len(own) // 2]) / 2
    )
    assert dep["server_life_tau"]["after"] == pytest.approx(life)
    assert "not this run" in dep["server_life_tau"]["note"]
    assert doc["comparison"][0]["decode_speedup"] is not None


def test_sglang_chat_reads_sglext_and_says_when_it_is_missing(pair):
    tm, d = pair
    with (
        FakeEngine(tm, d, engine="sglang", sglext=True) as new,
        FakeEngine(tm, d, engine="sglang") as old,
    ):
        doc = run_live_bench([new.url, old.url], None, cfg(endpoint="chat", repeats=1))
        run = list(new.log)
        asked = [b.get("return_spec_tokens_details") for b in new.bodies]
    assert asked == [True] * 3
    new_doc, old_doc = doc["deployments"]
    assert new_doc["levels"][0]["acceptance"]["tau_online"] == pytest.approx(new.tau(run))
    assert old_doc["levels"][0]["acceptance"] is None
    missing = [e for e in doc["errors"] if e.startswith(old.url)]
    assert len(missing) == 1 and "--endpoint generate" in missing[0]


def test_mt_bench_second_turn_follows_the_servers_answer(pair, tmp_path):
    tm, _ = pair
    p = [Prompt("mt-bench", "81", ("def ", "class "))]
    with FakeEngine(tm, None) as base:
        run_live_bench([base.url], None, cfg(prompts=p, endpoint="chat", repeats=1))
        bodies, answer = base.bodies, tm.tokenizer.decode(base.log[0]["tokens_ids"])
    assert [len(b["messages"]) for b in bodies] == [1, 3]
    assert bodies[1]["messages"][1] == {"role": "assistant", "content": answer}
    assert bodies[1]["messages"][2] == {"role": "user", "content": "class "}


@pytest.mark.slow  # seconds; the full suite runs it (fast subset under 3 min)
def test_levels_rounds_and_suites_are_reported(pair):
    tm, d = pair
    ps = prompts(2, "gsm8k") + prompts(2, "humaneval")
    with FakeEngine(tm, d) as spec, FakeEngine(tm, None) as base:
        doc = run_live_bench(
            [spec.url], base.url, cfg(prompts=ps, concurrency=(1, 2), max_tokens=10)
        )
        run = list(spec.log)
    dep = next(x for x in doc["deployments"] if x["role"] == "speculative")
    assert [lv["concurrency"] for lv in dep["levels"]] == [1, 2]
    assert all(lv["throughput_tokens_per_s"]["n"] == 2 for lv in dep["levels"])
    assert all(set(lv["suites"]) == {"gsm8k", "humaneval"} for lv in dep["levels"])
    assert len(run) == 2 * 2 * 4  # rounds x levels x prompts
    total = sum(len(e["accepted"]) for e in run)
    got = sum(lv["acceptance"]["counters"]["drafts"] for lv in dep["levels"])
    assert got == total
    assert {c["concurrency"] for c in doc["comparison"]} == {1, 2}


@pytest.mark.parametrize("fault", ["drop", "500"])
def test_a_failing_server_gives_one_line_and_the_rest_is_measured(pair, fault):
    tm, d = pair
    with FakeEngine(tm, d, fault=fault, fault_every=2) as spec, FakeEngine(tm, None) as base:
        doc = run_live_bench([spec.url], base.url, cfg(repeats=1, prompts=prompts(4)))
    lines = [e for e in doc["errors"] if spec.url in e]
    assert len(lines) == 1 and lines[0].startswith("2 of 4 requests failed")
    assert ("HTTP 500" in lines[0]) == (fault == "500")
    lv = only_level(doc)
    assert lv["requests"] == 2 and lv["failed"] == 2
    assert lv["decode_tokens_per_s"] is not None and lv["acceptance"] is not None


def test_no_metrics_endpoint_says_what_is_missing(pair):
    tm, d = pair
    with FakeEngine(tm, d, fault="no-metrics", per_request=True) as spec:
        doc = run_live_bench([spec.url], None, cfg(repeats=1))
        run = list(spec.log)
    lv = only_level(doc)
    assert lv["acceptance"]["source"] == "per-request"
    assert lv["acceptance"]["tau_online"] == pytest.approx(spec.tau(run))
    assert [e for e in doc["errors"] if "no /metrics" in e] == [
        f"{spec.url}: no /metrics: run counters (tau, per-position) missing"
    ]


@pytest.mark.slow  # waits on timeouts by design (seconds)
@pytest.mark.timeout
def test_a_stalled_stream_ends_at_the_timeout(pair):
    """A stream that stalls (the fake holds it until it stops, long after --timeout) ends by
    the client's timeout, said as such: not by the server going away."""
    tm, d = pair
    with FakeEngine(tm, d, fault="stall", fault_every=2, lifetime=600) as spec:
        doc = run_live_bench([spec.url], None, cfg(repeats=2, timeout=4))
    assert any("stream stalled until --timeout" in e for e in doc["errors"])
    assert any("--timeout" in e and "reached" in e for e in doc["errors"])
    assert only_level(doc)["requests"] >= 1


def test_unreachable_server_is_one_line(pair):
    tm, d = pair
    with FakeEngine(tm, d) as spec:
        dead = FakeEngine(tm, None).start()
        url = dead.url
        dead.stop()
        doc = run_live_bench([spec.url], url, cfg(repeats=1))
    assert [e for e in doc["errors"] if url in e][0].startswith(f"{url}: not measured")
    assert only_level(doc)["acceptance"] is not None


def _doc_commands(block: int = 0) -> list[str]:
    text = (ROOT / "docs" / "live.md").read_text()
    blocks = re.findall(r"tested commands: begin -->\s*```console\n(.*?)```", text, re.S)
    return [line for line in blocks[block].splitlines() if line.strip()]


def _doc_args(cmd: str, urls: dict[str, str], files: dict[str, str]) -> list[str]:
    """A docs command's words with the fakes' URLs and local suite files put in."""
    for k, v in urls.items():
        cmd = cmd.replace(k, v)
    args = shlex.split(cmd)
    assert args[0] == "eagle3kit"
    i = args.index("--suite")
    args[i + 1] = ",".join(files[s] for s in args[i + 1].split(","))
    return args[1:]


def _suite_files(tmp: Path) -> dict[str, str]:
    mt = tmp / "mt.jsonl"
    mt.write_text(json.dumps({"question_id": 81, "turns": ["def ", "class "]}) + "\n")
    gsm = tmp / "gsm.jsonl"
    gsm.write_text("".join(json.dumps({"question": q}) + "\n" for q in ("import ", "x = [")))
    return {"mt-bench": f"mt-bench={mt}", "gsm8k": f"gsm8k={gsm}"}


@pytest.mark.slow
def test_the_docs_commands_run_against_the_fakes(pair, tmp_path, cli, monkeypatch, capsys):
    """docs/live.md's commands, word for word; only URLs and hub suites are swapped for
    the fakes' addresses and local files of the same shape, and the rounds kept short."""
    tm, d = pair
    monkeypatch.chdir(tmp_path)
    bench_cmd, plan_cmd = _doc_commands()
    files = _suite_files(tmp_path)
    with FakeEngine(tm, d) as spec, FakeEngine(tm, None) as base:
        args = _doc_args(bench_cmd, {"$SPEC_URL": spec.url, "$BASE_URL": base.url}, files)
        assert args[-2] == ">"
        r = cli(*args[:-2], "--repeats", "1", "--max-new-tokens", "12")
    assert r.code == 0, r.err
    Path(args[-1]).write_text(r.out)
    doc = json.loads(r.out)
    dep = next(x for x in doc["deployments"] if x["role"] == "speculative")
    assert [lv["concurrency"] for lv in dep["levels"]] == [1, 4, 16]
    assert set(dep["levels"][0]["suites"]) == {"mt-bench", "gsm8k"}
    p = cli(*shlex.split(plan_cmd)[1:], "--json")
    assert p.code in (0, 1), p.err
    plan = json.loads(p.out)
    assert doc["tau_online"] == pytest.approx(plan["tau"])
    # the cycle model at the measured tau and cycle gives back the measured decode rate
    tps = dep["levels"][0]["decode_tokens_per_s_pooled"]
    assert plan["throughput_tps"] == pytest.approx(tps, rel=1e-4)
    # the speedup plan prices is the one bench labels so: the pooled one (not the median's)
    base = next(x for x in doc["deployments"] if x["role"] == "baseline")["levels"][0]
    pooled = tps / base["decode_tokens_per_s_pooled"]
    assert doc["speedups"]["plan_prices"] == "decode_speedup_pooled"
    assert doc["comparison"][0]["decode_speedup_pooled"] == pytest.approx(pooled, rel=1e-12)
    assert plan["speedup"] == pytest.approx(pooled, rel=1e-4)
    from eagle3kit.cli.live import render

    render(doc)  # the text output names both speedups and says which one plan prices
    text = " ".join(capsys.readouterr().out.split())
    assert "speedup pooled: all decoded tokens / all decode time" in text
    assert "the speedup `plan --from` predicts" in text
    rep_dir = tmp_path.parent / f"{tmp_path.name}-rep"  # report refuses -o inside its input
    rep = cli("report", str(tmp_path), "-o", str(rep_dir), "--json")
    assert rep.code == 0, rep.err
    md = (rep_dir / "report.md").read_text()
    assert f"{doc['tau_online']:.2f} (counters)" in md and spec.url in md
    assert json.loads(rep.out)["found"]["bench_live"] == ["bench.json"]


def test_probe_live_compares_the_drafter_on_two_servers(pair, cli, tmp_path):
    """NEW runs a drafter that knows nothing (random), OLD the trained one: the retention is
    the fakes' own (tau_NEW - 1) / (tau_OLD - 1)."""
    from decode_helpers import new_drafter

    from eagle3kit.measure.verdict import PLUG_IN_RETENTION, WARM_START_RETENTION

    tm, d = pair
    g = tmp_path / "g.jsonl"
    g.write_text("".join(json.dumps({"question": q}) + "\n" for q in CODE[:3]))
    with FakeEngine(tm, new_drafter(tm, seed=1)) as new, FakeEngine(tm, d) as old:
        r = cli(
            "probe",
            "--url",
            new.url,
            "--reference-url",
            old.url,
            "--suite",
            f"gsm8k={g}",
            "--samples",
            "3",
            "--repeats",
            "1",
            "--max-new-tokens",
            "16",
            "--endpoint",
            "completions",
            "--json",
        )
        t_new, t_old = new.tau(), old.tau()
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["kind"] == "eagle3kit.probe-live" and doc["schema"] == 1
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
    assert doc["per_suite"]["gsm8k"]["retention"] == pytest.approx(ret)


def test_eval_online_url(pair, cli, tmp_path):
    tm, d = pair
    g = tmp_path / "g.jsonl"
    g.write_text("".join(json.dumps({"question": q}) + "\n" for q in CODE[:2]))
    with FakeEngine(tm, d, engine="sglang") as spec:
        r = cli(
            "eval",
            "--online",
            "--url",
            spec.url,
            "--suite",
            f"gsm8k={g}",
            "--limit",
            "2",
            "--repeats",
            "1",
            "--max-new-tokens",
            "16",
            "--endpoint",
            "generate",
            "--json",
        )
        tau = spec.tau()
        no = cli("eval", "--url", spec.url, "--suite", f"gsm8k={g}")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert [d["role"] for d in doc["deployments"]] == ["speculative"]
    assert doc["deployments"][0]["levels"][0]["acceptance"]["tau_online"] == pytest.approx(tau)
    assert no.code == 2 and "add --online" in no.err


def test_detection_reads_each_engines_settings(pair):
    from eagle3kit.live.server import detect

    tm, d = pair
    with FakeEngine(tm, d, dev_mode=True, draft_path="/m/d") as dev, FakeEngine(tm, d) as prod:
        a, b = detect(dev.url, Deadline(10)), detect(prod.url, Deadline(10))
    with FakeEngine(tm, None, engine="sglang") as plain:
        c = detect(plain.url, Deadline(10))
    assert (a.engine, a.version, a.speculative["draft_model"], a.speculative["num_steps"]) == (
        "vllm",
        "0.32.0",
        "/m/d",
        3,
    )
    assert (b.speculative["num_steps"], b.speculative["source"]) == (3, "/metrics")
    assert (c.engine, c.version, c.speculative) == ("sglang", "0.5.14", None)


@pytest.mark.slow
def test_the_docs_eval_and_probe_commands_run_against_the_fakes(pair, tmp_path, cli):
    from decode_helpers import new_drafter

    tm, d = pair
    eval_cmd, probe_cmd = _doc_commands(1)
    files = _suite_files(tmp_path)
    short = ("--repeats", "1", "--max-new-tokens", "12")
    with (
        FakeEngine(tm, d, engine="sglang", sglext=True) as old,
        FakeEngine(tm, new_drafter(tm, seed=2), engine="sglang", sglext=True) as new,
        FakeEngine(tm, None, engine="sglang") as plain,
    ):
        urls = {"$SPEC_URL": old.url, "$NEW_URL": new.url, "$OLD_URL": old.url}
        urls["$NEW_PLAIN_URL"] = plain.url
        e = cli(*_doc_args(eval_cmd, urls, files), *short)
        p = cli(*_doc_args(probe_cmd, urls, files), *short)
    assert e.code == 0 and p.code == 0, e.err + p.err
    ev, pr = json.loads(e.out), json.loads(p.out)
    assert set(ev["deployments"][0]["levels"][0]["suites"]) == {"mt-bench", "gsm8k"}
    assert pr["kind"] == "eagle3kit.probe-live" and pr["verdict"] in (
        "plug-in",
        "fine-tune",
        "from-scratch",
        "unknown",
    )
    assert [x["role"] for x in pr["bench"]["deployments"]] == [
        "baseline",
        "speculative",
        "speculative",
    ]


def test_rounds_rotate_the_deployments(pair):
    tm, d = pair
    with FakeEngine(tm, d) as spec, FakeEngine(tm, None) as base:
        run_live_bench([spec.url], base.url, cfg(prompts=prompts(1), repeats=3, max_tokens=4))
        s, b = spec.arrivals, base.arrivals
    assert len(s) == len(b) == 3
    assert [b[r] < s[r] for r in range(3)] == [True, False, True]  # baseline first in round 0


def test_sampling_tau_and_the_drafting_rule_at_that_temperature(pair):
    tm, d = pair
    with FakeEngine(tm, d) as spec:
        doc = run_live_bench([spec.url], None, cfg(temperature=0.8, repeats=1))
        run = list(spec.log)
    dep = doc["deployments"][0]
    assert doc["settings"]["temperature"] == 0.8
    assert "argmax at any temperature" in dep["drafting_rule"]
    assert dep["levels"][0]["acceptance"]["tau_online"] == pytest.approx(spec.tau(run))


def test_distinct4_and_distinct_answers_come_from_the_outputs(pair):
    from eagle3kit.live.summary import distinct_n

    tm, _ = pair
    with FakeEngine(tm, None) as base:
        doc = run_live_bench([base.url], None, cfg(repeats=1, max_tokens=48))
        texts = [tm.tokenizer.decode(e["tokens_ids"]) for e in base.log]
    lv = doc["deployments"][0]["levels"][0]
    words = [t.split() for t in texts]
    grams = [[tuple(w[i : i + 4]) for i in range(len(w) - 3)] for w in words]
    d4 = [len(set(g)) / len(g) if g else None for g in grams]  # None: under 4 words
    assert [distinct_n(t) for t in texts] == [pytest.approx(x) if x else None for x in d4]
    known = [x for x in d4 if x is not None]
    assert lv["distinct4"] == (pytest.approx(sum(known) / len(known)) if known else None)
    assert lv["distinct_answers"] == len(set(texts)) and lv["answers"] == len(texts)
    if known and lv["distinct4"] < 0.5:  # the tiny target loops: the warning must say so
        assert any("outputs repeat" in w for w in doc["warnings"])


def test_counters_read_after_they_settle(pair):
    """The fake's counters move 0.15 s after each answer: the read after a block waits."""
    tm, d = pair
    with FakeEngine(tm, d, stats_lag=0.15) as spec:
        doc = run_live_bench([spec.url], None, cfg(repeats=1, prompts=prompts(2)))
        run = list(spec.log)
    acc = only_level(doc)["acceptance"]
    assert acc["counters"]["drafts"] == sum(len(e["accepted"]) for e in run)
    assert acc["tau_online"] == pytest.approx(spec.tau(run), abs=1e-12)
