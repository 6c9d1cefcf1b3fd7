"""kill -9 mid-run, then --resume: the final weights equal an uninterrupted run's, bitwise (CPU)."""

from __future__ import annotations

import json
import os
import sys

import pytest
from kill_helpers import kill_at
from test_train_helpers import tiny_data, tiny_target, train_args

STEPS = "24"
AT_SAVE = 3  # the kill lands on the third state save


def _weights(run):
    from safetensors.torch import load_file

    return load_file(str(run / f"step-{STEPS}" / "model.safetensors"))


def _state_step(run) -> int:
    try:
        return json.loads((run / "state" / "state.json").read_text())["step"]
    except (OSError, ValueError, KeyError):
        return -1


@pytest.mark.slow
@pytest.mark.kill
def test_kill9_then_resume_equals_uninterrupted(tmp_path, cli):
    data, target = tiny_data(), tiny_target()
    extra = ("--steps", STEPS, "--save-every", "4", "--eval-every", "8", "--lr", "3e-3")
    ref = tmp_path / "ref"
    r = cli(*train_args(ref, data, target, *extra))
    assert r.code == 0, r.err

    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "eagle3kit", *train_args(killed, data, target, *extra)]
    # the third state is written beside the second, not yet in place: the resume goes back
    # to the second and replays what came after it (core/stops.py)
    kill_at(cmd, f"before:*/{killed.name}/state#{AT_SAVE}", tmp_path, env)
    at_kill = _state_step(killed)
    assert 0 < at_kill < int(STEPS), f"not killed mid-run (state at step {at_kill})"
    assert not (killed / f"step-{STEPS}").exists()

    r = cli("train", "-o", killed, "--resume", "--threads", "1", "--json")
    assert r.code == 0, r.err
    a, b = _weights(ref), _weights(killed)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].equal(b[name]), name  # bitwise
    rows = [json.loads(x) for x in (killed / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in rows] == [0, 8, 16, 24]  # no evaluation logged twice
    ref_rows = [json.loads(x) for x in (ref / "metrics.jsonl").read_text().splitlines()]
    assert rows == ref_rows
    assert json.loads(r.out)["steps"] == int(STEPS)
