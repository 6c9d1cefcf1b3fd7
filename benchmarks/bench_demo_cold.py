"""A cold `eagle3kit demo`: an empty EAGLE3KIT_HOME and demo folder. The zoo's targets and
the K2 drafter ship with the package, so the demo builds none of them (checked: nothing
appears under EAGLE3KIT_HOME/zoo or /drafters); it trains only its own arms. Wall time, peak
RSS of the demo process, the load average around the run (a shared machine slows it), the
shipped members' chat figures (their zoo.json), the narration and the story's JSON summary.

    python benchmarks/bench_demo_cold.py --home /tmp/demo-cold \
        --json benchmarks/results/demo_cold.json
    python benchmarks/bench_demo_cold.py --quick --home /tmp/demo-cold-tiny \
        --json benchmarks/results/demo_cold-tiny.json

The budget it checks against (issue 33): 5 minutes on the project's 2-core machine kind.
One run: a cold demo is too long to repeat here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _env import environment


def run(home: Path, quick: bool) -> dict:
    from eagle3kit import zoo

    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    env = {**os.environ, "EAGLE3KIT_HOME": str(home)}
    exe = [sys.executable, "-m", "eagle3kit", "demo", "--json", *(["--quick"] if quick else [])]
    load0 = os.getloadavg()
    t0 = time.time()
    p = subprocess.run(exe, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit(f"demo failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    size = "tiny" if quick else "full"
    chat = {}
    for name in ("dsv3-v1", "dsv3-v2"):
        doc = zoo.manifest(name, size=size) or {}
        met = doc.get("metrics", {}).get("chat", {})
        chat[zoo.label(name, size)] = {k: v for k, v in met.items() if k != "sample"}
    return {
        "size": size,
        "wall_seconds": round(wall, 2),
        "max_rss_kib": rss,
        "load_average_before_after": [round(x, 2) for x in (*load0, *os.getloadavg())],
        "built_nothing": not (home / "zoo").exists() and not (home / "drafters").exists(),
        "zoo_chat": chat,
        "stdout": p.stderr,  # the narration (stdout carries the JSON summary)
        "story": json.loads(p.stdout),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--home", type=Path, required=True, help="emptied first, then used")
    ap.add_argument("--quick", action="store_true", help="the tiny zoo (demo --quick)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    print("environment: " + environment())
    doc = run(args.home, args.quick)
    print(doc["stdout"])
    print(f"wall {doc['wall_seconds']} s, built nothing: {doc['built_nothing']}")
    if args.json:
        from _results import write_result

        write_result(args.json, "eagle3kit.bench_demo_cold", doc)


if __name__ == "__main__":
    main()
