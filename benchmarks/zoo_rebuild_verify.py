"""Rebuild zoo members from their recipe and compare each with the shipped one: what a
newcomer runs as `eagle3kit zoo build NAME -o DIR` then `eagle3kit zoo verify DIR`.

    python benchmarks/zoo_rebuild_verify.py --size tiny \
        --json benchmarks/results/zoo_verify-tiny.json

A fresh EAGLE3KIT_HOME (a v2 builds its v1 there first). Per member: build seconds, whether
the weights are the shipped bytes, and every figure against its tolerance (zoo/verify.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _env import environment


def rebuild_and_verify(name: str, size: str, work: Path) -> dict:
    env = {**os.environ, "EAGLE3KIT_HOME": str(work / "home")}
    out = work / (name if size == "full" else f"{name}-{size}")
    cli = [sys.executable, "-m", "eagle3kit", "zoo"]
    t0 = time.time()
    b = subprocess.run(
        [*cli, "build", name, "--size", size, "-o", str(out), "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    if b.returncode != 0:
        sys.exit(f"zoo build {name} failed (exit {b.returncode}):\n{b.stderr[-2000:]}")
    seconds = round(time.time() - t0, 1)
    v = subprocess.run(
        [*cli, "verify", str(out), "--json"], env=env, capture_output=True, text=True
    )
    if v.returncode not in (0, 1):
        sys.exit(f"zoo verify {out} failed (exit {v.returncode}):\n{v.stderr[-2000:]}")
    return {
        "member": out.name,
        "build_wall_seconds": seconds,
        "exit": v.returncode,
        "verify": json.loads(v.stdout),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="tiny", choices=("full", "tiny"))
    ap.add_argument("--members", default="llama-v1,llama-v2,dsv3-v1,dsv3-v2")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    print("environment: " + environment())
    with tempfile.TemporaryDirectory(prefix="zoo-rebuild.") as tmp:
        rows = [rebuild_and_verify(n, args.size, Path(tmp)) for n in args.members.split(",")]
    for r in rows:
        v = r["verify"]
        worst = max((f["difference"] / f["tolerance"] for f in v["figures"]), default=0)
        print(
            f"{r['member']}: exit {r['exit']}, weights identical {v['weights_identical']}, "
            f"largest difference {worst:.0%} of its tolerance"
        )
    if args.json:
        from _results import write_result

        ok = all(r["exit"] == 0 for r in rows)
        write_result(args.json, "eagle3kit.zoo_rebuild_verify", {"ok": ok, "members": rows})


if __name__ == "__main__":
    main()
