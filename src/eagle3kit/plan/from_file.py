"""`eagle3kit plan --from FILE` and `--acceptance-file FILE`: the measured figures of an
eagle3kit JSON document, told apart by its kind (core/artifacts.py), never by its keys.

Every producer writes per-position acceptance *cumulative*: P(a >= i), the share of cycles
whose i-th draft was accepted, so tau = 1 + sum_i P(a >= i). The cycle model (forecast.py)
takes *conditional* rates p_i = P(a >= i) / P(a >= i-1); `measured` converts, and uses the
per-position rates only where they give back the file's own tau (to 1e-6), else its tau alone.

- "eagle3kit.eval" (offline, online, from a store): tau_walk offline, tau_online online,
  depth, per_position_acceptance; online also cycle_ms, decode_ms, new_tokens, prefill_ms.
- "eagle3kit.bench" (in-process `bench --json`): the "chain" method's row (else "tree"):
  tau_online, depth, cycle_ms, per_position_acceptance; decode_ms is greedy's median step.
- "eagle3kit.bench-live" (`bench --url --json`): the top-level tau_online, depth, cycle_ms,
  decode_ms, new_tokens, prefill_ms (live/summary.py `plan_fields`: the first speculative
  deployment at its lowest level, whose acceptance also gives the per-position rates).
- "eagle3kit.probe" (`probe --json`, models or stores): the drafter on the new target:
  acceptance.target.tau_walk (the walked tau, what decoding sees; the probe's verdict reads
  the every-position tau, which reads higher), depth; with speeds, break_even's baseline_tps
  and cycle_ms.
- "eagle3kit.probe-live" (`probe --url --json`): tau_online.new, and from its bench the NEW
  deployment's figures as for bench-live.

A figure from the file is used only where the user gave none of its group of options; the
file's tau is the plan's `tau` (`--accept-len`). Files written before the accept lengths got
one name each are read with `core.retired.current`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3kit.core.artifacts import kind_of
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.retired import current
from eagle3kit.plan.forecast import conditional, rates_of

FIELDS = ("tau", "depth", "cycle_ms", "decode_ms", "new_tokens", "prefill_ms")
GROUPS = {  # a figure from the file is used only when the user gave none of its group
    "new_tokens": ("new_tokens",),
    "prefill_ms": ("prefill_ms",),
    "decode_ms": ("baseline_tps", "decode_ms"),
    "cycle_ms": ("cycle_ms", "draft_ms", "verify_ms", "verify_fit"),
    "tau": ("acceptance", "acceptance_file", "tau"),
    "depth": ("depth",),
}
TAU_TOL = 1e-6  # per-position rates are used only when 1 + sum P(a >= i) gives the file's tau


@dataclass(frozen=True)
class Measured:
    """What one measurement contributes: its figures (FIELDS) and, when they agree with its
    tau, the per-position conditional rates P(a >= i | a >= i-1)."""

    kind: str
    figures: dict[str, float]
    per_position: tuple[float, ...] | None


def read_doc(path: str | Path) -> Any:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise Eagle3Error(f"{p}: expected a JSON file, found no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise bad(str(p), f"expected a readable JSON file, found {type(e).__name__}: {e}") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise bad(str(p), f"expected JSON, found invalid JSON at line {e.lineno}: {e.msg}") from e


def _num(doc: dict, key: str, where: str) -> float | None:
    v = doc.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise bad(where, f"{key}: expected a number, found {v!r}")
    return v


def _figures(doc: dict, keys: tuple[str, ...], where: str) -> dict[str, float]:
    out = {}
    for key in keys:
        v = _num(doc, key, where)
        if v is not None:
            out[key] = int(v) if key == "depth" else v
    return out


def _per_position(cum: Any, tau: float | None, where: str) -> tuple[float, ...] | None:
    """Conditional rates from cumulative ones, when they are valid and give back tau."""
    if tau is None or not isinstance(cum, list) or not cum:
        return None
    ok = all(isinstance(c, int | float) and not isinstance(c, bool) for c in cum)
    if not ok or not all(0.0 <= c <= 1.0 for c in cum):
        raise bad(where, f"per_position_acceptance: expected rates in [0, 1], found {cum!r:.80}")
    if any(b > a for a, b in zip(cum, cum[1:], strict=False)):
        raise bad(
            where,
            f"per_position_acceptance: expected P(a >= i), non-increasing in i, found {cum!r:.80}",
        )
    if abs(1.0 + sum(cum) - tau) > TAU_TOL:
        return None  # e.g. a histogram that does not cover every step: tau alone is priced
    return tuple(conditional(cum))


def _tau(doc: dict, key: str, where: str) -> dict[str, float]:
    """{"tau": doc[key]} when the document carries it, else {}."""
    return {"tau": v} if (v := _num(doc, key, where)) is not None else {}


def _eval(doc: dict, where: str) -> Measured:
    f = _figures(doc, FIELDS, where)
    f |= _tau(doc, "tau_online" if doc.get("mode") == "online" else "tau_walk", where)
    pp = _per_position(doc.get("per_position_acceptance"), f.get("tau"), where)
    return Measured("eval", f, pp)


def _bench(doc: dict, where: str) -> Measured:
    rows = {m.get("name"): m for m in doc.get("methods") or [] if isinstance(m, dict)}
    row = rows.get("chain") or rows.get("tree")
    if row is None:
        found = sorted(str(n) for n in rows) or "none"
        raise bad(
            where, f"methods: expected a 'chain' or 'tree' row (bench --drafter), found {found}"
        )
    f = _tau(row, "tau_online", where)
    f |= _figures(row, ("depth", "cycle_ms"), where) | _figures(doc, ("decode_ms",), where)
    pp = _per_position(row.get("per_position_acceptance"), f.get("tau"), where)
    return Measured("bench", f, pp)


def _lowest_acceptance(doc: dict, url: str | None) -> dict | None:
    """The acceptance block of deployment ``url`` (else the first speculative one) at its
    lowest concurrency level: the one live/summary.py's plan fields come from."""
    deps = [d for d in doc.get("deployments") or [] if isinstance(d, dict)]
    dep = next(
        (d for d in deps if (d.get("url") == url if url else d.get("role") == "speculative")), None
    )
    levels = [lv for lv in (dep or {}).get("levels") or [] if isinstance(lv, dict)]
    if not levels:
        return None
    return min(levels, key=lambda lv: lv.get("concurrency") or 0).get("acceptance")


def _bench_live(doc: dict, where: str) -> Measured:
    f = _figures(doc, FIELDS, where) | _tau(doc, "tau_online", where)
    acc = _lowest_acceptance(doc, None) or {}
    pp = _per_position(acc.get("per_position_acceptance"), f.get("tau"), where)
    return Measured("bench-live", f, pp)


def _probe(doc: dict, where: str) -> Measured:
    target = ((doc.get("acceptance") or {}).get("target")) or {}
    tau = _num(target, "tau_walk", where)
    if tau is None:
        tau = _num(doc.get("tau_every_position") or {}, "target", where)
    f = _figures(doc, ("depth",), where) | ({"tau": tau} if tau is not None else {})
    be = doc.get("break_even") or {}
    if (b := _num(be, "baseline_tps", where)) is not None and b > 0:
        f["decode_ms"] = 1000.0 / b
    if (c := _num(be, "cycle_ms", where)) is not None:
        f["cycle_ms"] = c
    return Measured("probe", f, None)


def _probe_live(doc: dict, where: str) -> Measured:
    tau = _num(doc.get("tau_online") or {}, "new", where)
    bench, url = doc.get("bench") or {}, doc.get("url")
    first = next(
        (d for d in bench.get("deployments") or [] if d.get("role") == "speculative"), None
    )
    f = _figures(bench, FIELDS, where) if first and first.get("url") == url else {}
    f.pop("tau", None)
    f |= {"tau": tau} if tau is not None else {}
    acc = _lowest_acceptance(bench, url) or {}
    pp = _per_position(acc.get("per_position_acceptance"), tau, where)
    return Measured("probe-live", f, pp)


READERS: dict[str, tuple[str, Callable[[dict, str], Measured]]] = {
    "eval": ("`eagle3kit eval --json`", _eval),
    "bench": ("`eagle3kit bench --json`", _bench),
    "bench-live": ("`eagle3kit bench --url --json`", _bench_live),
    "probe": ("`eagle3kit probe --json`", _probe),
    "probe-live": ("`eagle3kit probe --url --json`", _probe_live),
}


def measured(path: str | Path, doc: Any = None) -> Measured:
    """The figures of the measurement at ``path``, by its kind; exit 2 on any other kind or
    when it carries no accept length."""
    doc = current(read_doc(path) if doc is None else doc)
    kind = kind_of(doc)
    if kind not in READERS:
        found = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        want = ", ".join(f"'eagle3kit.{k}'" for k in READERS)
        raise bad(str(path), f"kind: expected {want} (a measurement), found {found!r}")
    m = READERS[kind][1](doc, str(path))
    k = m.figures.get("depth")
    if m.per_position is not None and k is not None and len(m.per_position) < k:
        m = Measured(m.kind, m.figures, None)  # rates short of the depth: its tau alone
    if "tau" not in m.figures:
        why = " (the servers reported no acceptance; see the run's errors)" * kind.endswith("live")
        want = {"eval": "tau_walk or tau_online", "bench": "methods[].tau_online"}
        raise bad(str(path), f"{want.get(kind, 'tau_online')}: expected a number, found none{why}")
    return m


def file_inputs(path: str | Path) -> dict[str, Any]:
    """The plan inputs (FIELDS) the measurement at ``path`` carries (tau required)."""
    return dict(measured(path).figures)


def plan_args_from_file(path: str | Path, given: dict[str, Any]) -> dict[str, Any]:
    """`plan`'s options filled from the file where the user gave nothing for that group. When
    the file's acceptance is taken, ``tau`` is its tau and ``per_position`` its
    conditional rates when they give that tau (else None); plan() takes one of the two."""
    m = measured(path)
    out = {k: given.get(k) for k in FIELDS} | {"per_position": None}
    for key, group in GROUPS.items():
        if key in m.figures and all(given.get(g) is None for g in group):
            out[key] = m.figures[key]
    if out["tau"] is not None and given.get("tau") is None and m.per_position:
        out["per_position"] = m.per_position  # its tau stays in tau: give plan() one
    out["method"] = given.get("method") or _method_of(path)
    return out


def _method_of(path: str | Path) -> str | None:
    """The file's "method" when it names a method of core/registry.py (a DFlash eval:
    "dflash"), so its cycle is priced with that method's drafting cost."""
    from eagle3kit.core import registry

    doc = read_doc(path)
    found = registry.find(doc.get("method") if isinstance(doc, dict) else None)
    return found.name if found else None


def acceptance_from_file(path: str | Path, depth: int | None) -> dict[str, Any]:
    """`--acceptance-file FILE`: ``per_position`` (conditional rates) or ``tau`` (with
    the file's depth when ``depth`` is None). An eagle3kit document is read by its kind; a
    bare list or {"per_position_acceptance": [...]} without a kind holds conditional rates."""
    doc = read_doc(path)
    if isinstance(doc, dict) and "kind" in doc:
        m = measured(path, doc)
        if m.per_position:
            return {"per_position": m.per_position, "tau": None, "depth": depth}
        file_depth = m.figures.get("depth")
        return {
            "per_position": None,
            "tau": m.figures["tau"],
            "depth": depth if depth is not None else file_depth,
        }
    return {"per_position": rates_of(str(path), doc), "tau": None, "depth": depth}


def load_per_position(path: str | Path) -> tuple[float, ...]:
    """Per-position *conditional* rates from a JSON file: a bare list [p1, p2, ...] or
    {"per_position_acceptance": [...]} without a kind holds them as they are; an eagle3kit
    document (eval, bench, bench-live, probe, probe-live) is read by its kind and its
    cumulative P(a >= i) converted (plan/from_file.py)."""
    doc = read_doc(path)
    if not (isinstance(doc, dict) and "kind" in doc):
        return rates_of(str(path), doc)
    m = measured(path, doc)
    if m.per_position is None:
        raise Eagle3Error(
            f"{path}: per_position_acceptance: expected per-position rates that give the file's "
            f"tau {m.figures['tau']:g}, found none (plan --from takes its tau)"
        )
    return m.per_position
