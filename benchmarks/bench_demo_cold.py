"""A cold `eagle3kit demo`: an empty EAGLE3KIT_HOME, so it builds dsv3-v1, dsv3-v2 and the
K2 drafter before the story. Wall time, peak RSS of the demo process, the zoo builds' own
seconds and chat figures (from their zoo.json), the narration and the story's JSON summary.

    python benchmarks/bench_demo_cold.py --home /tmp/demo-cold \
        --json benchmarks/results/demo_cold.json

The budget it checks against (issue 22): 15 minutes on the project's 2-core machine kind.
One run: a cold demo is too long to repeat here, and the builds' stage times in zoo.json show
where the time went.
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


def run(home: Path) -> dict:
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    env = {**os.environ, "EAGLE3KIT_HOME": str(home)}
    exe = [sys.executable, "-m", "eagle3kit", "demo", "--json"]
    t0 = time.time()
    p = subprocess.run(exe, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit(f"demo failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    builds, chat = {}, {}
    for name in ("dsv3-v1", "dsv3-v2"):
        doc = json.loads((home / "zoo" / name / "zoo.json").read_text())
        builds[name] = doc["build_seconds"]
        chat[name] = {k: v for k, v in doc["metrics"]["chat"].items() if k != "sample"}
    return {
        "wall_seconds": round(wall, 2),
        "max_rss_kib": rss,
        "zoo_build_seconds": builds,
        "zoo_chat": chat,
        "stdout": p.stderr,  # the narration (stdout carries the JSON summary)
        "story": json.loads(p.stdout),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--home", type=Path, required=True, help="emptied first, then used")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    print("environment: " + environment())
    doc = run(args.home)
    print(doc["stdout"])
    print(f"wall {doc['wall_seconds']} s, builds {doc['zoo_build_seconds']}")
    if args.json:
        from _results import write_result

        write_result(args.json, "eagle3kit.bench_demo_cold", doc)


if __name__ == "__main__":
    main()
