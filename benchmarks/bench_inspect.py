"""Header-only `inspect` vs loading every tensor, on a Kimi-K2-shaped drafter (about 2.2 GiB).

Writes the drafter with real (pseudo-random) bytes to a temporary directory, then measures:
  1. eagle3kit.checkpoint.inspection.inspect_checkpoint (headers + d2t/t2d only), in-process;
  2. safe_open(...).get_tensor(...).clone() for every tensor (clone forces the bytes to be read;
     the page cache is warm after the first repeat: the best case for it);
  3. peak RSS growth of a fresh process running inspect_checkpoint;
  4. wall time of the whole `eagle3kit inspect PATH --json` process.
Usage: python benchmarks/bench_inspect.py [--repeats N] [--keep DIR]
Targets (issue 2): (2) / (1) >= 100x; (3) < 50 MB; (4) < 1 s.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _env import environment, stats  # noqa: E402


def write_real_drafter(out: Path) -> Path:
    """A Kimi-K2-shaped SGLang drafter whose weight bytes are real, non-zero data."""
    import numpy as np

    from eagle3kit.checkpoint.eagle3.synthetic import kimi_k2_spec, write_sparse_drafter

    write_sparse_drafter(out, kimi_k2_spec())  # headers, d2t, t2d
    f = out / "model.safetensors"
    (n,) = np.frombuffer(f.read_bytes()[:8], dtype="<u8")
    hdr = json.loads(f.read_bytes()[8 : 8 + int(n)])
    block = (
        np.random.default_rng(0)
        .integers(0, 2**16, size=32 * 1024 * 1024, dtype=np.uint16)
        .tobytes()
    )  # 64 MiB
    with open(f, "r+b") as fh:
        for name, e in hdr.items():
            if name in ("__metadata__", "d2t", "t2d"):
                continue
            start, end = 8 + int(n) + e["data_offsets"][0], 8 + int(n) + e["data_offsets"][1]
            fh.seek(start)
            left = end - start
            while left > 0:
                chunk = block[: min(left, len(block))]
                fh.write(chunk)
                left -= len(chunk)
    return out


RSS_CHILD = """
import resource, sys, json
def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
from eagle3kit.checkpoint.inspection import inspect_checkpoint
before, cur0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, rss_kb()
r = inspect_checkpoint(sys.argv[1])
after, cur1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, rss_kb()
grow, cur = after - before, cur1 - cur0
print(json.dumps({"grow_kb": grow, "cur_kb": cur, "torch": "torch" in sys.modules}))
"""


def _cli() -> str:
    """This interpreter's eagle3kit script (a venv need not be activated), else PATH's."""
    here = Path(sys.executable).with_name("eagle3kit")
    return str(here) if here.exists() else "eagle3kit"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--keep", help="write the drafter here and keep it")
    ap.add_argument("--json", help="write the figures here (a result file)")
    args = ap.parse_args()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench_inspect_"))
    d = tmp / "kimi-k2-drafter"
    try:
        t0 = time.perf_counter()
        if not (d / "model.safetensors").exists():
            write_real_drafter(d)
        size = (d / "model.safetensors").stat().st_size
        print(f"environment: {environment()}")
        print(f"drafter: {d} ({size / 2**30:.2f} GiB, written in {time.perf_counter() - t0:.1f} s)")

        from eagle3kit.checkpoint.inspection import inspect_checkpoint

        header = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            inspect_checkpoint(str(d))
            header.append(time.perf_counter() - t)

        from safetensors import safe_open

        full = []
        for _ in range(max(2, math.ceil(args.repeats / 2))):
            t = time.perf_counter()
            with safe_open(d / "model.safetensors", framework="pt") as f:
                total = sum(
                    f.get_tensor(k).clone().numel() for k in f.keys()
                )  # clone: really read the bytes
            full.append(time.perf_counter() - t)
        assert total > 1e9

        rss = json.loads(
            subprocess.run(
                [sys.executable, "-c", RSS_CHILD, str(d)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        procs = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            subprocess.run([_cli(), "inspect", str(d), "--json"], capture_output=True, check=True)
            procs.append(time.perf_counter() - t)

        import statistics

        ratio = statistics.median(full) / statistics.median(header)
        print(f"{'measure':42} {'seconds':>10}")
        print(f"{'header-only inspect (in-process)':42} {stats(header)}")
        print(f"{'get_tensor for every tensor (warm cache)':42} {stats(full)}")
        print(f"{'whole process: eagle3kit inspect --json':42} {stats(procs)}")
        print(
            f"speedup header-only vs full load (medians): {ratio:.0f}x   [target >= 100x: "
            f"{'PASS' if ratio >= 100 else 'FAIL'}]"
        )
        print(
            f"peak RSS growth during inspect: {rss['grow_kb'] / 1024:.1f} MiB, torch imported: "
            f"{rss['torch']}   [target < 50 MB: "
            f"{'PASS' if rss['grow_kb'] * 1024 < 50e6 else 'FAIL'}]"
        )
        print(
            f"whole-process median {statistics.median(procs):.3f} s   [target < 1 s: "
            f"{'PASS' if statistics.median(procs) < 1 else 'FAIL'}]"
        )
        if args.json:
            from _results import write_result

            doc = {"drafter_bytes": size, "header_s": header, "full_load_s": full}
            doc |= {"process_s": procs, "speedup_median": ratio, "rss": rss}
            write_result(args.json, "eagle3kit.bench_inspect", doc)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
