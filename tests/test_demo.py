"""`eagle3kit demo --quick` replays the whole story end to end, offline, on the tiny zoo."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli


def _check_story(out, r) -> None:
    """What a finished `demo --quick -o OUT --json` leaves: the seed's arithmetic, every
    step's artefacts, the headline rows and the report."""
    doc = json.loads(r.out)
    steps = {s["step"]: s["result"] for s in doc["steps"]}
    # prologue: the seed's arithmetic
    p = steps["plan"]
    assert abs(p["tau"] - (1 + 0.64 + 0.64**2)) < 1e-6
    assert abs(p["break_even_tau"] - 82 * 0.030) < 1e-9
    assert steps["compat drafters"]["verdict"] == "drop-in compatible for fine-tuning"
    # the zoo story leaves the report and the runs' JSON artefacts
    for f in (
        "report.html",
        "report.md",
        "probe.json",
        "plan.json",
        "eval.json",
        "compat.json",
        "bench-stale.json",
        "bench-finetuned.json",
        "bench-scratch.json",
        "bench-stale-dflash.json",
        "bench-dflash.json",
        "bench-mtp.json",
        "story.json",
        "runs/finetune/summary.json",
        "runs/scratch/summary.json",
        "runs/tuned-dflash/summary.json",
        "runs/tuned-dflash/best/config.json",
    ):
        assert (out / f).is_file(), f
    assert steps["probe"]["verdict"] in ("plug-in", "fine-tune", "from-scratch")
    names = [h["name"] for h in doc["headline"]]
    assert names == [
        "baseline (plain)",
        "prompt lookup",
        "stale K2 drafter",
        "fine-tuned",
        "from scratch",
        "stale K2 DFlash",
        "DFlash fine-tuned",
        "MTP (shipped head)",
    ]
    for h in doc["headline"]:  # predicted (plan --methods) beside measured, for every row
        assert h["predicted_tps"] > 0 and h["predicted_from"]
    rows = {h["name"]: h for h in doc["headline"]}
    for name, method, src in (
        ("stale K2 DFlash", "dflash", "bench-stale-dflash.json"),
        ("DFlash fine-tuned", "dflash", "bench-dflash.json"),
        ("MTP (shipped head)", "mtp", "bench-mtp.json"),
    ):
        assert rows[name]["method"] == method and src in rows[name]["predicted_from"]
    drafters = json.loads((out / "eval.json").read_text())["drafters"]
    for name in ("stale K2 DFlash", "DFlash fine-tuned"):
        ev = drafters[name]
        assert ev["method"] == "dflash" and ev["block_size"] == 3 + 1  # depth 3 per block
        assert len(ev["walk_acc"]) == 3 and 1.0 <= ev["tau_walk"] <= 4.0
    assert drafters["stale K2 DFlash"]["path"].endswith("shipped/k2-dflash-tiny")
    mtp = drafters["MTP (shipped head)"]
    assert mtp["method"] == "mtp" and len(mtp["walk_acc"]) == 3 and mtp["tau_walk"] >= 1.0
    dtuned = json.loads((out / "runs/tuned-dflash/summary.json").read_text())
    assert dtuned["method"] == "dflash"
    state = json.loads((out / "runs/tuned-dflash/state/state.json").read_text())
    assert state["config"]["init_from"].endswith("shipped/k2-dflash-tiny")  # warm start
    stale = json.loads((out / "bench-stale.json").read_text())
    assert [lv["concurrency"] for lv in stale["costs"]["levels"]] == [1]
    methods = {"stale-dflash": "dflash", "dflash": "dflash", "mtp": "mtp"}
    for role in ("stale", "finetuned", "scratch", "stale-dflash", "dflash", "mtp"):
        b = json.loads((out / f"bench-{role}.json").read_text())
        assert b["method"] == methods.get(role, "eagle3")
        assert b["lossless"] is True  # greedy speculative output == plain greedy output
        assert 1.0 <= b["tau_online"] <= b["depth"] + 1
        assert b["speedup"] == pytest.approx(b["spec_tps"] / b["baseline_tps"], rel=1e-3)
    tuned = json.loads((out / "runs/finetune/summary.json").read_text())
    assert tuned["init_from"]  # a warm start from the K2 drafter
    html = (out / "report.html").read_text()
    assert "Game plan" in html and html.count("data:image/png;base64,") >= 4
    assert "what next" in r.err and "eagle3kit convert" in r.err  # narration on stderr


def test_demo_default_out_is_under_home(monkeypatch, tmp_path):
    from eagle3kit.demo import default_out

    monkeypatch.setenv("EAGLE3KIT_HOME", str(tmp_path))
    assert default_out() == tmp_path / "demo"


@pytest.mark.slow
@pytest.mark.kill
def test_demo_killed_during_training_resumes_and_ends_the_story(tmp_path):
    """kill -9 while the fine-tune run is training (just after its first saved state); the
    next demo resumes it and finishes: end to end, everything the demo leaves is there."""
    from kill_helpers import eagle3kit, kill_at

    out = tmp_path / "demo"
    cmd = eagle3kit("demo", "--quick", "-o", out, "--json")
    kill_at(cmd, "after:*/runs/finetune/state#1", tmp_path)
    assert (out / "runs" / "finetune" / "state" / "state.json").is_file()
    assert not (out / "runs" / "finetune" / "summary.json").is_file()  # killed mid-run
    r = run_cli("demo", "--quick", "-o", out, "--json")
    assert r.code == 0, r.err
    assert "finetune: resuming an interrupted run" in r.err
    _check_story(out, r)  # and the resumed demo tells the whole story (no separate run)


def test_demo_drops_data_and_runs_made_on_another_zoo_recipe(tmp_path):
    """A rebuilt zoo (new recipe digest) must not meet the previous demo's prepared data and
    training runs: they are removed (and nothing else in OUT), and kept while the recipe is
    the same."""
    import json

    from eagle3kit import zoo
    from eagle3kit.demo.steps import PAIR, drop_stale
    from eagle3kit.zoo.shipping import identity

    out = tmp_path / "demo"
    for run in ("runs/finetune", "runs/scratch", "data/test-prepared", "runs/mine"):
        (out / run).mkdir(parents=True)
        (out / run / "x.json").write_text("{}")
    (out / "data" / "test.jsonl").write_text("{}\n")
    (out / "report.md").write_text("kept")
    old = {name: "an older digest" for name in PAIR}
    (out / "zoo-recipes.json").write_text(json.dumps(old))
    drop_stale(out, "tiny")
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    kept = ["data", "report.md", "runs", "runs/mine", "runs/mine/x.json", "zoo-recipes.json"]
    assert left == kept
    want = {name: identity(zoo.get(name, size="tiny")) for name in PAIR}
    assert json.loads((out / "zoo-recipes.json").read_text()) == want
    (out / "runs" / "finetune").mkdir()
    drop_stale(out, "tiny")  # same recipe: nothing removed
    assert (out / "runs" / "finetune").is_dir()


def test_predict_headline_prices_dflash_at_one_drafter_pass_per_cycle():
    """The DFlash row costs one drafter pass per cycle (its own pass time), an EAGLE-3 row
    with the same acceptance `depth` passes, an MTP row `depth` passes of its own head's time;
    all verify depth + 1 tokens (docs/plan.md)."""
    from eagle3kit.demo.steps import predict_headline

    costs = {
        "levels": [
            {
                "concurrency": 1,
                "plain_ms": 10.0,
                "verify_ms": {"4": 16.0},
                "pass_ms": {"eagle3": 2.0},
                "overhead_ms": {},
            }
        ],
        "prefill_ms": 50.0,
        "new_tokens": 33.0,
    }
    walk = [0.5, 0.25, 0.125]
    ev = {"drafters": {n: {"walk_acc": walk} for n in ("from scratch", "DFlash", "MTP")}}
    rows = [
        {"name": "from scratch", "method": "eagle3", "source": "bench-scratch.json"},
        {"name": "DFlash", "method": "dflash", "pass_ms": 3.0, "source": "bench-dflash.json"},
        {"name": "MTP", "method": "mtp", "pass_ms": 1.5, "source": "bench-mtp.json"},
    ]
    predict_headline(rows, {"costs": costs, "methods": []}, ev, 3)
    tau = 1 + 0.5 + 0.25 + 0.125

    def request_tps(cycle_ms):  # N new tokens after the prefill: N / (prefill + (N-1)/tau * cycle)
        return 1000 * 33 / (50 + 32 / tau * cycle_ms)

    assert rows[0]["predicted_tps"] == pytest.approx(request_tps(3 * 2.0 + 16.0), abs=1e-3)
    assert rows[1]["predicted_tps"] == pytest.approx(request_tps(1 * 3.0 + 16.0), abs=1e-3)
    assert "bench-dflash.json" in rows[1]["predicted_from"]
    assert rows[2]["predicted_tps"] == pytest.approx(request_tps(3 * 1.5 + 16.0), abs=1e-3)
    assert "bench-mtp.json" in rows[2]["predicted_from"]


def test_headline_row_of_an_mtp_bench_carries_its_head_pass_time():
    from eagle3kit.demo.steps import headline_row

    b = {"method": "mtp", "spec_tps": 20.0, "baseline_tps": 10.0, "speedup": 2.0}
    b.update(tau_online=2.5, draft_ms=6.0, depth=3)
    row = headline_row("MTP", b, "bench-mtp.json")
    assert row["method"] == "mtp" and row["pass_ms"] == 2.0  # 6 ms a cycle / 3 head passes
