"""`eagle3kit plan`: the cycle model, via the Python API and the CLI.

Expected numbers are written from the formulas (tau = 1 + sum_i prod_{j<=i} p_j,
throughput = tau / cycle_s, break-even tau = baseline_tps * cycle_s), not copied from output.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from conftest import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from eagle3kit.cli.plan import expand_list_option
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.plan import (
    accept_len,
    accept_len_const,
    make_cycle,
    plan,
    rate_for_accept_len,
)

SEED = ["--baseline-tps", "82", "--cycle-ms", "30", "--acceptance", "0.64", "--depth", "2"]


# --- the seed: Kimi-K2.5, 82 tok/s, 30 ms cycle, 64% per step, depth 2 -------------------


def test_seed_numbers_api():
    r = plan(baseline_tps=82, cycle_ms=30, acceptance=0.64, depth=2, target_tps=[150, 200])
    tau = 1 + 0.64 + 0.64**2  # 2.0496
    assert r.tau == pytest.approx(tau)
    assert r.throughput_tps == pytest.approx(tau / 0.030)  # about 68 tok/s
    assert r.speedup == pytest.approx(tau / 0.030 / 82)
    assert r.break_even_tau == pytest.approx(82 * 0.030)  # 2.46
    # break-even at depth 2: 1 + p + p^2 = 2.46 -> p = (-1 + sqrt(1 + 4 * 1.46)) / 2
    assert r.break_even_per_step_acceptance_at_depth == pytest.approx((-1 + math.sqrt(6.84)) / 2)
    assert r.break_even_per_step_acceptance == pytest.approx(1 - 1 / 2.46)
    assert r.ideal_tps == pytest.approx(3 / 0.030)
    assert r.best_depth is None  # cycle given whole: depth costs nothing
    assert not r.pays
    t150, t200 = r.targets
    assert t150.tau == pytest.approx(4.5)
    assert t150.per_step_acceptance == pytest.approx(1 - 1 / 4.5)  # 0.778
    assert t200.tau == pytest.approx(6.0)
    assert t200.per_step_acceptance == pytest.approx(1 - 1 / 6.0)  # 0.833
    for t in (t150, t200):  # depth 2 caps tau at 3
        assert t.per_step_acceptance_at_depth is None
        assert "unreachable at depth 2" in t.note


def _seed_json(*target_args: str) -> tuple[int, dict]:
    r = run_cli("plan", *SEED, *target_args, "--json")
    assert r.err == ""
    return r.code, json.loads(r.out)


def test_seed_numbers_cli_json():
    code, doc = _seed_json("--target-tps", "150", "200")
    assert code == 1  # the check ran and speculation is below break-even
    for key in (
        "baseline_tps",
        "cycle_ms",
        "tau",
        "throughput_tps",
        "speedup",
        "break_even_tau",
        "best_depth",
        "targets",
    ):
        assert key in doc
    assert doc["baseline_tps"] == 82
    assert doc["cycle_ms"] == 30
    assert doc["tau"] == pytest.approx(2.0496, abs=1e-6)
    assert doc["throughput_tps"] == pytest.approx(2.0496 / 0.030, abs=1e-5)
    assert doc["break_even_tau"] == pytest.approx(2.46, abs=1e-6)
    assert doc["best_depth"] is None
    assert doc["pays"] is False
    t150, t200 = doc["targets"]
    assert set(t150) >= {"tps", "tau", "per_step_acceptance", "per_step_acceptance_at_depth"}
    assert (t150["tps"], t150["tau"]) == (150, pytest.approx(4.5))
    assert t150["per_step_acceptance"] == pytest.approx(7 / 9, abs=1e-6)
    assert (t200["tps"], t200["tau"]) == (200, pytest.approx(6.0))
    assert t200["per_step_acceptance"] == pytest.approx(5 / 6, abs=1e-6)
    assert t150["per_step_acceptance_at_depth"] is None
    assert t200["per_step_acceptance_at_depth"] is None
    assert "unreachable at depth 2" in t150["note"]


def test_target_list_forms_agree():
    space = _seed_json("--target-tps", "150", "200")
    repeated = _seed_json("--target-tps", "150", "--target-tps", "200")
    comma = _seed_json("--target-tps", "150,200")
    equals = _seed_json("--target-tps=150", "200")
    assert space == repeated == comma == equals


def test_expand_list_option():
    assert expand_list_option(["--target-tps", "150", "200", "--json"]) == [
        "--target-tps",
        "150",
        "--target-tps",
        "200",
        "--json",
    ]
    # numbers after another option are that option's value, untouched
    assert expand_list_option(["--depth", "2", "--target-tps", "1", "--max-depth", "4"]) == [
        "--depth",
        "2",
        "--target-tps",
        "1",
        "--max-depth",
        "4",
    ]
    assert expand_list_option(["--target-tps"]) == ["--target-tps"]


def test_seed_table_output():
    r = run_cli("plan", *SEED, "--target-tps", "150", "200")
    assert r.code == 1
    assert "unreachable at depth 2" in r.out
    assert "below break-even" in r.out
    assert "2.46" in r.out


def test_aq_medai_070_deep_chain():
    r = run_cli(
        "plan",
        "--baseline-tps",
        "82",
        "--cycle-ms",
        "30",
        "--acceptance",
        "0.70",
        "--depth",
        "40",
        "--json",
    )
    doc = json.loads(r.out)
    assert doc["tau"] == pytest.approx(1 / (1 - 0.70), abs=1e-4)  # 3.33
    assert 3.2 <= doc["tau"] <= 3.5  # AQ-MedAI's measured range
    assert r.code == 0  # 3.33 / 0.030 = 111 tok/s > 82: pays


def test_pays_exit_0():
    r = run_cli(
        "plan", "--baseline-tps", "82", "--cycle-ms", "30", "--acceptance", "0.8", "--depth", "5"
    )
    assert r.code == 0, r.err
    assert "pays" in r.out


# --- composed cycles and best depth ---------------------------------------------------------


def test_composed_fit_and_best_depth():
    p, draft, a, b = 0.8, 3.0, 20.0, 0.5
    r = plan(decode_ms=12, draft_ms=draft, verify_fit=(a, b), acceptance=p, depth=3, max_depth=12)
    assert r.baseline_tps == pytest.approx(1000 / 12)
    assert r.cycle_ms == pytest.approx(3 * draft + a + b * 4)
    tps = {
        k: sum(p**i for i in range(k + 1)) / ((k * draft + a + b * (k + 1)) / 1000)
        for k in range(1, 13)
    }
    best = max(tps, key=tps.get)
    assert r.best_depth == best
    assert r.best_depth_tps == pytest.approx(tps[best])
    assert [d.depth for d in r.depths] == list(range(1, 13))


def test_deeper_can_be_slower():
    # steep draft cost: tau grows with depth but throughput falls (what engine users report)
    r = plan(baseline_tps=50, draft_ms=10, verify_fit=(20, 0), acceptance=0.5, depth=1)
    assert r.best_depth == 1
    taus = [d.tau for d in r.depths]
    speeds = [d.tps for d in r.depths]
    assert taus == sorted(taus) and speeds == sorted(speeds, reverse=True)


def test_verify_points_interpolate_and_extrapolate():
    c = make_cycle(draft_ms=1, verify_ms={2: 20.0, 4: 24.0})
    assert c.verify.ms(3) == pytest.approx(22.0)  # halfway between 20 and 24
    assert c.verify.ms(6) == pytest.approx(28.0)  # last slope 2 ms/token
    assert c.ms(2) == pytest.approx(2 * 1 + 22.0)
    with pytest.raises(Eagle3Error, match="--verify-ms"):
        c.verify.ms(1)
    flat = make_cycle(draft_ms=1, verify_ms=[(2, 20.0)])
    assert flat.verify.ms(9) == 20.0  # one point: flat beyond
    falling = make_cycle(draft_ms=1, verify_ms={2: 20.0, 3: 19.0})
    assert falling.verify.ms(10) == 19.0  # a falling last segment is clamped flat


def test_verify_points_skip_unpriced_depths_in_search():
    r = plan(
        baseline_tps=50,
        draft_ms=1,
        verify_ms={3: 20.0, 5: 22.0},
        acceptance=0.7,
        depth=2,
        max_depth=4,
    )
    assert [d.depth for d in r.depths] == [2, 3, 4]  # depth 1 verifies 2 tokens: not measured


def test_per_position_file(tmp_path):
    f = tmp_path / "acc.json"
    f.write_text(json.dumps({"per_position_acceptance": [0.8, 0.6, 0.5], "other": 1}))
    tau3 = 1 + 0.8 + 0.8 * 0.6 + 0.8 * 0.6 * 0.5
    r = run_cli(
        "plan", "--baseline-tps", "82", "--cycle-ms", "30", "--acceptance-file", f, "--json"
    )
    doc = json.loads(r.out)
    assert doc["depth"] == 3  # defaults to the file's length
    assert doc["tau"] == pytest.approx(tau3, abs=1e-6)
    bare = tmp_path / "bare.json"
    bare.write_text("[0.8, 0.6, 0.5]")
    r2 = run_cli(
        "plan",
        "--baseline-tps",
        "82",
        "--cycle-ms",
        "30",
        "--acceptance-file",
        bare,
        "--depth",
        "2",
        "--json",
    )
    assert json.loads(r2.out)["tau"] == pytest.approx(1 + 0.8 + 0.8 * 0.6, abs=1e-6)


def test_accept_len_given():
    r = plan(baseline_tps=82, cycle_ms=30, tau=2.05, depth=2)
    assert r.tau == pytest.approx(2.05)
    p = r.per_step_acceptance  # 1 + p + p^2 = 2.05
    assert p == pytest.approx((-1 + math.sqrt(1 + 4 * 1.05)) / 2)


def test_request_end_to_end():
    """128 tokens: the prefill (40 ms) emits 1, then 127 / 3.5 cycles of 10 ms."""
    r = plan(baseline_tps=150, cycle_ms=10, tau=3.5, depth=4, new_tokens=128, prefill_ms=40)
    assert r.request.tps == pytest.approx(128 / (0.040 + 127 / 3.5 * 0.010))
    assert r.throughput_tps == pytest.approx(350)  # the decode phase alone
    assert plan(baseline_tps=150, cycle_ms=10, tau=3.5, depth=4).request is None
    with pytest.raises(Eagle3Error, match="--prefill-ms"):
        plan(baseline_tps=150, cycle_ms=10, tau=3.5, new_tokens=9, prefill_ms=-1)
    with pytest.raises(Eagle3Error, match="--prefill-ms: expected it with --new-tokens"):
        plan(baseline_tps=150, cycle_ms=10, tau=3.5, new_tokens=9)
    with pytest.raises(Eagle3Error, match="--new-tokens: expected it with --prefill-ms"):
        plan(baseline_tps=150, cycle_ms=10, tau=3.5, prefill_ms=9)


def test_plot_written(tmp_path):
    import os

    png = tmp_path / "plan.png"
    old = os.umask(0o027)
    try:
        r = run_cli("plan", *SEED, "--target-tps", "150", "200", "--plot", png)
    finally:
        os.umask(old)
    assert r.code == 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.png"]  # no temp file left
    assert png.stat().st_mode & 0o777 == 0o640  # the umask's mode, not mkstemp's 0600


def test_plan_module_is_light():
    code = (
        "import sys, eagle3kit.plan; "
        "assert 'torch' not in sys.modules; assert 'matplotlib' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- properties --------------------------------------------------------------------------

rates = st.floats(min_value=0.0, max_value=0.999, allow_nan=False)
depths = st.integers(min_value=1, max_value=40)


@settings(max_examples=200, deadline=None)
@given(rates, rates, depths)
def test_tau_increases_with_p(p1, p2, k):
    lo, hi = sorted((p1, p2))
    assert accept_len_const(lo, k) <= accept_len_const(hi, k)
    if hi - lo > 1e-9:  # strictly, where float rounding can tell them apart
        assert accept_len_const(lo, k) < accept_len_const(hi, k)


@settings(max_examples=200, deadline=None)
@given(rates, depths)
def test_tau_increases_with_k_and_is_bounded(p, k):
    t = accept_len_const(p, k)
    assert 1.0 <= t <= k + 1
    assert accept_len_const(p, k + 1) >= t
    if p ** (k + 1) > 1e-12:  # the extra step adds p^(k+1) > 0
        assert accept_len_const(p, k + 1) > t
    assert t <= accept_len_const(p, math.inf) + 1e-9


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1.0, allow_nan=False), min_size=1, max_size=12))
def test_per_position_tau_bounded(ps):
    t = accept_len(ps)
    assert 1.0 <= t <= len(ps) + 1 + 1e-12
    assert accept_len(ps[:-1]) <= t


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.0, max_value=0.99, allow_nan=False), depths)
def test_inverse_round_trips_at_depth(p, k):
    q = rate_for_accept_len(accept_len_const(p, k), k)
    assert q is not None
    assert accept_len_const(q, k) == pytest.approx(accept_len_const(p, k), rel=1e-9)
    assert q == pytest.approx(p, abs=1e-6)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.0, max_value=0.999, allow_nan=False))
def test_inverse_round_trips_at_infinity(p):
    q = rate_for_accept_len(accept_len_const(p, math.inf))
    assert q == pytest.approx(p, abs=1e-9)


@given(depths, st.floats(min_value=1.001, max_value=10))
def test_inverse_unreachable_beyond_k_plus_1(k, excess):
    assert rate_for_accept_len((k + 1) * excess, k) is None
    assert rate_for_accept_len(0.5, k) == 0.0  # tau <= 1: any acceptance will do


# --- bad input: exit 2, one line on stderr naming the option, no traceback ------------------

BASE = ["--baseline-tps", "82", "--cycle-ms", "30"]


@pytest.mark.parametrize(
    "args, named",
    [
        (["--baseline-tps", "0", "--cycle-ms", "30", "--acceptance", "0.6"], "--baseline-tps"),
        (["--baseline-tps", "-82", "--cycle-ms", "30", "--acceptance", "0.6"], "--baseline-tps"),
        (["--decode-ms", "0", "--cycle-ms", "30", "--acceptance", "0.6"], "--decode-ms"),
        (["--baseline-tps", "82", "--cycle-ms", "0", "--acceptance", "0.6"], "--cycle-ms"),
        (["--baseline-tps", "82", "--cycle-ms", "-30", "--acceptance", "0.6"], "--cycle-ms"),
        (
            [
                "--baseline-tps",
                "82",
                "--draft-ms",
                "-1",
                "--verify-fit",
                "20,1",
                "--acceptance",
                "0.6",
            ],
            "--draft-ms",
        ),
        (
            [
                "--baseline-tps",
                "82",
                "--draft-ms",
                "2",
                "--verify-ms",
                "4:0",
                "--acceptance",
                "0.6",
            ],
            "--verify-ms",
        ),
        (
            [
                "--baseline-tps",
                "82",
                "--draft-ms",
                "2",
                "--verify-ms",
                "four",
                "--acceptance",
                "0.6",
            ],
            "--verify-ms",
        ),
        (
            [
                "--baseline-tps",
                "82",
                "--draft-ms",
                "2",
                "--verify-fit",
                "20",
                "--acceptance",
                "0.6",
            ],
            "--verify-fit",
        ),
        (["--baseline-tps", "82", "--draft-ms", "2", "--acceptance", "0.6"], "--draft-ms"),
        ([*BASE, "--acceptance", "1"], "--acceptance"),
        ([*BASE, "--acceptance", "1.5"], "--acceptance"),
        ([*BASE, "--acceptance", "-0.1"], "--acceptance"),
        ([*BASE, "--accept-len", "0.5"], "--accept-len"),
        ([*BASE, "--accept-len", "4", "--depth", "2"], "--accept-len"),
        ([*BASE, "--acceptance", "0.6", "--depth", "0"], "--depth"),
        ([*BASE, "--acceptance", "0.6", "--max-depth", "0"], "--max-depth"),
        ([*BASE, "--acceptance", "0.6", "--target-tps", "50"], "--target-tps"),
        ([*BASE, "--acceptance", "0.6", "--target-tps", "150", "82"], "--target-tps"),
        ([*BASE, "--acceptance", "0.6", "--target-tps", "0"], "--target-tps"),
        (
            [
                "--baseline-tps",
                "82",
                "--decode-ms",
                "12",
                "--cycle-ms",
                "30",
                "--acceptance",
                "0.6",
            ],
            "--baseline-tps",
        ),
        (["--cycle-ms", "30", "--acceptance", "0.6"], "--baseline-tps"),
        ([*BASE, "--draft-ms", "2", "--verify-fit", "20,1", "--acceptance", "0.6"], "--cycle-ms"),
        (["--baseline-tps", "82", "--acceptance", "0.6"], "--cycle-ms"),
        ([*BASE, "--acceptance", "0.6", "--accept-len", "2"], "--acceptance"),
        (BASE, "--acceptance"),
    ],
)
def test_bad_input(args, named):
    r = run_cli("plan", *args)
    assert r.code == 2, (r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert named in lines[0]
    assert "Traceback" not in r.err
    assert r.out == ""


def test_target_below_baseline_says_no_speculation_needed():
    r = run_cli("plan", *BASE, "--acceptance", "0.6", "--target-tps", "80")
    assert r.code == 2
    assert "needs no speculation: the baseline already gives 82 tok/s" in r.err


@pytest.mark.parametrize(
    "content, expect",
    [
        (None, "no such file"),
        ("{not json", "invalid JSON"),
        ('{"rates": [0.5]}', "per_position_acceptance"),
        ('"0.5"', "expected"),
        ("[]", "non-empty"),
        ("[0.5, 1.5]", "[1]"),
        ('{"per_position_acceptance": [0.5, true]}', "[1]"),
    ],
)
def test_bad_acceptance_file(tmp_path, content, expect):
    f = tmp_path / "acc.json"
    if content is not None:
        f.write_text(content)
    r = run_cli("plan", *BASE, "--acceptance-file", f)
    assert r.code == 2
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and str(f) in lines[0] and expect in lines[0], r.err
    assert "Traceback" not in r.err


def test_depth_beyond_file(tmp_path):
    f = tmp_path / "acc.json"
    f.write_text("[0.7, 0.6]")
    r = run_cli("plan", *BASE, "--acceptance-file", f, "--depth", "3")
    assert r.code == 2 and "--depth" in r.err
