"""Where a measurement ran: Python, OS, CPU, load, and torch/transformers when imported.

benchmarks/ print it beside every figure; `eagle3kit bench` writes it into its JSON. Also
`hub_offline`: whether the user asked for no Hub network (HF_HUB_OFFLINE).
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Iterator
from typing import Any


def hub_offline() -> bool:
    """HF_HUB_OFFLINE set to a true value, read now (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def environment_info() -> dict[str, Any]:
    """Python, OS, CPU, load average, and torch/transformers when the benchmark imported them."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.machine()}",
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }
    if "torch" in sys.modules:
        import torch

        info["torch"] = torch.__version__
        info["threads"] = torch.get_num_threads()
    if "transformers" in sys.modules:
        info["transformers"] = sys.modules["transformers"].__version__
    return info


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' own tqdm bars ("Loading weights ...") and its logging (the
    "LOAD REPORT" table of missing weights) for the block.

    Our progress goes through core/progress.py callbacks; a bar or table transformers draws on
    stderr would interleave with ours and break one-line output. Missing or unexpected weights
    are not left to its warning: the loader refuses them in one line
    (model/completeness.py). The previous state is restored after the block. Note that
    transformers' switch also covers huggingface_hub's download bars while the block runs.
    """
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # transformers absent: nothing to silence
        yield
        return
    was_on, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if was_on:
            hf_logging.enable_progress_bar()
