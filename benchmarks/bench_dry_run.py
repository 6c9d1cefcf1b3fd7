"""`train --dry-run` against the run it plans: predicted peak memory and time per step beside
the real run's measured peak RSS and time per step, on the full zoo members, for a few shapes,
methods and lengths; and the Kimi-K2-shaped plan's wall time (headers only).

    python benchmarks/bench_dry_run.py [--work DIR] [--steps 8] [--threads 1]
                                       [--only NAME ...] [--k2-repeats 5]
                                       [--out benchmarks/results/dry_run.json]

Each case runs twice, each time in a fresh process: `eagle3kit train ... --dry-run --json`
(the plan: `memory.peak`, `time.step_s`, `time.step_cpu_s`), then the same command without
--dry-run (its summary: `peak_memory_mb`, the process's peak RSS; `train_seconds / steps` and
`train_cpu_seconds / steps`, the training steps' own wall and CPU time). On a host other
sessions load, the two processes see different loads minutes apart, which moves wall time;
CPU time (one torch thread: the work) does not depend on them, so both are compared. The
ratio predicted / measured is written per case. The prediction is made from the plan's counts
and its own short measured step; nothing of the real run feeds it.

K2: a Kimi-K2.5-shaped target (its config only, 1T parameters) and the K2.5 MLA drafter
(sparse headers) with a synthetic DATA dir, planned --k2-repeats times by the CLI in a fresh
process each: the wall time of the whole command (python start included), its CPU time (user +
system: the work, which the host's load does not stretch), whether torch was imported, and the
process's peak RSS (VmHWM). Python's bytecode is cached as in an installed
package (one untimed first run writes it; its time is recorded as `first_run_wall_s`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import _env  # noqa: E402,F401  (records the code state at the start)
from _results import RESULTS, write_result  # noqa: E402

COMMON = ["--eval-samples", "16", "--eval-batch", "8", "--seed", "0"]
CASES = {
    "eagle3 dsv3-v1 online B8 L512 Vd4096 k7": dict(
        member="dsv3-v1", args=["--batch-size", "8", "--max-len", "512", "--ttt-steps", "7"]
    ),
    "eagle3 llama-v1 online B4 L256 Vd1024 k4": dict(
        member="llama-v1",
        args=[
            "--batch-size",
            "4",
            "--max-len",
            "256",
            "--ttt-steps",
            "4",
            "--draft-vocab-size",
            "1024",
        ],
    ),
    "peagle dsv3-v1 online B8 L512 k4": dict(
        member="dsv3-v1",
        args=["--method", "peagle", "--batch-size", "8", "--max-len", "512", "--ttt-steps", "4"],
    ),
    "eagle3 mla dsv3-v1 online B4 L1024 k3": dict(
        member="dsv3-v1",
        args=["--attention", "mla", "--batch-size", "4", "--max-len", "1024", "--ttt-steps", "3"],
    ),
    "eagle3.1 dsv3-v1 offline B8 L512 k5": dict(
        member="dsv3-v1",
        store=True,
        args=["--method", "eagle3.1", "--batch-size", "8", "--max-len", "512", "--ttt-steps", "5"],
    ),
}


def _cli(args: list[str], timeout: float = 3600) -> tuple[dict, float, str]:
    """(the JSON document, wall seconds, stderr) of `eagle3kit ARGS` in a fresh process."""
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "eagle3kit", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"eagle3kit {' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr}")
    return json.loads(r.stdout), wall, r.stderr


def _data(work: Path, member: str, files: int) -> Path:
    import _drafter_runs as R

    kw = dict(files=files, max_length=1024, held_out=False, size="full")
    return R.zoo_data(member, work / f"data-{member}-{files}", **kw)


def _store(work: Path, data: Path, member: str) -> Path:
    out = work / f"store-{member}"
    if not (out / "manifest.json").is_file():
        _cli(["data", "capture", data, "--target", member, "-o", out, "--json"])
    return out


def run_case(name: str, case: dict, a: argparse.Namespace) -> dict:
    work = Path(a.work)
    if case.get("store"):
        src = ["--features", _store(work, _data(work, case["member"], 15), case["member"])]
    else:
        src = ["--data", _data(work, case["member"], a.files)]
    run = work / "runs" / name.replace(" ", "_")
    if run.exists():
        import shutil

        shutil.rmtree(run)
    args = ["train", "--target", case["member"], *src, "-o", run, *case["args"], *COMMON]
    args += ["--steps", str(a.steps), "--eval-every", str(a.steps), "--threads", str(a.threads)]
    plan, plan_wall, _ = _cli([*args, "--dry-run", "--json"])
    summary, run_wall, _ = _cli([*args, "--json"])
    real_peak = summary["peak_memory_mb"] * 2**20
    real_step = summary["train_seconds"] / summary["steps"]
    real_cpu = summary["train_cpu_seconds"] / summary["steps"]
    row = {
        "case": name,
        "command": "eagle3kit " + " ".join(map(str, args)),
        "predicted": {
            "peak_bytes": plan["memory"]["peak"],
            "memory": {k: v for k, v in plan["memory"].items() if k != "fits"},
            "step_s": plan["time"]["step_s"],
            "step_cpu_s": plan["time"]["step_cpu_s"],
            "time": plan["time"],
            "padded_length": plan["schedule"]["padded_length"],
            "plan_wall_s": plan_wall,
        },
        "measured": {
            "peak_bytes": real_peak,
            "step_s": real_step,
            "step_cpu_s": real_cpu,
            "steps": summary["steps"],
            "tokens_per_s": summary["tokens_per_s"],
            "run_wall_s": run_wall,
        },
    }
    row["ratio"] = {
        "peak": plan["memory"]["peak"] / real_peak,
        "step": plan["time"]["step_s"] / real_step,
        "step_cpu": plan["time"]["step_cpu_s"] / real_cpu,
    }
    row["within_20pct"] = {k: abs(v - 1) <= 0.2 for k, v in row["ratio"].items()}
    print(
        f"{name}: peak {plan['memory']['peak'] / 2**20:.0f} vs {real_peak / 2**20:.0f} MiB "
        f"({row['ratio']['peak']:.2f}); step {plan['time']['step_s']:.2f} vs {real_step:.2f} s "
        f"({row['ratio']['step']:.2f}); CPU {plan['time']['step_cpu_s']:.2f} vs {real_cpu:.2f} s "
        f"({row['ratio']['step_cpu']:.2f})",
        flush=True,
    )
    return row


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


K2_PROBE = (
    "import sys, time\n"
    "def hwm():  # this process's peak RSS since exec (kB); ru_maxrss keeps the parent's\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            return int(line.split()[1])\n"
    "t0 = time.perf_counter()\n"
    "from eagle3kit.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "finally:\n"
    "    print('torch' in sys.modules, hwm(),"
    " file=sys.stderr)\n"
)


def k2_plan(a: argparse.Namespace) -> dict:
    """The K2-shaped plan's wall time, in fresh processes (the command as a user runs it)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_dry_run import k2_case

    work = Path(a.work) / "k2"
    if not (work / "k25-data" / "data.json").is_file():
        k2_case(work)
    target, drafter, data = work / "k25-config", work / "k25-mla", work / "k25-data"
    args = ["train", "--target", target, "--data", data, "--init-from", drafter]
    args += ["-o", work / "run", "--dry-run", "--json", "--max-len", "2048", "--batch-size", "4"]
    # as an installed package runs: Python's bytecode cached (the first, untimed run writes
    # it; this host sets PYTHONDONTWRITEBYTECODE, which would compile every module each time)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cmd = [sys.executable, "-c", K2_PROBE, *map(str, args)]
    t0 = time.perf_counter()
    subprocess.run(cmd, capture_output=True, text=True, env=env)
    cold = time.perf_counter() - t0
    walls, rows = [], []
    cpus = []
    for _ in range(a.k2_repeats):
        c0, t0 = _children_cpu(), time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        walls.append(time.perf_counter() - t0)
        cpus.append(_children_cpu() - c0)
        if r.returncode != 0:
            raise SystemExit(f"K2 plan: exit {r.returncode}\n{r.stderr}")
        torch_loaded, peak = r.stderr.strip().splitlines()[-1].split()
        doc = json.loads(r.stdout)
        rows.append(
            {
                "torch_imported": torch_loaded == "True",
                "peak_rss_bytes": int(peak) * 1024,
                "plan_seconds": doc["plan_seconds"],
            }
        )
    print(
        f"K2 plan: wall {statistics.median(walls):.2f} s, CPU {statistics.median(cpus):.2f} s, "
        f"median of {len(walls)}",
        flush=True,
    )
    return {
        "command": "eagle3kit " + " ".join(map(str, args)),
        "wall_s": {"median": statistics.median(walls), "min": min(walls), "max": max(walls)},
        # the command's own CPU seconds (user + system): the work, whatever the host's load
        "cpu_s": {"median": statistics.median(cpus), "min": min(cpus), "max": max(cpus)},
        "first_run_wall_s": cold,  # compiling the bytecode too
        "runs": rows,
        "under_2s": statistics.median(walls) < 2.0,
        "drafter_weights_bytes": doc["memory"]["drafter_weights"],
        "target_params": doc["target"]["params"],
        "plan": {k: doc[k] for k in ("drafter", "parameters", "schedule", "memory", "time")},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", default="/tmp/eagle3kit-bench-dry-run")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--files", type=int, default=60)
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--k2-repeats", type=int, default=5)
    p.add_argument("--out", default=str(RESULTS / "dry_run.json"))
    a = p.parse_args()
    rows = [run_case(n, c, a) for n, c in CASES.items() if not a.only or n in a.only]
    doc = {"cases": rows, "k2": k2_plan(a) if a.k2_repeats else None}
    doc["all_within_20pct"] = {  # None: no case run (--only naming none)
        k: all(r["within_20pct"][k] for r in rows) if rows else None
        for k in ("peak", "step", "step_cpu")
    }
    print(f"wrote {write_result(a.out, 'eagle3kit.bench_dry_run', doc)}")


if __name__ == "__main__":
    main()
