"""What the engine probes share (benchmarks/engine_check_vllm.py, engine_check_sglang.py).

They run in the engines' own venvs, so this module needs only the standard library and torch
(imported where used), never eagle3kit. The record is the interface of
benchmarks/engine_check.py: one JSON line per case.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path


def record(engine: str, **kw) -> dict:
    """A refused record with every field of the interface, updated with ``kw``."""
    base = {
        "engine": engine,
        "version": None,
        "outcome": "refused",
        "stage": None,
        "error": None,
        "architecture": None,
        "engine_layer_ids": None,
        "captured_h": None,
        "flags_effective": {},
        "draft_vocab_size": None,
        "vocab_map": None,
        "tensors_consumed": [],
        "tensors_unused": [],
        "params_unfilled": [],
        "params_from_target": [],
        "shims": [],
        "notes": [],
    }
    base.update(kw)
    return base


def first_line(e: BaseException) -> str:
    """The error's first line; for pydantic's "N validation error for X" the line after it,
    cut before vLLM's list of every supported architecture."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()] or [""]
    line = lines[1] if "validation error for" in lines[0] and len(lines) > 1 else lines[0]
    line = line.split(" Supported architectures:")[0]
    return f"{type(e).__name__}: {line}"[:400]


def traced(weights: Iterable, names: list[str]) -> Iterator:
    """The engine's own (name, tensor) stream of our file, every floating tensor replaced by a
    constant: its index + 1 (same shape and dtype), so each parameter shows what landed in it."""
    import torch

    for name, t in weights:
        names.append(name)
        if t.dtype.is_floating_point:
            t = torch.full_like(t, float(len(names)))
        yield name, t


def seen_marks(p, n_names: int) -> set[int]:
    """The tensor indices (1..n_names) whose constant landed in parameter ``p``."""
    import torch

    vals = torch.unique(p[~torch.isnan(p)].float()).tolist()
    return {int(v) for v in vals if float(v).is_integer() and 1 <= v <= n_names}


def split_names(names: list[str], seen: set[int], d2t_used: bool) -> tuple[list, list]:
    """(consumed, unused) file tensors: d2t by ``d2t_used`` (an integer map leaves no mark),
    t2d never (no engine reads it), every other tensor when its constant landed somewhere."""
    consumed, unused = [], []
    for i, n in enumerate(names, 1):
        ok = d2t_used if n == "d2t" else (False if n == "t2d" else i in seen)
        (consumed if ok else unused).append(n)
    return consumed, unused


def main(
    probe: Callable[[Path], dict],
    fail: Callable[..., dict],
    finish: Callable[[dict, Path], str],
) -> int:
    """Run ``probe`` on every CASE in argv; print one record line per case. ``fail`` builds
    the record of a crashed probe, ``finish`` sets the shims and returns the line."""
    for arg in sys.argv[1:]:
        case_dir = Path(arg).resolve()
        try:
            rec = probe(case_dir)
        except Exception as e:  # noqa: BLE001 - a crash of the probe itself
            traceback.print_exc()
            rec = fail(outcome="probe-failed", error=first_line(e))
        rec["case"] = case_dir.name
        sys.stdout.flush()
        print(finish(rec, case_dir), flush=True)
    return 0


def one_process_gloo(init: Callable[..., None], prefix: str) -> None:
    """The engine's own ``init_distributed_environment`` as a one-process gloo group (a CPU
    shim for its tensor-parallel layers), rendezvous through a fresh temp file."""
    import os
    import tempfile

    fd, path = tempfile.mkstemp(prefix=prefix)
    os.close(fd)
    os.unlink(path)
    init(
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method=f"file://{path}",
        backend="gloo",
    )
