"""`plan` by context length on hand-made measurements: every figure worked out by hand below."""

from __future__ import annotations

import json

import pytest

from eagle3kit.core.errors import Eagle3Error

# (length, plain_ms, verify_ms of 4 tokens, one drafter pass, P(a >= i), plain prefill,
#  speculative prefill, new tokens)
POINTS = [
    (128, 10.0, 12.0, 1.0, [0.8, 0.6, 0.4], 18.0, 20.0, 33.0),
    (512, 12.0, 18.0, 2.0, [0.5, 0.2, 0.1], 30.0, 36.0, 33.0),
]


def _entry(length, plain, v4, one, pp, pre, spre, n):
    chain = {
        "name": "chain",
        "method": "eagle3",
        "label": "eagle3",
        "depth": 3,
        "tau_online": 1 + sum(pp),
        "per_position_acceptance": pp,
        "cycles": 100,
        "drafted_per_cycle": 3,
        "prefill_ms": spre,
        "cycle_ms": 3 * one + v4,
        "tokens_per_s": {"median": 1.0},  # not read by the plan: its costs are
        "speedup": 1.0,
    }
    level = {
        "concurrency": 1,
        "plain_ms": plain,
        "verify_ms": {"4": v4},
        "pass_ms": {"eagle3": one},
        "overhead_ms": {"eagle3": 0.0},
    }
    return {
        "context_length": length,
        "decode_ms": plain,
        "methods": [{"name": "greedy", "tokens_per_s": {"median": 1.0}}, chain],
        "costs": {"levels": [level], "prefill_ms": pre, "new_tokens": n},
    }


def bench_doc(points=POINTS) -> dict:
    entries = [_entry(*p) for p in points]
    return {
        "kind": "eagle3kit.bench",
        "schema": 1,
        "decode_ms": 11.0,
        "methods": [entries[0]["methods"][0], {**entries[0]["methods"][1]}],
        "method": "eagle3",
        "lengths": [p[0] for p in points],
        "by_length": entries,
    }


def offline_eval(buckets: dict[int, list[float]]) -> dict:
    """An offline `eval --by-length` document with these buckets' P(a >= i)."""
    pp0 = next(iter(buckets.values()))
    return {
        "kind": "eagle3kit.eval",
        "schema": 1,
        "mode": "offline",
        "method": "eagle3",
        "depth": 3,
        "tau_walk": 1 + sum(pp0),
        "per_position_acceptance": pp0,
        "by_length": [
            {
                "context_length": n,
                "tau_walk": 1 + sum(pp),
                "per_position_acceptance": pp,
                "cycles": 50,
            }
            for n, pp in buckets.items()
        ],
    }


def _write(tmp_path, name, doc):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def _plan(path, acceptance=None, depth=None):
    from eagle3kit.plan.by_length import plan_by_length, read_lengths

    acc = read_lengths(acceptance) if acceptance else None
    return plan_by_length(read_lengths(path), acc, depth=depth).to_json()


def test_each_length_priced_with_its_own_costs(tmp_path):
    bl = _plan(_write(tmp_path, "b.json", bench_doc()))
    a, b = bl["by_length"]
    # 128: cycle 3 x 1 + 12 = 15 ms, tau 2.8, break-even 15 / 10 = 1.5
    assert a["cycle_ms"] == pytest.approx(15.0) and a["tau"] == pytest.approx(2.8)
    assert a["break_even_tau"] == pytest.approx(1.5) and a["pays"] is True
    assert a["tokens_per_s"] == pytest.approx(2800 / 15) and a["speedup"] == pytest.approx(28 / 15)
    # one request: 33 tokens, 20 ms prefill + 32 / 2.8 cycles; plain 18 ms + 32 steps
    assert a["request_tokens_per_s"] == pytest.approx(33000 / (20 + 32 / 2.8 * 15))
    assert a["baseline_request_tokens_per_s"] == pytest.approx(33000 / (18 + 32 * 10))
    # 512: cycle 3 x 2 + 18 = 24 ms, tau 1.8 < break-even 2.0
    assert b["cycle_ms"] == pytest.approx(24.0) and b["pays"] is False
    # the margins 1.3 and -0.2 cross at 128 + 384 x 1.3 / 1.5 = 460.8
    up = bl["pays_up_to"]
    assert up["context_length"] == 460 and up["measured_up_to"] == 512
    assert up["answer"].startswith("pays up to 460 tokens of context at concurrency 1")
    curve = bl["break_even_curve"]
    assert [c["tau_needed"] for c in curve] == pytest.approx([1.5, 2.0])


def test_a_depth_below_the_measured_one_reprices_tau_and_cycle(tmp_path):
    bl = _plan(_write(tmp_path, "b.json", bench_doc()), depth=2)
    a = bl["by_length"][0]
    # depth 2: tau 1 + 0.8 + 0.6, cycle 2 x 1 + verify(3): the verify points hold 4 (and the
    # plain step as 1): 10 + (12 - 10) x 2 / 3
    assert a["tau"] == pytest.approx(2.4)
    assert a["cycle_ms"] == pytest.approx(2 + 10 + 2 * 2 / 3)


def test_acceptance_of_another_file_between_measured_lengths(tmp_path):
    costs = _write(tmp_path, "b.json", bench_doc())
    acc = _write(tmp_path, "e.json", offline_eval({320: [0.7, 0.4, 0.2]}))
    (p,) = _plan(costs, acc)["by_length"]
    # 320 is halfway: plain 11, verify 15, pass 1.5 -> cycle 4.5 + 15 = 19.5; tau 2.3
    assert p["context_length"] == 320
    assert p["plain_ms"] == pytest.approx(11.0) and p["cycle_ms"] == pytest.approx(19.5)
    assert p["tau"] == pytest.approx(2.3)
    assert p["break_even_tau"] == pytest.approx(19.5 / 11)
    far = _write(tmp_path, "far.json", offline_eval({1024: [0.7, 0.4, 0.2]}))
    with pytest.raises(Eagle3Error, match=r"around context length 1024, found lengths 128\.\.512"):
        _plan(costs, far)


def test_pays_everywhere_and_nowhere(tmp_path):
    good = [(n, 10.0, 12.0, 1.0, [0.9, 0.8, 0.7], 1.0, 1.0, 9.0) for n in (128, 1024)]
    bl = _plan(_write(tmp_path, "g.json", bench_doc(good)))
    assert bl["pays_up_to"]["context_length"] == 1024
    assert "every measured length" in bl["pays_up_to"]["answer"]
    bad = [(n, 10.0, 30.0, 5.0, [0.1, 0.0, 0.0], 1.0, 1.0, 9.0) for n in (128, 1024)]
    bl = _plan(_write(tmp_path, "n.json", bench_doc(bad)))
    assert bl["pays_up_to"]["context_length"] is None
    assert bl["pays_up_to"]["answer"].startswith("does not pay at 128 tokens")


def test_plan_from_keeps_the_plan_and_adds_by_length(cli, tmp_path):
    path = _write(tmp_path, "b.json", bench_doc())
    r = cli("plan", "--from", str(path), "--json")
    assert r.code in (0, 1), r.err
    doc = json.loads(r.out)
    assert doc["kind"] == "eagle3kit.plan" and "break_even_tau" in doc  # the plan as before
    assert [p["context_length"] for p in doc["by_length"]] == [128, 512]
    assert doc["pays_up_to"]["context_length"] == 460
    assert doc["by_length_settings"]["concurrency"] == 1
    text = cli("plan", "--from", str(path))
    assert "pays up to 460 tokens of context at concurrency 1" in text.out
    r = cli("plan", "--from", str(path), "--concurrency", "4", "--json")
    assert r.code == 2 and "expected concurrency 4" in r.err


def test_plot_by_length(cli, tmp_path):
    path = _write(tmp_path, "b.json", bench_doc())
    png = tmp_path / "plan.png"
    r = cli("plan", "--from", str(path), "--plot", str(png), "--json")
    assert r.code in (0, 1), r.err
    out = tmp_path / "plan-by-length.png"
    assert json.loads(r.out)["plot_by_length"] == str(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_by_context_length(cli, tmp_path):
    """The report prices a bench's buckets as plan does, and shows a probe's curve."""
    runs = tmp_path / "runs"
    runs.mkdir()
    _write(runs, "bench.json", bench_doc())
    probe = {
        "kind": "eagle3kit.probe",
        "schema": 1,
        "drafter": "d",
        "target": "new",
        "reference": "old",
        "similarity": [],
        "verdict": "fine-tune",
        "reasons": [],
        "by_length": [
            {"context_length": 128, "tau": {"new": 1.5, "reference": 2.5}},
            {"context_length": 1024, "tau": {"new": 1.2, "reference": 2.4}},
        ],
    }
    _write(runs, "probe.json", probe)
    r = cli("report", str(runs), "-o", str(tmp_path / "out"), "--json")
    assert r.code == 0, r.err
    md = (tmp_path / "out" / "report.md").read_text()
    section = md[md.index("## By context length") :]
    assert "| 128 | 2.8 | 1.5 | 15 | 10 | 1.867 |" in section  # the hand-worked bucket
    assert "pays up to 460 tokens of context" not in section  # a bench carries no answer
    assert "new | 128: 1.500, 1024: 1.200" in section
    assert "reference | 128: 2.500, 1024: 2.400" in section
    figs = json.loads(r.out)["figures"]
    assert sum(f.startswith("by_length_") for f in figs) == 2


def test_a_file_without_costs_per_length_plans_as_before(cli, tmp_path):
    """A probe's curve has no costs: plan --from it is the whole-file plan, no by_length."""
    probe = {
        "kind": "eagle3kit.probe",
        "schema": 1,
        "depth": 3,
        "acceptance": {"target": {"tau_walk": 2.0}},
        "break_even": {"baseline_tps": 100.0, "cycle_ms": 15.0},
        "by_length": [{"context_length": 128, "tau": {"new": 1.5, "reference": 2.5}}],
    }
    path = _write(tmp_path, "probe.json", probe)
    r = cli("plan", "--from", str(path), "--json")
    assert r.code in (0, 1), r.err
    doc = json.loads(r.out)
    assert doc["tau"] == pytest.approx(2.0) and "by_length" not in doc
