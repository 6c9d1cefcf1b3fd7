"""Environment line printed by every benchmark."""

from __future__ import annotations

import os
import platform
import statistics
import sys


def environment() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    parts = [
        f"python {platform.python_version()}",
        f"{platform.system()} {platform.machine()}",
        cpu,
        f"{os.cpu_count()} cpus",
    ]
    if "torch" in sys.modules:
        import torch

        parts.append(f"torch {torch.__version__} ({torch.get_num_threads()} threads)")
    return " | ".join(parts)


def stats(xs: list[float]) -> str:
    return (
        f"median {statistics.median(xs):.4g}  min {min(xs):.4g}  max {max(xs):.4g}  (n={len(xs)})"
    )
