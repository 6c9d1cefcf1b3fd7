"""convert on the demo's sparse Kimi-K2-shaped drafter (about 2.2 GiB of zero weights, a sparse
file): wall time, bytes actually written, and disk blocks of the output vs its size.

The source comes from eagle3kit.checkpoint.eagle3.synthetic.write_sparse_drafter (the demo's
drafters);
convert reads every tensor (torch) and writes the vLLM layout through
write_safetensors_sparse, which seeks past all-zero 1 MiB runs instead of writing them.
Usage: python benchmarks/bench_convert_sparse.py [--repeats N] [--to vllm|sglang]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _env import environment, stats  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--to", default="vllm")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    from eagle3kit.checkpoint.eagle3.convert import convert
    from eagle3kit.checkpoint.eagle3.synthetic import kimi_k2_spec, write_sparse_drafter

    tmp = Path(tempfile.mkdtemp(prefix="bench_convert_"))
    try:
        src = write_sparse_drafter(tmp / "src", kimi_k2_spec())
        sf = src / "model.safetensors"
        print(
            f"source: {sf.stat().st_size / 2**30:.2f} GiB apparent, "
            f"{sf.stat().st_blocks * 512 / 2**20:.1f} MiB on disk"
        )
        times, on_disk = [], []
        for i in range(args.repeats):
            out = tmp / f"out{i}"
            t0 = time.perf_counter()
            convert(str(src), args.to, str(out))
            times.append(time.perf_counter() - t0)
            f = out / "model.safetensors"
            on_disk.append(f.stat().st_blocks * 512 / 2**20)
            size = f.stat().st_size
            shutil.rmtree(out)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
        print(f"convert --to {args.to}: seconds {stats(times)}")
        print(f"output: {size / 2**30:.2f} GiB apparent, on disk MiB {stats(on_disk)}")
        print(f"peak RSS {peak:.0f} MiB (every tensor is loaded)")
        print(environment())
        print(
            json.dumps(
                {"seconds": times, "on_disk_mib": on_disk, "size": size, "peak_rss_mib": peak}
            )
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        os.sync()


if __name__ == "__main__":
    main()
