"""`eagle3kit train` end to end on a tiny zoo target: the run directory contract, the servable
checkpoints (inspect reads them, compat passes for SGLang), and bad input (exit 2)."""

from __future__ import annotations

import json

import pytest
from test_train_helpers import tiny_data, tiny_target, train_args


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from conftest import run_cli

    out = tmp_path_factory.mktemp("train") / "run"
    data, target = tiny_data(), tiny_target()
    r = run_cli(
        *train_args(
            out, data, target, "--steps", "6", "--eval-every", "3", "--save-every", "4", "--json"
        )
    )
    assert r.code == 0, r.err
    return out, json.loads(r.out), target


def test_run_directory_contract(run):
    out, summary, _ = run
    assert {
        "steps",
        "best_step",
        "tau_walk",
        "tau_every_position",
        "tokens_per_s",
        "peak_memory_mb",
        "init_from",
    } <= set(summary)
    assert summary["steps"] == 6 and summary["init_from"] is None
    assert json.loads((out / "summary.json").read_text()) == summary
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 3, 6]
    for r in rows:
        assert len(r["loss"]) == len(r["acc"]) == len(r["cond_acc"]) == 3
        tau = 1.0
        run_p = 1.0
        for p in r["cond_acc"]:
            run_p *= p
            tau += run_p
        assert r["tau_every_position"] == pytest.approx(tau)
        assert r["tau_walk"] == pytest.approx(1 + sum(r["walk_acc"]))
    # RUN/best is chosen by the walked value (the first evaluation wins a tie)
    best = max(rows, key=lambda r: (r["tau_walk"], -r["step"]))
    assert summary["best_step"] == best["step"]
    assert summary["tau_walk"] == pytest.approx(best["tau_walk"])
    assert summary["tau_every_position"] == pytest.approx(best["tau_every_position"])
    for d in ("best", "step-4", "step-6"):
        assert (out / d / "config.json").is_file() and (out / d / "model.safetensors").is_file()
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    st = json.loads((out / "state" / "state.json").read_text())
    assert st["step"] == 6 and st["data_position"] == 24
    assert (out / "state" / "optim.safetensors").is_file()


def test_checkpoints_are_servable(run, cli):
    out, summary, target = run
    r = cli("inspect", out / "best", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    text = json.dumps(doc)
    assert "sglang" in text and '"d2t"' in text and '"t2d"' in text
    r = cli("compat", out / "step-6", target, "--engine", "sglang")
    assert r.code == 0, r.out + r.err
    from safetensors import safe_open

    with safe_open(str(out / "best" / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert {"d2t", "t2d", "lm_head.weight", "fc.weight"} <= names
    assert "embed_tokens.weight" not in names  # the engine uses the target's


def test_bad_input_is_one_line_exit_2(run, cli, tmp_path):
    out, _, target = run
    data = tiny_data()
    r = cli(*train_args(out, data, target, "--steps", "2"))  # the run exists
    assert r.code == 2 and "--resume" in r.err and len(r.err.strip().splitlines()) == 1
    r = cli("train", "--target", target, "-o", tmp_path / "x", "--steps", "2")
    assert r.code == 2 and "--data" in r.err
    r = cli(*train_args(tmp_path / "y", data, target, "--resume"))
    assert r.code == 2 and "state" in r.err
    r = cli(*train_args(tmp_path / "z", data, target, "--attention", "gqa", "--steps", "1"))
    assert r.code == 2 and "--attention" in r.err
    r = cli(*train_args(tmp_path / "w", tmp_path / "nope", target, "--steps", "1"))
    assert r.code == 2 and "nope" in r.err


def test_time_limit_stops_after_one_step(cli, tmp_path):
    out = tmp_path / "t"
    r = cli(
        *train_args(
            out,
            tiny_data(),
            tiny_target(),
            "--steps",
            "50",
            "--time-limit",
            "0",
            "--eval-samples",
            "2",
            "--json",
        )
    )
    assert r.code == 0, r.err
    s = json.loads(r.out)
    assert s["steps"] == 1 and s["planned_steps"] == 50
    assert (out / "step-1" / "model.safetensors").is_file()


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="Linux VmHWM")
@pytest.mark.slow
def test_peak_memory_is_the_process_own_not_its_parents():
    """A run started by a large parent (a benchmark, a script) reports its own peak RSS:
    ru_maxrss of a child Python's subprocess spawned starts at the parent's RSS."""
    import subprocess
    import sys

    big = bytearray(2 * 2**30)  # the parent: 2 GiB resident, above any child's peak here
    big[::4096] = b"\1" * len(range(0, len(big), 4096))
    code = "from eagle3kit.train.loop import _peak_memory_mb; print(_peak_memory_mb('cpu'))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    del big
    assert float(r.stdout) < 1024, r.stdout  # importing torch takes a few hundred MB
