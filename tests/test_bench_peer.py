"""benchmarks/bench_train.py's peer: run in its own process over a line protocol, alternating
with our step, or reported as not run with the reason (never a stand-in figure)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

TINY = dict(h=32, heads=2, inter=64, t=16, k=2, v=256, vd=64)

# Speaks speculators_step.py's --serve protocol: a JSON header line once ready, then one
# {"step_s": s} line per "step" line read; the header fields are the ones bench_train reads.
FAKE_PEER = """
import json, sys
print(json.dumps({"kind": "eagle3kit.peer_step", "schema": 1, "peer": "fake",
    "versions": {"speculators": "0", "torch": "0", "transformers": "0"},
    "trained_parameters": 1234, "tokens_per_step": 16, "ttt_steps": 2,
    "attention": "sdpa", "loss": "kl_div (eager)"}), flush=True)
for i, line in enumerate(sys.stdin):
    print(json.dumps({"step_s": 0.5 + 0.25 * i}), flush=True)
"""


@pytest.fixture
def bench_train():
    import bench_train

    return bench_train


def test_peer_not_run_without_venv(bench_train, monkeypatch, tmp_path):
    monkeypatch.delenv("EAGLE3KIT_PEER_PYTHON", raising=False)
    monkeypatch.setenv("EAGLE3KIT_PEERS", str(tmp_path / "none"))
    r = bench_train.time_pair(TINY, 1, 2, "cpu", 1)
    assert r["ran"] is False and "setup_speculators.sh" in r["reason"]
    line = bench_train.peer_line({"shape": "tiny", "peer": r}, 2)
    assert "not run" in line and "tokens/s" not in line


def test_peer_not_run_when_it_crashes(bench_train, monkeypatch, tmp_path):
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nsys.stderr.write('ImportError: no module speculators')\n")
    py = tmp_path / "python"
    py.write_text(f"#!/bin/sh\nexec {sys.executable} {crash}\n")
    py.chmod(0o755)
    monkeypatch.setenv("EAGLE3KIT_PEER_PYTHON", str(py))
    r = bench_train.time_pair(TINY, 1, 2, "cpu", 1)
    assert r["ran"] is False and "no module speculators" in r["reason"]


def test_peer_alternates_and_states_the_work(bench_train, monkeypatch, tmp_path):
    fake = tmp_path / "fake_peer.py"
    fake.write_text(FAKE_PEER)
    py = tmp_path / "python"
    py.write_text(f"#!/bin/sh\nexec {sys.executable} {fake}\n")
    py.chmod(0o755)
    monkeypatch.setenv("EAGLE3KIT_PEER_PYTHON", str(py))
    r = bench_train.time_pair(TINY, 1, 3, "cpu", 1)
    assert r["ran"] is True, r
    assert r["step_s"] == [0.5, 0.75, 1.0]  # the peer's own times, one per pair, in order
    assert r["tokens_per_s"]["median"] == pytest.approx(16 / 0.75)
    assert len(r["ours_step_s"]) == 3 and all(s > 0 for s in r["ours_step_s"])
    w = r["equal_work"]
    assert w["tokens_per_step"] == {"ours": 16, "peer": 16}
    assert w["ttt_steps"] == {"ours": 2, "peer": 2}
    assert w["trained_parameters"]["peer"] == 1234 and w["trained_parameters"]["ours"] > 0
    ratios = sorted(p / o for o, p in zip(r["ours_step_s"], r["step_s"], strict=True))
    assert r["ours_over_peer"] == pytest.approx(ratios[1])
    assert "1,234" in bench_train.peer_line({"shape": "tiny", "peer": r}, 3)


def test_no_constant_stands_for_the_peer():
    src = (BENCH / "bench_train.py").read_text()
    assert "PEER_TOKENS_PER_S" not in src and "published peer figure" not in src
    assert not re.search(r"peer\w*\s*=\s*\d[\d_.]*\s*(#|$)", src, re.M)
