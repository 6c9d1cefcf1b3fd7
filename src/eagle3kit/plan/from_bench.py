"""`eagle3kit plan --from BENCH.json` for the JSON of `eagle3kit bench --url ... --json`
(kind "eagle3kit.bench-live"): its top-level accept_len (this run's tau, from the engine's
counters or per-request fields), depth (the drafts per step the server's settings allow),
cycle_ms (tau x the speculative deployment's per-token time), decode_ms (the plain
deployment's per-token time), new_tokens and prefill_ms (median completion length and TTFT).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eagle3kit.core.errors import Eagle3Error, bad

KIND = "eagle3kit.bench-live"
FIELDS = ("accept_len", "depth", "cycle_ms", "decode_ms", "new_tokens", "prefill_ms")
GROUPS = {  # a figure from the file is used only when the user gave none of its group
    "new_tokens": ("new_tokens",),
    "prefill_ms": ("prefill_ms",),
    "decode_ms": ("baseline_tps", "decode_ms"),
    "cycle_ms": ("cycle_ms", "draft_ms", "verify_ms", "verify_fit"),
    "accept_len": ("acceptance", "acceptance_file", "accept_len"),
    "depth": ("depth",),
}


def read_doc(path: str | Path) -> Any:
    p = Path(path)
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise Eagle3Error(f"{p}: no such file") from None
    except (OSError, ValueError) as e:
        raise bad(str(p), f"expected JSON, found unreadable JSON ({e})") from e


def is_bench_live(path: str | Path) -> bool:
    doc = read_doc(path)
    return isinstance(doc, dict) and doc.get("kind") == KIND


def bench_inputs(path: str | Path) -> dict[str, Any]:
    """The plan inputs a bench-live JSON carries (accept_len required)."""
    doc = read_doc(path)
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise bad(str(path), f"kind: expected {KIND!r} (the output of `bench --url --json`)")
    out: dict[str, Any] = {}
    for key in FIELDS:
        v = doc.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise bad(str(path), f"{key}: expected a number, found {v!r}")
        if v is not None:
            out[key] = int(v) if key == "depth" else v
    if "accept_len" not in out:
        raise bad(
            str(path),
            "accept_len: expected a number, found none (the servers reported no acceptance; "
            "see the run's errors)",
        )
    return out


def plan_args_from_bench(path: str | Path, given: dict[str, Any]) -> dict[str, Any]:
    """`plan`'s options filled from the bench-live JSON where the user gave nothing."""
    f = bench_inputs(path)
    out = {k: given.get(k) for k in FIELDS}
    for key, group in GROUPS.items():
        if key in f and all(given.get(g) is None for g in group):
            out[key] = f[key]
    return out
