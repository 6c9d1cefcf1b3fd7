"""Environment every benchmark prints (and writes into its --json output)."""

from __future__ import annotations

import statistics

import _results  # noqa: F401  (records the code state at the start: _results.AT_START)

from eagle3kit.core.environment import environment_info


def environment() -> str:
    """``environment_info()`` on one line."""
    i = environment_info()
    parts = [
        f"python {i['python']}",
        i["os"],
        i["cpu"],
        f"{i['cpu_count']} cpus",
        f"load {i['load_avg_1m']}",
    ]
    if "torch" in i:
        parts.append(f"torch {i['torch']} ({i['threads']} threads)")
    if "transformers" in i:
        parts.append(f"transformers {i['transformers']}")
    return " | ".join(parts)


def stats(xs: list[float]) -> str:
    return (
        f"median {statistics.median(xs):.4g}  min {min(xs):.4g}  max {max(xs):.4g}  (n={len(xs)})"
    )
