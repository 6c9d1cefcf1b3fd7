"""The measured costs `plan --methods` prices every method with, per concurrency level.

Level 1 is read off the bench's own decoding loops (measure/bench.py), over every cycle of the
run, so the costs saw the same machine as the tok/s beside them:
- plain_ms: plain decoding's mean step; verify_ms[n]: the mean verify forward of the cycles
  that sent n tokens (plain steps n = 1, prompt lookup's cycles 1 + its drafts, the chain's
  k + 1); pass_ms[method]: the chain's mean drafting time per cycle / the method's passes per
  cycle (k for EAGLE-3 and MTP, one for a DFlash block or P-EAGLE's parallel pass), keyed
  by the drafter's method (its `method`);
- overhead_ms[label]: each loop's mean cycle minus the passes and verify the model composes it
  of (bookkeeping, the lookup's string match, a tree's mask).
Higher levels c (c sequences decoding together, one batch) scale level 1 by isolated forwards
at batch c over batch 1, on a prompt of the bench held c times: one target forward of n new
tokens per sequence ([c, n], n = 1 for the plain step) and one drafter pass over its cache
(EAGLE-3: one step [c, 1]; an MTP head: one step [c, 1] on the target's final hidden state;
DFlash: one block [c, 1 + K] after the prompt's context), each the median of `repeats` calls
(the n's interleaved) after a warm-up, the caches cropped back to the prompt after every call.
The overhead is kept at level 1's. A P-EAGLE drafter's costs are measured at level 1 only.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from eagle3kit.core import registry


def median_ms(fn: Callable[[], None], repeats: int, sync: Callable[[], None]) -> float:
    fn()  # warm-up, discarded
    sync()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


def _interleaved(fns: dict, repeats: int, sync) -> dict:
    """The median ms of each function, the functions taking turns in every repeat (so a burst
    of load elsewhere on the machine hits them alike)."""
    for fn in fns.values():
        fn()  # warm-up, discarded
    ts: dict = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            ts[k].append(time.perf_counter() - t0)
    return {k: 1e3 * statistics.median(v) for k, v in ts.items()}


def _sync_of(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def level_costs(
    target, drafter, prompt: Sequence[int], c: int, ns: Sequence[int], repeats: int
) -> dict[str, Any]:
    """plain_ms, verify_ms {n: ms} and (with a drafter) pass_ms at level c (module doc)."""
    sync = _sync_of(target.device)
    ids = torch.tensor([list(prompt)] * c, device=target.device)  # [c, P]
    p = ids.shape[1]
    with torch.inference_mode():
        out = target.prefill(ids)

        def verify(n: int) -> Callable[[], None]:
            toks = ids[:, -1:].expand(c, n).contiguous()  # [c, n]

            def run() -> None:
                target.verify(toks)
                target.crop(p)

            return run

        times = _interleaved({n: verify(n) for n in (1, *ns)}, repeats, sync)
        doc: dict[str, Any] = {
            "concurrency": c,
            "plain_ms": times.pop(1),
            "verify_ms": {str(n): ms for n, ms in times.items()},
            "pass_ms": {},
        }
        if drafter is not None:
            method, ms = _drafter_pass(target, drafter, ids, out.aux, repeats, sync)
            doc["pass_ms"][method] = ms
    target.reset()
    return doc


def _drafter_pass(target, drafter, ids, aux, repeats: int, sync) -> tuple[str, float]:
    """(the drafter's method, the ms of one of its passes at batch ids.shape[0], as its
    method's measure part times it: `pass_ms`)."""
    part = registry.part(drafter.method, "measure")
    return drafter.method, part.pass_ms(target, drafter, ids, aux, repeats, sync)


def check_levels(drafter, levels: Sequence[int]) -> None:
    """Refuse, before any timing, the levels whose drafter pass its method's measure part
    cannot time here (`check_levels`)."""
    check = getattr(registry.part(drafter.method, "measure"), "check_levels", None)
    if check is not None:
        check(levels)


def like(module, x: torch.Tensor) -> torch.Tensor:
    p = next(module.parameters())
    return x.to(device=p.device, dtype=p.dtype)


def _ratio(iso: dict[str, Any], base: dict[str, Any]) -> Callable[[str, str], float]:
    return lambda group, key: (
        iso[group][key] / base[group][key] if group != "plain_ms" else iso[group] / base[group]
    )


def loop_costs(runs, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Level 1 from the bench's loops (module doc)."""
    from eagle3kit.measure import timing as T

    by_n: dict[int, list[float]] = {}
    for m, n_of in (("greedy", lambda c: 1), ("lookup", lambda c: 1 + c.drafted)):
        for x in T.of(runs, m):
            for c in x.stats.cycles:
                by_n.setdefault(n_of(c), []).append(c.verify_s)
    chain = [c for x in T.of(runs, "chain") for c in x.stats.cycles]
    for c in chain:
        by_n.setdefault(1 + c.drafted, []).append(c.verify_s)
    verify = {n: 1e3 * statistics.fmean(v) for n, v in sorted(by_n.items())}
    doc: dict[str, Any] = {
        "concurrency": 1,
        "plain_ms": verify.pop(1) if 1 in verify else None,
        "verify_ms": {str(n): ms for n, ms in verify.items()},
        "pass_ms": {},
    }
    row = next((r for r in rows if r.get("name") == "chain"), None)
    if chain and row and row.get("depth"):
        per_cycle = 1e3 * statistics.fmean(c.draft_s for c in chain)
        method = row.get("method", registry.DEFAULT)
        doc["pass_ms"][method] = per_cycle / _passes(method, row["depth"])
    doc["overhead_ms"] = _overhead(runs, rows, doc)
    return doc


def _passes(method: str, depth: int, tree: bool = False) -> int:
    """Drafter passes per cycle (core/registry.py's record; a tree: one per level)."""
    return depth if tree else registry.get(method).draft_passes(depth)


def _overhead(runs, rows, level1: dict[str, Any]) -> dict[str, float]:
    """Each loop's mean cycle minus the composed passes + verify(1 + drafted)."""
    from eagle3kit.plan.methods import LevelCosts

    lv = LevelCosts(
        1,
        level1["plain_ms"],
        tuple(sorted((int(n), ms) for n, ms in level1["verify_ms"].items())),
        dict(level1["pass_ms"]),
    )
    out = {}
    for r in rows:
        if "cycle_ms" not in r or r.get("name") not in ("lookup", "chain", "tree"):
            continue
        method = r.get("method", registry.DEFAULT)
        passes = 0 if r["name"] == "lookup" else _passes(method, r["depth"], r["name"] == "tree")
        model = passes * lv.pass_ms.get(method, 0.0) + lv.verify(1 + r["drafted_per_cycle"])
        out[r["label"]] = r["cycle_ms"] - model
    return out


def level_table(
    target,
    drafter,
    prompt: Sequence[int],
    levels: Sequence[int],
    level1: dict[str, Any],
    repeats: int = 7,
) -> list[dict[str, Any]]:
    """Level 1 as the loops measured it, and each higher level scaled by isolated forwards."""
    ns = [int(n) for n in level1["verify_ms"]]
    out = []
    base = None
    for c in sorted(set(levels) | {1}):
        iso = level_costs(target, drafter, prompt, c, ns, repeats)
        if c == 1:
            base = iso
            lv = dict(level1)
        else:
            r = _ratio(iso, base)
            lv = {
                "concurrency": c,
                "plain_ms": level1["plain_ms"] * r("plain_ms", ""),
                "verify_ms": {n: ms * r("verify_ms", n) for n, ms in level1["verify_ms"].items()},
                "pass_ms": {k: ms * r("pass_ms", k) for k, ms in level1["pass_ms"].items()},
                "overhead_ms": dict(level1["overhead_ms"]),
            }
        lv["isolated"] = iso  # the forwards the scaling used, for the record
        if c in levels:
            out.append(lv)
    return out
