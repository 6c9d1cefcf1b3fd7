"""The --serve side of the peers' step scripts (speculators_step.py,
speculators_dflash_step.py), run in the peer's venv: the line protocol that
benchmarks/bench_train.py's `PeerSteps` speaks.

    peer -> {header JSON}        once its model is built and one warm-up step is done
    bench -> step                 per step to time
    peer -> {"step_s": s}
"""

from __future__ import annotations

import json
import sys
import time


def timed(step, device: str = "cpu") -> float:
    """Seconds one `step()` takes (CUDA work waited for)."""
    t0 = time.perf_counter()
    step()
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    return time.perf_counter() - t0


def serve(head: dict, step, device: str = "cpu") -> None:
    """Print `head`, then time one step per "step" line read on stdin."""
    print(json.dumps(head), flush=True)
    for line in sys.stdin:
        if line.strip() == "step":
            print(json.dumps({"step_s": timed(step, device)}), flush=True)
