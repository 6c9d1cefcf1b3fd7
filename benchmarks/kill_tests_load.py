"""The kill and timeout tests on an idle machine and on a saturated one, several runs each.

    python benchmarks/kill_tests_load.py --runs 5 --json benchmarks/results/kill_tests_load.json
    python benchmarks/kill_tests_load.py --runs 1 --only saturated      # a quick look
    python benchmarks/kill_tests_load.py --runs 1 --only idle --marks "" \
        --json benchmarks/results/suite_time-full-idle.json               # the whole suite
    python benchmarks/kill_tests_load.py --runs 1 --only idle --marks "not slow" \
        --json benchmarks/results/suite_time-fast-idle.json               # the fast subset

A test that passes or fails with the machine's load checks the clock, not the property. The
kill tests (`-m kill`) stop each job at a write they chose (src/eagle3kit/core/stops.py) and
the timeout tests (`-m timeout`) count attempts instead of seconds, so both must pass in every
run under both conditions:
- idle: nothing else is started (run it with the machine otherwise quiet; the load average
  at the start and end of each run is recorded);
- saturated: one busy loop per core (plain Python `while True`, the tests' own priority) runs
  for the whole pytest run, started before it and killed after it.
Each run is `pytest -q -m "kill or timeout" -p no:cacheprovider` in a fresh interpreter; the
result file records every run's exit status, counts, wall time and load. `--marks EXPR` runs
another selection the same way (`""`: the whole suite, as the README's test command runs it;
`"not slow"`: the fast subset), which is how the suite's own time is measured.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from _env import environment
from _results import write_result

ROOT = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
BUSY = "while True:\n    pass\n"


def _counts(tail: str) -> dict[str, int]:
    """pytest's last line, e.g. '28 passed, 1155 deselected in 201.3s' -> counts."""
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|error|errors|skipped)", tail)}


def one_run(saturated: bool, marks: str) -> dict:
    busy = []
    if saturated:
        busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(os.cpu_count() or 1)]
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    try:
        cmd = [*PYTEST, *(["-m", marks] if marks else [])]
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    finally:
        load1 = os.getloadavg()[0]
        for b in busy:
            b.kill()
            b.wait()
    last = (p.stdout.strip().splitlines() or [""])[-1]
    row = {
        "condition": "saturated" if saturated else "idle",
        "busy_loops": len(busy),
        "exit": p.returncode,
        "counts": _counts(last),
        "wall_s": round(time.monotonic() - t0, 1),
        "load_1m_start": round(load0, 2),
        "load_1m_end": round(load1, 2),
    }
    if p.returncode != 0:
        row["failures"] = [x for x in p.stdout.splitlines() if x.startswith(("FAILED", "ERROR"))]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per condition")
    ap.add_argument("--only", choices=["idle", "saturated"], help="one condition only")
    ap.add_argument("--json", help="write the result file here")
    ap.add_argument("--marks", default="kill or timeout", help='pytest -m EXPR ("": all)')
    a = ap.parse_args()
    print(environment(), file=sys.stderr)
    conditions = [c for c in ("idle", "saturated") if a.only in (None, c)]
    rows = []
    for cond in conditions:
        for i in range(a.runs):
            row = one_run(cond == "saturated", a.marks)
            rows.append(row)
            print(
                f"{cond:9s} run {i + 1}/{a.runs}: exit {row['exit']} {row['counts']} "
                f"{row['wall_s']:.0f} s, load {row['load_1m_start']} -> {row['load_1m_end']}",
                file=sys.stderr,
            )
    ok = all(r["exit"] == 0 for r in rows)
    print("every run passed" if ok else "FAILED runs above", file=sys.stderr)
    if a.json:
        doc = {"marks": a.marks, "all_passed": ok, "runs": rows}
        write_result(a.json, "eagle3kit.kill_tests_load", doc)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
