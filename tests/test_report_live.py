"""`report` tells the live story: before/after live benches side by side and in order, the
speedup change and whether it crossed break-even, the plan, evals and live probes rendered,
every other JSON listed as skipped with why, and "what next" from the live figures.

Bench-live documents are written by hand in live/summary.py's schema (`summarise`,
`deployment_json`, `level_json`, `plan_fields`), or by the real `bench --url` against the test
fakes (tests/fake_engine.py); plan.json is always the real `plan --from` on the "before" run.
Expected figures are worked out by hand below.
"""

from __future__ import annotations

import json
import os

import pytest
from conftest import run_cli


def _server(url, engine, draft):
    spec = None
    if draft is not False:
        spec = {
            "algorithm": "EAGLE3",
            "num_steps": 3,
            "topk": 1,
            "num_draft_tokens": 4,
            "draft_model": draft,
            "source": "server_info",
        }
    return {
        "url": url,
        "engine": engine,
        "version": "0.5.0",
        "model": "k25",
        "speculative": spec,
        "metrics_endpoint": False,
        "notes": [],
    }


def _level(tps, tau, token_ms):
    acc = None
    if tau is not None:
        acc = {
            "tau_online": tau,
            "source": "per-request",
            "per_position_acceptance": [],
            "conditional_acceptance": [],
            "counters": None,
            "per_request": None,
        }
    return {
        "concurrency": 1,
        "requests": 6,
        "failed": 0,
        "decode_tokens_per_s": {"median": tps, "min": tps, "max": tps, "n": 6},
        "token_ms": token_ms,
        "throughput_tokens_per_s": None,
        "ttft_ms": {"median": 30.0, "min": 30.0, "max": 30.0, "n": 6},
        "itl_ms": None,
        "completion_tokens": {"median": 64, "min": 64, "max": 64, "n": 6},
        "acceptance": acc,
        "distinct4": 0.9,
        "distinct_answers": 6,
        "answers": 6,
        "suites": {},
    }


def bench_live(spec_tps, tau, draft, engine="sglang"):
    """Plain at 100 tok/s (10 ms a token); the speculative deployment at spec_tps with tau."""
    token_ms = 1000 / spec_tps
    base = {
        "url": "http://base",
        "role": "baseline",
        "server": _server("http://base", engine, False),
        "drafting_rule": "greedy",
        "tau_bound": None,
        "levels": [_level(100.0, None, 10.0)],
        "server_life_tau": None,
    }
    spec = {
        "url": "http://spec",
        "role": "speculative",
        "server": _server("http://spec", engine, draft),
        "drafting_rule": "greedy",
        "tau_bound": 4.0,
        "levels": [_level(spec_tps, tau, token_ms)],
        "server_life_tau": None,
    }
    return {
        "kind": "eagle3kit.bench-live",
        "schema": 1,
        "settings": {
            "endpoint": "chat",
            "max_tokens": 64,
            "temperature": 0.0,
            "repeats": 3,
            "concurrency": [1],
            "suites": {"gsm8k": 2},
        },
        "deployments": [base, spec],
        "comparison": [
            {
                "url": "http://spec",
                "concurrency": 1,
                "decode_speedup": spec_tps / 100.0,
                "throughput_speedup": None,
            }
        ],
        "warnings": [],
        "errors": [],
        "tau_online": tau,
        "cycle_ms": tau * token_ms,
        "depth": 3,
        "decode_ms": 10.0,
        "new_tokens": 64,
        "prefill_ms": 30.0,
    }


EVAL = {
    "kind": "eagle3kit.eval",
    "schema": 1,
    "mode": "offline",
    "source": "store-new",
    "depth": 3,
    "tau_walk": 2.5,
    "per_position_acceptance": [0.7, 0.5, 0.3],
    "conditional_acceptance": [0.7, 0.714286, 0.6],
    "cycles": 40,
    "samples": 32,
    "skipped": 0,
}
PROBE_LIVE = {
    "kind": "eagle3kit.probe-live",
    "schema": 1,
    "url": "http://new",
    "reference_url": "http://old",
    "tau_online": {"new": 2.0, "reference": 2.4},
    "retention": 1.0 / 1.4,
    "per_suite": {},
    "verdict": "fine-tune",
    "reasons": ["online: keeps 71% of the reference's gain"],
    "bench": {"errors": ["http://new: 1 of 6 requests failed"]},
}


def _write(path, doc, mtime=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _plan_from(before, out):
    r = run_cli("plan", "--from", str(before), "--json")
    assert r.code in (0, 1), r.err
    out.write_text(r.out)


def _report(src, out):
    r = run_cli("report", str(src), "-o", str(out), "--json")
    assert r.code == 0, r.err
    return json.loads(r.out), (out / "report.md").read_text(), (out / "report.html").read_text()


@pytest.fixture
def story(tmp_path):
    run = tmp_path / "run"
    # "after" written first: the order must come from the drafters, not the files' times
    _write(run / "after.json", bench_live(125.0, 2.5, "/srv/k25-ft-sglang"), mtime=1_000)
    _write(run / "before.json", bench_live(80.0, 1.6, "/srv/k2-drafter"), mtime=2_000)
    _plan_from(run / "before.json", run / "plan.json")
    _write(
        run / "convert.json",
        {
            "kind": "eagle3kit.convert",
            "schema": 1,
            "source": "ft/best",
            "from": "eagle3kit",
            "to": "sglang",
            "out": "/srv/k25-ft-sglang",
        },
    )
    _write(
        run / "ft" / "summary.json",
        {
            "kind": "eagle3kit.train",
            "schema": 1,
            "steps": 10,
            "best_step": 10,
            "tau_every_position": 2.4,
            "init_from": "/srv/k2-drafter",
        },
    )
    _write(run / "eval.json", EVAL)
    _write(run / "probe-live.json", PROBE_LIVE)
    _write(run / "compat.json", {"kind": "eagle3kit.compat", "schema": 1})
    _write(run / "notes.json", "{torn")
    _write(run / "killed" / "state" / "state.json", {"kind": "eagle3kit.train_state", "schema": 1})
    return run


def test_before_after_in_order_with_the_break_even_verdict(story, tmp_path):
    doc, md, html = _report(story, tmp_path / "out")
    # plan --from before.json: baseline 1000 / 10 ms = 100 tok/s, cycle 1.6 x 12.5 ms = 20 ms,
    # so break-even tau = 100 x 0.020 = 2.0; before 1.6 < 2.0 <= 2.5 after
    line = (
        "Before → after: speedup 0.80x → 1.25x (+0.45x), τ 1.600 → 2.500: crossed break-even "
        "(break-even τ 2.000 [plan.json]) [before.json, after.json]."
    )
    assert line in md
    assert "by the drafter each server reported" in md
    table = md[md.index("## Live: before and after") :]
    assert table.index("/srv/k2-drafter") < table.index("/srv/k25-ft-sglang")
    assert "| drafter | /srv/k2-drafter | /srv/k25-ft-sglang |" in md
    assert "| speedup median | 0.80x | 1.25x |" in md
    assert "| verdict | below break-even | pays |" in md
    # what next from the live figures
    assert (
        "What next (live): deploy the fine-tuned drafter: τ 2.500, 125.0 tok/s per request, "
        "speedup 1.25x at concurrency 1 [after.json]; it clears break-even τ 2.000 [plan.json]."
    ) in md
    assert "drafter None" not in md and "None" not in md.split("## Files not rendered")[0]
    assert doc["found"]["bench_live"] == ["after.json", "before.json"]
    assert doc["found"]["plan"] == ["plan.json"] and doc["found"]["eval"] == ["eval.json"]
    assert doc["found"]["probe_live"] == ["probe-live.json"]
    live = md[md.index("## Live deployments") :]  # the tables in the story's order too
    assert live.index("[before.json]") < live.index("[after.json]")
    assert line in html.replace("&#x27;", "'")


def test_plan_eval_and_live_probe_rendered(story, tmp_path):
    _, md, _ = _report(story, tmp_path / "out")
    plan = md[md.index("## Plan (the cycle model)") :]
    # tau 1.6 / 0.020 s = 80 tok/s, 0.8x of 100 tok/s
    assert "| throughput | 80 tok/s = τ / cycle | plan.json |" in plan
    assert "| speedup | 0.800x, below break-even | plan.json |" in plan
    assert "| break-even τ | 2.000 = baseline × cycle | plan.json |" in plan
    assert "| offline from store-new | 3 | 2.500 | 0.700 0.500 0.300 | 32 | - | eval.json |" in md
    assert "## Live probe: verdict fine-tune" in md
    assert "τ 2.000 vs 2.400, keeps 71.4% of the reference's gain" in md
    assert "error: http://new: 1 of 6 requests failed [probe-live.json]" in md


def test_every_json_is_rendered_or_skipped_with_why(story, tmp_path):
    doc, md, html = _report(story, tmp_path / "out")
    want = [
        "compat.json: kind eagle3kit.compat: not part of the report",
        "convert.json: kind eagle3kit.convert: read only to name the converted drafter a live "
        "bench serves",
    ]
    assert want[0] in doc["skipped"] and want[1] in doc["skipped"]
    want.append("killed/state/state.json: a train run's state without its summary.json")
    assert any(s.startswith(want[2]) for s in doc["skipped"])
    torn = next(s for s in doc["skipped"] if s.startswith("notes.json: invalid JSON"))
    for text in (md, html.replace("&#x27;", "'")):
        assert "Files not rendered" in text
        assert all(w in text for w in want) and torn.split(" (")[0] in text
    rendered = {c for v in doc["found"].values() for c in v}
    files = {str(p.relative_to(story)) for p in story.rglob("*.json")}
    assert files == rendered | {s.split(": ")[0] for s in doc["skipped"]}


def test_without_drafter_names_the_files_times_decide_and_say_so(tmp_path):
    run = tmp_path / "run"
    _write(run / "b.json", bench_live(125.0, 2.5, None, engine="vllm"), mtime=2_000)
    _write(run / "a.json", bench_live(90.0, 1.9, None, engine="vllm"), mtime=1_000)
    _, md, _ = _report(run, tmp_path / "out")
    assert "by the runs' start times, oldest first: the servers' drafters do not tell" in md
    assert "| drafter | not reported by the server | not reported by the server |" in md
    # no plan: each run's own costs, cycle_ms / decode_ms: 1.9 x 11.11 / 10 = 2.111 (a),
    # 2.5 x 8 / 10 = 2.0 (b)
    assert "| break-even τ | 2.111 [a.json] | 2.000 [b.json] |" in md
    assert "speedup 0.90x → 1.25x (+0.35x), τ 1.900 → 2.500: crossed break-even" in md
    assert "drafter None" not in md


def test_the_runs_own_start_times_beat_the_files_times(tmp_path):
    """bench --url writes when it started; a copy of the files (new mtimes) keeps the order."""
    run = tmp_path / "run"
    a = {**bench_live(90.0, 1.9, None, engine="vllm"), "started": "2026-11-30T08:00:00Z"}
    b = {**bench_live(125.0, 2.5, None, engine="vllm"), "started": "2026-12-01T08:00:00Z"}
    _write(run / "a.json", a, mtime=2_000)  # the files' times point the wrong way
    _write(run / "b.json", b, mtime=1_000)
    _, md, _ = _report(run, tmp_path / "out")
    assert "speedup 0.90x → 1.25x (+0.35x), τ 1.900 → 2.500: crossed break-even" in md


def test_one_live_run_still_tells_what_next(tmp_path):
    run = tmp_path / "run"
    _write(run / "now.json", bench_live(80.0, 1.6, "/srv/k2-drafter"))
    _, md, _ = _report(run, tmp_path / "out")
    assert "## Live: before and after" not in md
    # own costs: cycle 1.6 x 12.5 = 20 ms over 10 ms: break-even tau 2.0, short by 0.4
    assert (
        "What next (live): not yet: τ 1.600, 80.0 tok/s per request, speedup 0.80x at "
        "concurrency 1 [now.json] is below break-even τ 2.000 [now.json], τ short by 0.400"
    ) in md


@pytest.fixture(scope="module")
def fakes_pair():
    """The zoo's tiny target, a random drafter (the old one, "before") and one trained briefly
    on the target's own greedy text (the fine-tuned one, "after")."""
    import torch
    from decode_helpers import new_drafter, self_text, train_drafter

    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    tm = TargetModel.from_pretrained(zoo.get("llama-v1", size="tiny"))
    return tm, new_drafter(tm, seed=1), train_drafter(tm, self_text(tm, n=16)[:6], steps=30)


def _live_bench(spec_url, base_url, suite, out):
    r = run_cli(
        "bench",
        "--url",
        spec_url,
        "--baseline-url",
        base_url,
        "--suite",
        suite,
        "--concurrency",
        "1",
        "--repeats",
        "1",
        "--max-new-tokens",
        "12",
        "--endpoint",
        "generate",
        "--json",
    )
    assert r.code == 0, r.err
    out.write_text(r.out)
    return json.loads(r.out)


@pytest.mark.slow
def test_the_real_producers_story(fakes_pair, tmp_path):
    """bench --url against SGLang fakes (old drafter, then the fine-tuned one), plan --from the
    first, and report: the report's before/after line carries the benches' own figures."""
    from fake_engine import FakeEngine

    tm, old, new = fakes_pair
    run = tmp_path / "run"
    run.mkdir()
    g = tmp_path / "g.jsonl"
    g.write_text("".join(json.dumps({"question": q}) + "\n" for q in ("def ", "import ")))
    with FakeEngine(tm, None, engine="sglang") as base:
        with FakeEngine(tm, new, engine="sglang", draft_path="/srv/k25-ft") as spec:
            after = _live_bench(spec.url, base.url, f"gsm8k={g}", run / "after.json")
        with FakeEngine(tm, old, engine="sglang", draft_path="/srv/k2-drafter") as spec:
            before = _live_bench(spec.url, base.url, f"gsm8k={g}", run / "before.json")
    os.utime(run / "after.json", (1_000, 1_000))  # the files' times point the wrong way
    _plan_from(run / "before.json", run / "plan.json")
    _write(
        run / "train" / "summary.json",
        {
            "kind": "eagle3kit.train",
            "schema": 1,
            "steps": 30,
            "best_step": 30,
            "tau_every_position": 2.0,
            "init_from": "/srv/k2-drafter",
        },
    )
    _write(
        run / "convert.json",
        {"kind": "eagle3kit.convert", "schema": 1, "to": "sglang", "out": "/srv/k25-ft"},
    )
    doc, md, _ = _report(run, tmp_path / "out")
    sp = [c["decode_speedup"] for c in (before["comparison"][0], after["comparison"][0])]
    be = json.loads((run / "plan.json").read_text())["break_even_tau"]
    assert be == pytest.approx(before["cycle_ms"] / before["decode_ms"], rel=1e-5)
    head = (
        f"Before → after: speedup {sp[0]:.2f}x → {sp[1]:.2f}x ({sp[1] - sp[0]:+.2f}x), "
        f"τ {before['tau_online']:.3f} → {after['tau_online']:.3f}: "
    )
    line = next(x for x in md.splitlines() if x.startswith("Before → after"))
    # The fakes' timings are real, so the verdict (and a note when the measured speedup
    # contradicts it) depends on the machine's load; the figures and their sources do not.
    assert line.startswith(head), line
    assert f"(break-even τ {be:.3f} [plan.json])" in line, line
    assert line.endswith("[before.json, after.json]."), line
    assert "| drafter | /srv/k2-drafter | /srv/k25-ft |" in md
    assert after["tau_online"] > before["tau_online"]  # the trained drafter accepts more
    assert "What next (live)" in md and "[after.json]" in md.split("What next (live)")[1]
    assert doc["found"]["bench_live"] == ["after.json", "before.json"]


def test_files_given_keep_their_order(story, tmp_path):
    """Without the convert/train/probe files the drafters are not told apart; files named on
    the command line keep the order given, even against their times."""
    r = run_cli("report", story / "before.json", story / "after.json", "-o", tmp_path / "o")
    assert r.code == 0, r.err
    md = (tmp_path / "o" / "report.md").read_text()
    assert "as given on the command line" in md
    assert "speedup 0.80x → 1.25x (+0.45x), τ 1.600 → 2.500: crossed break-even" in md
    # its own costs: 1.6 x 12.5 ms / 10 ms = 2.0 [before.json]
    assert "(break-even τ 2.000 [after.json]) [before.json, after.json]" in md


def test_a_speedup_that_contradicts_the_break_even_verdict_is_said(tmp_path):
    """After: tau 2.5 clears the plan's break-even 2.0, but its decode ran at 95 tok/s of the
    plain 100 (its cycle, 2.5 x 10.53 ms = 26.3 ms, grew past the planned 20 ms)."""
    run = tmp_path / "run"
    _write(run / "1.json", bench_live(80.0, 1.6, None), mtime=1_000)
    _write(run / "2.json", bench_live(95.0, 2.5, None), mtime=2_000)
    _plan_from(run / "1.json", run / "plan.json")
    _, md, _ = _report(run, tmp_path / "out")
    assert (
        "crossed break-even (break-even τ 2.000 [plan.json]); but its measured speedup is 0.95x: "
        "the cycle's cost moved [1.json, 2.json]."
    ) in md


def test_the_live_table_labels_both_speedups_and_names_the_one_plan_predicts(tmp_path):
    """A run whose requests' rates spread: the median request's speedup 1.06x, the pooled one
    1.20x (the real vLLM ngram server's figures, docs/live.md). Both are shown, each under its
    own name, and the note says the pooled one is what `plan --from` predicts."""
    doc = bench_live(106.0, 2.0, "/srv/d")
    doc["comparison"][0]["decode_speedup_pooled"] = 1.2
    _write(tmp_path / "run" / "b.json", doc)
    _, md, _ = _report(tmp_path / "run", tmp_path / "out")
    live = md[md.index("## Live deployments") :]
    head = live[live.index("| deployment") :].splitlines()[0]
    cols = [c.strip() for c in head.strip("|").split("|")]
    row = next(ln for ln in live.splitlines() if ln.startswith("| speculative http://spec"))
    cells = dict(zip(cols, (c.strip() for c in row.strip("|").split("|")), strict=True))
    assert cells["speedup median"] == "1.06x"
    assert cells["speedup pooled (plan)"] == "1.20x"
    note = " ".join(live.split())
    assert "speedup pooled: all decoded tokens / all decode time over the baseline's, the " in note
    assert "the speedup `plan --from` predicts." in note
