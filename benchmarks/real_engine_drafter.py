"""The EAGLE-3 drafter the real-engine tests and benchmarks serve (issue 46), built with
eagle3kit's own verbs against the real vLLM server, and committed as a test fixture.

    python benchmarks/real_engine_drafter.py [--samples 600] [--steps 300]

1. `vllm serve llama-v1` (the real engine, benchmarks/real_engine.py --setup);
2. `eagle3kit data regenerate --server URL`: the first N zoo chat samples of llama-v1's
   training files, every answer replaced by the real server's greedy one;
3. `eagle3kit data prepare` and `eagle3kit train --target llama-v1` on them;
4. `eagle3kit convert RUN/best --to vllm` into tests/fixtures/real-engine-llama-v1-eagle3/,
   with fixture.json (the commands, the seconds each took, the regeneration's summary).

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

OUT = ROOT / "tests" / "fixtures" / "real-engine-llama-v1-eagle3"
SUMMARY_KEYS = ("steps", "best_step", "tau_walk", "tau_every_position", "train_samples")
SERVE = ["--enforce-eager", "--max-model-len", "1024", "--served-model-name", "llama-v1"]


def cli(*args: str) -> float:
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "eagle3kit", *args]
    print("$ eagle3kit " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True, env={**_pythonpath()})
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=600)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="real-engine-drafter-"))
    out = Path(a.out)
    seconds: dict[str, float] = {}
    raw, regen = work / "convs.jsonl", work / "regen.jsonl"
    conversations(raw, a.samples)
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
    data, run = work / "data", work / "run"
    seconds["prepare"] = cli("data", "prepare", str(regen), "--target", "llama-v1", "-o", str(data))
    seconds["train"] = cli(
        "train",
        "--target",
        "llama-v1",
        "--data",
        str(data),
        "-o",
        str(run),
        "--steps",
        str(a.steps),
        "--lr",
        "0.003",
        "--ttt-steps",
        "3",
        "--draft-vocab-size",
        "1024",
    )
    tmp = work / "vllm-drafter"
    seconds["convert"] = cli("convert", str(run / "best"), "--to", "vllm", "-o", str(tmp))
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(tmp, out)
    summary = (
        json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    )
    atomic_write_json(
        out / "fixture.json",
        {
            "kind": "eagle3kit.real-engine-drafter",
            "schema": 1,
            "built_by": "python benchmarks/real_engine_drafter.py "
            f"--samples {a.samples} --steps {a.steps}",
            "target": "llama-v1",
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
