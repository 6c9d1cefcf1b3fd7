"""`plan --from FILE` and `plan --acceptance-file FILE` on every measurement eagle3kit writes.

Each document is written by hand in its producer's schema (field names from
measure/evaluate.py, measure/bench.py, live/summary.py, live/probe.py, measure/probe.py).
Producers write per-position acceptance cumulative, P(a >= i), so tau = 1 + sum_i P(a >= i);
the expected values below are worked out by hand from that and the cycle model
(throughput = tau / cycle_s, baseline = 1000 / decode_ms), never read from the code.
"""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from eagle3kit.plan import load_per_position

EVAL_OFFLINE = {
    "kind": "eagle3kit.eval",
    "schema": 1,
    "mode": "offline",
    "depth": 3,
    "tau_walk": 2.5,  # 1 + 0.7 + 0.5 + 0.3
    "tau_every_position": 2.61,
    "per_position_acceptance": [0.7, 0.5, 0.3],
    "conditional_acceptance": [0.7, 0.5 / 0.7, 0.3 / 0.5],
    "cycles": 40,
    "all_positions": {"tau_every_position": 2.61, "per_position_acceptance": [0.75, 0.6, 0.5]},
    "samples": 8,
    "skipped": 0,
}
EVAL_ONLINE = {
    **EVAL_OFFLINE,
    "mode": "online",
    "tau_online": 2.5,
    "method": "chain",
    "tokens_per_s": 110.0,
    "baseline_tokens_per_s": 75.0,
    "speedup": 110 / 75,
    "decode_ms": 12.5,
    "cycle_ms": 20.0,
    "draft_ms": 6.0,
    "verify_ms": 13.0,
    "prefill_ms": 8.0,
    "new_tokens": 33.0,
    "lossless": True,
    "prompts": 4,
    "repeats": 3,
}
BENCH = {
    "kind": "eagle3kit.bench",
    "schema": 1,
    "prompts": 8,
    "repeats": 3,
    "max_new_tokens": 64,
    "decode_ms": 10.0,
    "methods": [
        {
            "name": "greedy",
            "tokens_per_s": {"median": 98.0},
            "tokens_per_forward": 1.0,
            "speedup": 1.0,
        },
        {
            "name": "chain",
            "tokens_per_s": {"median": 105.0},
            "tokens_per_forward": 2.19,  # new tokens / forwards: not tau
            "depth": 3,
            "tau_online": 2.2,  # 1 + 0.6 + 0.4 + 0.2
            "draft_ms": 5.0,
            "verify_ms": 14.0,
            "cycle_ms": 20.0,
            "per_position_acceptance": [0.6, 0.4, 0.2],
            "speedup": 105 / 98,
        },
    ],
}


def _level(conc, pos, tau, token_ms, ttft, tokens):
    return {
        "concurrency": conc,
        "token_ms": token_ms,
        "ttft_ms": {"median": ttft},
        "completion_tokens": {"median": tokens},
        "acceptance": None
        if tau is None
        else {
            "tau_online": tau,
            "source": "counters",
            "per_position_acceptance": pos,
            "conditional_acceptance": [],
        },
    }


def _live(spec_url="http://spec", pos=(0.8, 0.6, 0.4, 0.2)):
    pos = list(pos)
    return {
        "kind": "eagle3kit.bench-live",
        "schema": 1,
        "settings": {},
        "deployments": [
            {
                "url": "http://base",
                "role": "baseline",
                "levels": [_level(1, [], None, 15.0, 40, 99)],
            },
            {
                "url": spec_url,
                "role": "speculative",
                "levels": [
                    _level(4, [0.1], 1.1, 40.0, 90, 80),
                    _level(1, pos, 3.0, 10.0, 50, 101),  # 1 + 0.8 + 0.6 + 0.4 + 0.2 = 3
                ],
            },
        ],
        "comparison": [],
        "warnings": [],
        "errors": [],
        # live/summary.py plan_fields: the lowest level of the first speculative deployment
        "tau_online": 3.0,
        "cycle_ms": 30.0,  # tau x token_ms
        "depth": 4,
        "decode_ms": 15.0,
        "new_tokens": 101,
        "prefill_ms": 50.0,
    }


PROBE = {
    "kind": "eagle3kit.probe",
    "schema": 1,
    "drafter": "D",
    "target": "NEW",
    "depth": 3,
    "acceptance": {
        "target": {
            "acc": [0.7, 0.6, 0.5],
            "cond_acc": [0.7, 0.857, 0.833],
            "tau_walk": 1.9,
            "tau_every_position": 2.1,
        },
        "reference": None,
    },
    "tau_every_position": {"target": 2.1, "reference": None},
    "tau_online": None,
    "break_even": {"baseline_tps": 50.0, "cycle_ms": 40.0, "depth": 3},
    "verdict": "fine-tune",
    "reasons": [],
}


def _probe_live():
    bench = _live(spec_url="http://new")
    bench["deployments"].append(
        {
            "url": "http://old",
            "role": "speculative",
            "levels": [_level(1, [0.9, 0.8, 0.7, 0.4], 3.8, 8.0, 45, 100)],
        }
    )
    bench.update({"tau_online": 3.0, "cycle_ms": 30.0})
    return {
        "kind": "eagle3kit.probe-live",
        "schema": 1,
        "url": "http://new",
        "reference_url": "http://old",
        "tau_online": {"new": 3.0, "reference": 3.8},
        "retention": 2.0 / 2.8,
        "verdict": "fine-tune",
        "reasons": [],
        "bench": bench,
    }


def _file(tmp_path, doc, name="m.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


def _plan(*args):
    r = run_cli("plan", *args, "--json")
    assert r.code in (0, 1), r.err
    return json.loads(r.out)


SPEEDS = ("--baseline-tps", "80", "--cycle-ms", "25")


def test_eval_acceptance_file_prices_evals_tau(tmp_path):
    """The issue's case: eval's cumulative rates, read as conditional, priced a lower tau."""
    f = _file(tmp_path, EVAL_OFFLINE)
    doc = _plan(*SPEEDS, "--acceptance-file", f)
    assert abs(doc["tau"] - 2.5) < 1e-6  # eval's own tau
    assert doc["depth"] == 3
    assert doc["per_position_acceptance"] == pytest.approx([0.7, 0.5 / 0.7, 0.3 / 0.5])
    assert doc["throughput_tps"] == pytest.approx(2.5 / 0.025)  # 100 tok/s
    assert doc["speedup"] == pytest.approx(100 / 80)
    # at depth 2 the chain stops after the second draft: 1 + 0.7 + 0.5
    assert _plan(*SPEEDS, "--acceptance-file", f, "--depth", "2")["tau"] == pytest.approx(2.2)
    # the wrong reading, 1 + 0.7 + 0.7*0.5 + 0.7*0.5*0.3 = 2.155, is not what is priced
    assert abs(doc["tau"] - 2.155) > 0.3
    assert load_per_position(f) == pytest.approx((0.7, 0.5 / 0.7, 0.6))


def test_eval_from_online(tmp_path):
    f = _file(tmp_path, EVAL_ONLINE)
    doc = _plan("--from", f)
    assert abs(doc["tau"] - 2.5) < 1e-6
    assert doc["baseline_tps"] == pytest.approx(1000 / 12.5)  # 80
    assert doc["cycle_ms"] == pytest.approx(20.0)
    assert doc["throughput_tps"] == pytest.approx(2.5 / 0.020)  # 125
    # one request: 33 tokens, 8 ms prefill, then 32 / 2.5 cycles of 20 ms = 264 ms in all
    assert doc["request"]["tps"] == pytest.approx(1000 * 33 / 264)
    # options given win over the file, per group
    mine = _plan("--from", f, "--cycle-ms", "50")
    assert mine["throughput_tps"] == pytest.approx(2.5 / 0.050)
    assert _plan("--from", f, "--acceptance", "0.5")["tau"] == pytest.approx(1.875)


def test_bench_in_process(tmp_path):
    f = _file(tmp_path, BENCH)
    doc = _plan("--from", f)
    assert abs(doc["tau"] - 2.2) < 1e-6  # the chain's tau, not new/forwards 2.19
    assert doc["depth"] == 3
    assert doc["baseline_tps"] == pytest.approx(100.0)  # greedy's 10 ms step
    assert doc["throughput_tps"] == pytest.approx(2.2 / 0.020)  # 110
    assert doc["per_position_acceptance"] == pytest.approx([0.6, 0.4 / 0.6, 0.2 / 0.4])
    acc = _plan(*SPEEDS, "--acceptance-file", f)
    assert acc["tau"] == pytest.approx(2.2) and acc["throughput_tps"] == pytest.approx(88)


def test_bench_live(tmp_path):
    f = _file(tmp_path, _live())
    doc = _plan("--from", f)
    assert abs(doc["tau"] - 3.0) < 1e-6 and doc["depth"] == 4
    assert doc["baseline_tps"] == pytest.approx(1000 / 15)
    assert doc["throughput_tps"] == pytest.approx(3.0 / 0.030)  # 100
    # 101 tokens: 50 ms TTFT, then 100 / 3 cycles of 30 ms = 1000 ms
    assert doc["request"]["tps"] == pytest.approx(101 * 1000 / 1050)
    acc = _plan(*SPEEDS, "--acceptance-file", f)
    assert acc["per_position_acceptance"] == pytest.approx([0.8, 0.75, 0.4 / 0.6, 0.5])
    assert acc["tau"] == pytest.approx(3.0)


def test_bench_live_without_per_position_prices_its_tau(tmp_path):
    """SGLang without the histogram: no per-position rates; tau alone, at the file's depth."""
    f = _file(tmp_path, _live(pos=()))
    doc = _plan(*SPEEDS, "--acceptance-file", f)
    assert doc["tau"] == pytest.approx(3.0) and doc["depth"] == 4
    assert doc["per_position_acceptance"] is None
    # rates that do not give the file's tau (1 + 0.5 != 3) are not priced either
    g = _file(tmp_path, _live(pos=(0.5,)), "g.json")
    assert _plan(*SPEEDS, "--acceptance-file", g)["tau"] == pytest.approx(3.0)


def test_probe(tmp_path):
    f = _file(tmp_path, PROBE)
    r = run_cli("plan", "--from", f, "--json")
    assert r.code == 1, r.err  # 1.9 / 0.040 s = 47.5 tok/s < 50: below break-even
    doc = json.loads(r.out)
    assert abs(doc["tau"] - 1.9) < 1e-6  # the walked tau, not every-position 2.1
    assert doc["baseline_tps"] == pytest.approx(50.0) and doc["cycle_ms"] == pytest.approx(40)
    assert doc["throughput_tps"] == pytest.approx(47.5)
    assert doc["break_even_tau"] == pytest.approx(2.0)  # 50 tok/s x 0.040 s


def test_probe_live(tmp_path):
    f = _file(tmp_path, _probe_live())
    doc = _plan("--from", f)
    assert abs(doc["tau"] - 3.0) < 1e-6  # NEW's tau, not the reference's 3.8
    assert doc["throughput_tps"] == pytest.approx(100.0)
    assert doc["baseline_tps"] == pytest.approx(1000 / 15)
    acc = _plan(*SPEEDS, "--acceptance-file", f)
    assert acc["per_position_acceptance"] == pytest.approx([0.8, 0.75, 0.4 / 0.6, 0.5])


@pytest.mark.parametrize(
    "doc, option, expect",
    [
        ({"kind": "eagle3kit.compat", "schema": 1}, "--from", "found 'eagle3kit.compat'"),
        ({"kind": "eagle3kit.compat", "schema": 1}, "--acceptance-file", "kind: expected"),
        ({"kind": "vendor.bench", "accept_len": 2}, "--acceptance-file", "'vendor.bench'"),
        ([0.7, 0.5], "--from", "kind: expected 'eagle3kit.eval', 'eagle3kit.bench'"),
        ({"kind": "eagle3kit.eval", "schema": 1, "depth": 3}, "--from", "tau_walk"),
        ({**BENCH, "methods": BENCH["methods"][:1]}, "--from", "'chain' or 'tree'"),
        ({**EVAL_OFFLINE, "tau_walk": "2.5"}, "--from", "tau_walk: expected a number"),
        (
            {**EVAL_OFFLINE, "per_position_acceptance": [0.3, 0.5, 0.7], "tau_walk": 2.5},
            "--acceptance-file",
            "non-increasing",
        ),
        ({**_live(), "tau_online": None}, "--from", "the servers reported no acceptance"),
    ],
)
def test_bad_measurements(tmp_path, doc, option, expect):
    f = _file(tmp_path, doc)
    args = ("--from", f) if option == "--from" else (*SPEEDS, option, f)
    r = run_cli("plan", *args)
    lines = r.err.strip().splitlines()
    assert r.code == 2 and len(lines) == 1, r.err
    assert f in lines[0] and expect in lines[0], lines[0]


def test_acceptance_file_and_another_acceptance(tmp_path):
    f = _file(tmp_path, EVAL_OFFLINE)
    r = run_cli("plan", *SPEEDS, "--acceptance-file", f, "--accept-len", "2")
    assert r.code == 2 and "--acceptance-file and --accept-len" in r.err


def test_rates_short_of_the_depth_price_the_tau_at_the_depth(tmp_path):
    """Two positions reported for a depth-4 server: tau 1 + 0.8 + 0.6 = 2.4, priced at 4."""
    doc = {**_live(pos=(0.8, 0.6)), "tau_online": 2.4}
    doc["deployments"][1]["levels"][1]["acceptance"]["tau_online"] = 2.4
    d = _plan("--from", _file(tmp_path, doc))
    assert d["depth"] == 4 and d["tau"] == pytest.approx(2.4)
    assert d["per_position_acceptance"] is None
