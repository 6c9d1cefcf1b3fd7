"""The drafters the real-engine tests and benchmarks serve (issue 46), built with eagle3kit's
own verbs against the real vLLM server, and committed as test fixtures.

    python benchmarks/real_engine_drafter.py [--method eagle3|dflash|peagle] [--samples 600]
        [--steps 300] [--work DIR]

1. `vllm serve llama-v1` (the real engine, benchmarks/real_engine.py --setup);
2. `eagle3kit data regenerate --server URL`: the first N zoo chat samples of llama-v1's
   training files, every answer replaced by the real server's greedy one (with `--work DIR`,
   DIR/regen.jsonl is kept and reused by the next method's build: the same answers);
3. `eagle3kit data prepare` and `eagle3kit train --target llama-v1 --method M` on them:
   eagle3 from scratch; dflash from scratch, a block of 4 (3 drafts, as the other methods);
   peagle warm-started (`--init-from`) from the EAGLE-3 fixture, 3 depths;
4. `eagle3kit convert RUN/best --to vllm` (eagle3, peagle) into
   tests/fixtures/real-engine-llama-v1-M/; a DFlash run is copied as `train` writes it (z-lab's
   layout, which vLLM serves as it is; `convert` turns DFlash into zlab or speculators only).
   fixture.json records the commands, the seconds each took and the run's summary.

The full llama-v1 is used, not the tiny one: the tiny members' head_dim 16 is a size the CPU
build's attention kernels refuse (docs/live.md, "The real engine").
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))

import _env  # noqa: E402,F401

from eagle3kit import zoo  # noqa: E402
from eagle3kit.core.atomic import atomic_write_json  # noqa: E402
from eagle3kit.live.engine_server import VllmServer  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
EAGLE3 = FIXTURES / "real-engine-llama-v1-eagle3"
# per method: train's own arguments (the common ones are in train_args)
METHOD_ARGS = {
    "eagle3": ["--lr", "0.003", "--ttt-steps", "3", "--draft-vocab-size", "1024"],
    "dflash": ["--method", "dflash", "--lr", "0.003", "--block-size", "4", "--anchors", "16"],
    "peagle": ["--method", "peagle", "--init-from", str(EAGLE3.relative_to(ROOT)), "--lr", "0.001"]
    + ["--ttt-steps", "3"],
}
SUMMARY_KEYS = ("steps", "best_step", "tau_walk", "tau_every_position", "train_samples")
SERVE = ["--enforce-eager", "--max-model-len", "1024", "--served-model-name", "llama-v1"]


def cli(*args: str) -> float:
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "eagle3kit", *args]
    print("$ eagle3kit " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True, env={**_pythonpath()}, cwd=ROOT)
    return round(time.monotonic() - t0, 1)


def _pythonpath() -> dict:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def conversations(path: Path, n: int) -> None:
    from eagle3kit.zoo import corpus

    m = zoo.member("llama-v1")
    convs = corpus.chat_samples(corpus.files(m.slice))[:n]
    with open(path, "w") as f:
        for i, c in enumerate(convs):
            f.write(json.dumps({"id": f"{m.slice}-{i}", **c}) + "\n")


def regenerate(work: Path, samples: int, seconds: dict) -> Path:
    """DIR/regen.jsonl: the real server's answers (reused when a former build left it)."""
    raw, regen = work / "convs.jsonl", work / "regen.jsonl"
    if regen.exists():
        seconds["regenerate"] = "reused " + regen.name
        return regen
    conversations(raw, samples)
    with VllmServer(str(zoo.get("llama-v1")), SERVE, log_path=work / "vllm.log") as srv:
        seconds["server_start"] = srv.started_s
        seconds["regenerate"] = cli(
            "data",
            "regenerate",
            str(raw),
            "-o",
            str(regen),
            "--server",
            srv.url,
            "--max-tokens",
            "256",
            "--concurrency",
            "8",
        )
    return regen


def train_args(method: str, data: Path, run: Path, steps: int) -> list[str]:
    args = ["train", "--target", "llama-v1", "--data", str(data), "-o", str(run)]
    return [*args, "--steps", str(steps), *METHOD_ARGS[method]]


def run_summary(run: Path) -> dict:
    """RUN/summary.json; a DFlash run writes none: its last metrics.jsonl line (step, tau)."""
    if (run / "summary.json").exists():
        return json.loads((run / "summary.json").read_text())
    lines = (
        (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
    )
    last = json.loads(lines[-1]) if lines else {}
    return {"steps": last.get("step"), "tau_every_position": last.get("tau_every_position")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", choices=sorted(METHOD_ARGS), default="eagle3")
    ap.add_argument("--samples", type=int, default=600)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", help="default: tests/fixtures/real-engine-llama-v1-METHOD")
    ap.add_argument("--time-limit", type=float, help="train's --time-limit (seconds)")
    ap.add_argument("--work", help="work dir (kept; its regen.jsonl is reused)")
    a = ap.parse_args()
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="real-engine-drafter-"))
    work.mkdir(parents=True, exist_ok=True)
    out = Path(a.out or FIXTURES / f"real-engine-llama-v1-{a.method}")
    seconds: dict[str, float | str] = {}
    regen = regenerate(work, a.samples, seconds)
    data, run = work / f"data-{a.samples}", work / f"run-{a.method}"
    if not data.exists():
        seconds["prepare"] = cli(
            "data", "prepare", str(regen), "--target", "llama-v1", "-o", str(data)
        )
    shutil.rmtree(run, ignore_errors=True)
    limit = ["--time-limit", str(a.time_limit)] if a.time_limit else []
    seconds["train"] = cli(*train_args(a.method, data, run, a.steps), *limit)
    tmp = work / f"vllm-drafter-{a.method}"
    shutil.rmtree(tmp, ignore_errors=True)
    if a.method == "dflash":
        shutil.copytree(run / "best", tmp)
        seconds["convert"] = "none: z-lab's layout, served by vLLM as it is"
    else:
        seconds["convert"] = cli("convert", str(run / "best"), "--to", "vllm", "-o", str(tmp))
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(tmp, out)
    summary = run_summary(run)
    atomic_write_json(
        out / "fixture.json",
        {
            "kind": "eagle3kit.real-engine-drafter",
            "schema": 1,
            "built_by": "python benchmarks/real_engine_drafter.py "
            f"--method {a.method} --samples {a.samples} --steps {a.steps}"
            + (f" --time-limit {a.time_limit:g}" if a.time_limit else ""),
            "target": "llama-v1",
            "method": a.method,
            "train_args": METHOD_ARGS[a.method],
            "samples": a.samples,
            "steps": a.steps,
            "seconds": seconds,
            "train_summary": {k: summary.get(k) for k in SUMMARY_KEYS},
        },
    )
    print(f"wrote {out} ({seconds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
