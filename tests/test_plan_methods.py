"""`plan --methods`: the cycle model per method, its inputs, the winner per level, vLLM's
schedule. Expected numbers are written from the formulas of plan/methods.py's docstring
(cycle = passes * pass + verify(1 + drafted) + overhead; tau = 1 + sum P(a >= i)), by hand.
"""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.registry import launch_lines
from eagle3kit.plan import plan
from eagle3kit.plan.method_inputs import read_candidates, read_costs
from eagle3kit.plan.methods import (
    Candidate,
    LevelCosts,
    cycle_ms,
    plan_methods,
    vllm_schedule,
    vllm_schedule_config,
)

# verify(n): 10 ms at n = 1 (the plain step), 12 at 4, 20 at 8; one drafter pass 1 ms
L1 = LevelCosts(1, 10.0, ((4, 12.0), (8, 20.0)), {"eagle3": 1.0, "dflash": 3.0})
# at 8 sequences the batch is compute-bound: verify grows fast, plain much less
L8 = LevelCosts(8, 11.0, ((4, 30.0), (8, 60.0)), {"eagle3": 2.0, "dflash": 5.0})
PP = (0.8, 0.6, 0.4)  # cumulative P(a >= i)


def test_cycle_per_method():
    e3 = Candidate("eagle3", "eagle3", PP)
    df = Candidate("dflash", "dflash", PP)
    ng = Candidate("ngram", "ngram", PP, drafted=2.0)
    # eagle3 at k = 3: 3 passes + verify(4) = 3 + 12
    assert cycle_ms(e3, L1, 3) == pytest.approx(15.0)
    # k = 2: verify(3) lies between n = 1 (10) and n = 4 (12): 10 + 2 * 2/3
    assert cycle_ms(e3, L1, 2) == pytest.approx(2 + 10 + 4 / 3)
    # dflash: one pass whatever k: 3 + verify(4)
    assert cycle_ms(df, L1, 3) == pytest.approx(15.0)
    # ngram: no pass; sends 2 tokens on average: verify(3)
    assert cycle_ms(ng, L1, 3) == pytest.approx(10 + 4 / 3)
    # beyond the largest n: along the last segment (2 ms per token): verify(10) = 24
    assert cycle_ms(Candidate("d", "dflash", (0.9,) * 9), L1, 9) == pytest.approx(3 + 24)


def test_mtp_and_peagle_passes():
    lv = LevelCosts(1, 10.0, ((4, 12.0),), {"mtp": 1.5, "peagle": 4.0})
    assert cycle_ms(Candidate("m", "mtp", PP), lv, 3) == pytest.approx(3 * 1.5 + 12)
    assert cycle_ms(Candidate("p", "peagle", PP), lv, 3) == pytest.approx(4 + 12)


def test_missing_pass_time_is_named():
    with pytest.raises(Eagle3Error, match="pass time for 'peagle'"):
        cycle_ms(Candidate("peagle", "peagle", PP), L1, 2)


def test_tau_and_interval():
    c = Candidate("eagle3", "eagle3", (0.8, 0.6), cycles=100)
    assert c.tau(2) == pytest.approx(2.4)
    # E[a] = 1.4, E[a^2] = 1*0.8 + 3*0.6 = 2.6, var = 0.64, se = 0.08
    lo, hi = c.tau_interval(2)
    assert (lo, hi) == pytest.approx((2.4 - 1.96 * 0.08, 2.4 + 1.96 * 0.08))


def test_winner_per_level_and_schedule():
    e3 = Candidate("eagle3", "eagle3", PP, cycles=500)
    mp = plan_methods([e3], [L1, L8])
    # level 1: tau(3) = 2.8 over 15 ms = 186.7 tok/s > plain 100; k = 2: 2.4 / 13.33 = 180
    w1 = mp.winners[1]
    assert (w1.label, w1.depth) == ("eagle3", 3)
    assert w1.user_tps == pytest.approx(1000 * 2.8 / 15)
    assert w1.speedup == pytest.approx(2.8 / 15 * 10)
    assert w1.break_even_tau == pytest.approx(1.5)
    # level 8: k = 1: verify(2) = 11 + 19/3, + 2 = 19.33 ms for tau 1.8: 93.1 < plain 90.9? no:
    k1 = 1000 * 1.8 / (2 + 11 + 19 / 3)
    assert mp.winners[8].label == ("eagle3" if k1 > 1000 / 11 else "plain")
    assert mp.winners[8].total_tps == pytest.approx(8 * mp.winners[8].user_tps)
    sched = vllm_schedule(mp, "eagle3", 64)
    assert sched[0][:2] == (1, 7) and sched[0][2] == 3
    assert sched[-1][:2] == (8, 64)


def test_schedule_format_follows_vllm_rules():
    """vLLM (vllm/v1/spec_decode/dynamic/utils.py): ranges inclusive, sorted, not overlapping,
    the first starting at 1, K >= 0; equal neighbours merged."""
    slow = LevelCosts(16, 50.0, ((4, 400.0),), {"eagle3": 30.0})
    mp = plan_methods([Candidate("eagle3", "eagle3", PP)], [L1, L8, slow])
    sched = vllm_schedule(mp, "eagle3", 256)
    assert sched[0][0] == 1 and sched[-1] == (16, 256, 0)
    assert all(a[1] + 1 == b[0] for a, b in zip(sched, sched[1:], strict=False))
    cfg = vllm_schedule_config(mp, Candidate("eagle3", "eagle3", PP, draft="/d"), 256)
    assert cfg["method"] == "eagle3" and cfg["model"] == "/d"
    assert cfg["num_speculative_tokens"] == max(k for *_, k in sched)
    assert cfg["num_speculative_tokens_per_batch_size"] == [list(e) for e in sched]
    with pytest.raises(Eagle3Error, match="concurrency 1"):
        vllm_schedule(plan_methods([Candidate("e", "eagle3", PP)], [L8]), "e", 64)


def test_launch_lines():
    lines = launch_lines("dflash", 7, "Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16")
    assert '"method": "dflash"' in lines["vllm"] and '"num_speculative_tokens": 7' in lines["vllm"]
    assert "--speculative-algorithm DFLASH" in lines["sglang"]
    assert launch_lines("peagle", 4, "t", "d")["sglang"] is None  # SGLang does not serve it
    assert '"parallel_drafting": true' in launch_lines("peagle", 4, "t", "d")["vllm"]


def test_classic_plan_method_drafting_cost():
    """`plan --method dflash`: one drafter pass per cycle, whatever the depth."""
    kw = dict(baseline_tps=100, draft_ms=2, verify_ms={4: 10.0, 8: 14.0}, acceptance=0.7)
    e3 = plan(depth=3, **kw)
    df = plan(depth=3, method="dflash", **kw)
    ng = plan(depth=3, method="ngram", **kw)
    assert e3.cycle_ms == pytest.approx(3 * 2 + 10)
    assert df.cycle_ms == pytest.approx(2 + 10)
    assert ng.cycle_ms == pytest.approx(10)
    assert df.to_json()["method"] == "dflash"
    # break-even tau = baseline * cycle_s
    assert df.break_even_tau == pytest.approx(100 * 0.012)


def _costs_doc(tmp_path, levels):
    p = tmp_path / "bench.json"
    p.write_text(json.dumps({"costs": {"levels": levels, "prefill_ms": 5, "new_tokens": 33}}))
    return p


def _eval_doc(tmp_path, name, method, pp, **extra):
    p = tmp_path / name
    doc = {
        "kind": "eagle3kit.eval",
        "schema": 1,
        "method": method,
        "depth": len(pp or []),
        "per_position_acceptance": pp,
        "cycles": 200,
        **extra,
    }
    p.write_text(json.dumps(doc))
    return p


LEVELS = [
    {
        "concurrency": 1,
        "plain_ms": 10,
        "verify_ms": {"4": 12, "8": 20},
        "pass_ms": {"eagle3": 1, "dflash": 1.5},
    },
    {
        "concurrency": 8,
        "plain_ms": 11,
        "verify_ms": {"4": 30, "8": 60},
        "pass_ms": {"eagle3": 2, "dflash": 5},
    },
]


def test_inputs_read(tmp_path):
    levels, prefill, new = read_costs(_costs_doc(tmp_path, LEVELS))
    assert [lv.concurrency for lv in levels] == [1, 8]
    assert levels[0].verify(8) == 20 and (prefill, new) == (5, 33)
    (c,) = read_candidates(_eval_doc(tmp_path, "df.json", "dflash", [0.9, 0.7]))
    assert (c.method, c.per_position, c.cycles) == ("dflash", (0.9, 0.7), 200)
    (old,) = read_candidates(_eval_doc(tmp_path, "old.json", None, [0.5]))
    assert old.method == "eagle3"  # EAGLE-3 evals from before the field


@pytest.mark.parametrize(
    ("levels", "match"),
    [
        ([{"concurrency": 0, "plain_ms": 1}], r"levels\[0\]\.concurrency: expected an integer"),
        ([{"concurrency": 1, "plain_ms": -1}], r"levels\[0\]\.plain_ms: expected a number > 0"),
        ([{"concurrency": 1, "plain_ms": 1, "verify_ms": {"x": 1}}], "token counts"),
        ([{"concurrency": 1, "plain_ms": 1}, {"concurrency": 1, "plain_ms": 2}], "once"),
    ],
)
def test_bad_costs_named(tmp_path, levels, match):
    with pytest.raises(Eagle3Error, match=match) as e:
        read_costs(_costs_doc(tmp_path, levels))
    assert "bench.json" in str(e.value)


def test_missing_per_position_is_said(tmp_path):
    with pytest.raises(Eagle3Error, match="per_position_acceptance: expected per-position"):
        read_candidates(_eval_doc(tmp_path, "x.json", "mtp", None))
    with pytest.raises(Eagle3Error, match="method: expected one of"):
        read_candidates(_eval_doc(tmp_path, "y.json", "medusa", [0.5]))


def test_cli_methods(tmp_path):
    costs = _costs_doc(tmp_path, LEVELS)
    e3 = _eval_doc(tmp_path, "e3.json", "eagle3", [0.8, 0.6, 0.4])
    df = _eval_doc(tmp_path, "df.json", "dflash", [0.8, 0.6, 0.4, 0.3])
    sched = tmp_path / "sched.json"
    r = run_cli(
        "plan",
        "--methods",
        "eagle3,dflash",
        "--costs",
        costs,
        "--accept",
        e3,
        "--accept",
        f"z-lab={df}",
        "--vllm-schedule",
        sched,
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["kind"] == "eagle3kit.plan" and doc["mode"] == "methods"
    lv1 = doc["levels"][0]
    # dflash: k = 3 costs one pass 1.5 + verify(4) 12 = 13.5 ms for tau 2.8 (207.4 tok/s);
    # k = 4 costs 1.5 + verify(5) 14 = 15.5 ms for 3.1 (200); eagle3's best: 15 ms, 2.8 (186.7)
    assert lv1["winner"] == "z-lab" and lv1["winner_depth"] == 3
    got = next(m for m in lv1["methods"] if m["label"] == "z-lab")
    assert got["tokens_per_s_per_user"] == pytest.approx(1000 * 2.8 / 13.5, rel=1e-3)
    assert '"method": "dflash"' in doc["launch"]["1"]["vllm"]
    assert json.loads(sched.read_text())["num_speculative_tokens_per_batch_size"][0][0] == 1
    assert doc["notes"] == []  # both methods asked for were given


def test_cli_plain_wins_exit_1(tmp_path):
    costs = _costs_doc(tmp_path, LEVELS[1:])
    weak = _eval_doc(tmp_path, "w.json", "eagle3", [0.1, 0.0])
    r = run_cli("plan", "--methods", "eagle3", "--costs", costs, "--accept", weak)
    assert r.code == 1
    r = run_cli(
        "plan",
        "--methods",
        "eagle3",
        "--costs",
        costs,
        "--accept",
        weak,
        "--vllm-schedule",
        tmp_path / "s.json",
    )
    assert r.code == 2 and "concurrency 1" in r.err
    assert not (tmp_path / "s.json").exists()


def test_plan_from_a_dflash_eval_prices_one_pass(tmp_path):
    """`plan --from` a DFlash eval: the file's "method" sets the drafting cost (one pass)."""
    ev = _eval_doc(tmp_path, "df.json", "dflash", [0.8, 0.6, 0.4], tau_walk=2.8)
    args = ["--decode-ms", "10", "--draft-ms", "3", "--verify-ms", "4:12", "--json"]
    r = run_cli("plan", "--from", ev, *args)
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["method"] == "dflash" and doc["depth"] == 3
    assert doc["cycle_ms"] == pytest.approx(3 + 12)  # one pass, not 3 x 3
    assert doc["throughput_tps"] == pytest.approx(2.8 / 0.015, rel=1e-4)
