"""`eagle3kit plan --from FILE`: the measured figures of an `eval --json` or a
`bench --url --json` document, told apart by their kind (core/artifacts.py).

- kind "eagle3kit.eval" (offline or online): accept_len and depth; online also cycle_ms,
  decode_ms and the request shape new_tokens and prefill_ms.
- kind "eagle3kit.bench-live": its top-level accept_len (this run's tau, from the engine's
  counters or per-request fields), depth (the drafts per step the server's settings allow),
  cycle_ms (tau x the speculative deployment's per-token time), decode_ms (the plain
  deployment's per-token time), new_tokens and prefill_ms (median completion length and TTFT).

A figure from the file is used only where the user gave none of its group of options.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eagle3kit.core.artifacts import kind_of
from eagle3kit.core.errors import Eagle3Error, bad

KINDS = {"eval": "`eagle3kit eval --json`", "bench-live": "`eagle3kit bench --url --json`"}
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


def file_inputs(path: str | Path) -> dict[str, Any]:
    """The plan inputs an eval or bench-live JSON carries (accept_len required)."""
    doc = read_doc(path)
    kind = kind_of(doc)
    if kind not in KINDS:
        want = " or ".join(f"'eagle3kit.{k}' (the output of {v})" for k, v in KINDS.items())
        raise bad(str(path), f"kind: expected {want}, found {kind and 'eagle3kit.' + kind!r}")
    out: dict[str, Any] = {}
    for key in FIELDS:
        v = doc.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise bad(str(path), f"{key}: expected a number, found {v!r}")
        if v is not None:
            out[key] = int(v) if key == "depth" else v
    if "accept_len" not in out:
        why = " (the servers reported no acceptance; see the run's errors)"
        raise bad(
            str(path), "accept_len: expected a number, found none" + why * (kind == "bench-live")
        )
    return out


def plan_args_from_file(path: str | Path, given: dict[str, Any]) -> dict[str, Any]:
    """`plan`'s options filled from the file where the user gave nothing for that group."""
    f = file_inputs(path)
    out = {k: given.get(k) for k in FIELDS}
    for key, group in GROUPS.items():
        if key in f and all(given.get(g) is None for g in group):
            out[key] = f[key]
    return out
