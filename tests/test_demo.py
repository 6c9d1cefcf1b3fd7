"""`eagle3kit demo` replays the story end to end, offline, and its numbers match the seed's arithmetic."""

from __future__ import annotations

import json

from conftest import run_cli


def test_demo_json(tmp_path):
    r = run_cli("demo", "-o", tmp_path / "demo", "--json", "--size", "tiny")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    steps = {s["step"]: s["result"] for s in doc["steps"]}
    p = steps["plan"]
    assert abs(p["accept_len"] - (1 + 0.64 + 0.64**2)) < 1e-6
    assert abs(p["break_even_accept_len"] - 82 * 0.030) < 1e-9
    assert steps["compat drafters"]["verdict"] == "drop-in compatible for fine-tuning"
    assert steps["inspect"]["missing"] == []
    eng = steps["compat drafter-target"]["engines"]
    assert eng["sglang"]["captures"] == [2, 30, 58]
    assert (tmp_path / "demo" / "plan.png").stat().st_size > 10_000
    z = steps["zoo"]
    assert z["aux_shape"][-1] == 3 * z["target"]["hidden_size"]
    assert z["compat"]["compatible"] is True
    assert "plan" in r.err  # narration on stderr with --json
