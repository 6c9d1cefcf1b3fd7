"""The inputs of `plan --methods`: measured costs per concurrency level, and each candidate's
measured per-position acceptance, read from eagle3kit JSON (docs/plan.md "Methods" states the
format for other producers).

Costs: any JSON object with a top-level ``"costs"`` object (`eagle3kit bench --levels ...
--json` writes one):

    "costs": {"levels": [{"concurrency": 1, "plain_ms": 5.1,
                          "verify_ms": {"2": 5.6, "4": 6.3, "8": 8.0},
                          "pass_ms": {"eagle3": 1.2, "dflash": 2.0},
                          "overhead_ms": {"eagle3": 0.7, "ngram": 0.4}}, ...],
              "prefill_ms": 21.0, "new_tokens": 64.0}

Acceptance: an ``eagle3kit.eval`` document (offline or online) or an ``eagle3kit.bench``
document. An eval names its method in ``"method"`` (one of core/registry.py's; a decoding
loop's name such as ``"chain"``/``"tree"`` read as the method it runs, no field as the default
method, with a note) and carries
``per_position_acceptance`` (cumulative P(a >= i), i = 1..depth) and ``cycles``. A bench
row carries the same plus ``"method"`` and, for lookup and trees, ``drafted_per_cycle``.
Where a file gives no per-position acceptance, the candidate is refused by name.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from eagle3kit.core import registry
from eagle3kit.core.artifacts import kind_of
from eagle3kit.core.errors import bad
from eagle3kit.plan.from_file import read_doc
from eagle3kit.plan.methods import Candidate, LevelCosts


def _pos(where: str, key: str, v: Any, *, zero_ok: bool = False) -> float:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or v < 0 or (v == 0 and not zero_ok):
        raise bad(where, f"{key}: expected a number > 0, found {v!r}")
    return float(v)


def _ms_map(where: str, key: str, doc: Any, *, signed: bool = False) -> dict[str, float]:
    """name -> ms; `signed`: any finite number (a loop's overhead beside isolated forwards
    may come out below zero)."""
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise bad(where, f"{key}: expected an object name -> ms, found {type(doc).__name__}")
    out = {}
    for k, v in doc.items():
        if signed and _num(v) is None:
            raise bad(where, f"{key}.{k}: expected a number, found {v!r}")
        out[str(k)] = float(v) if signed else _pos(where, f"{key}.{k}", v, zero_ok=True)
    return out


def _level(where: str, i: int, lv: Any) -> LevelCosts:
    at = f"costs.levels[{i}]"
    if not isinstance(lv, dict):
        raise bad(where, f"{at}: expected an object, found {type(lv).__name__}")
    c = lv.get("concurrency")
    if isinstance(c, bool) or not isinstance(c, int) or c < 1:
        raise bad(where, f"{at}.concurrency: expected an integer >= 1, found {c!r}")
    vm = lv.get("verify_ms") or {}
    if not isinstance(vm, dict):
        raise bad(where, f"{at}.verify_ms: expected an object n -> ms, found {vm!r:.60}")
    pts = []
    for n, ms in vm.items():
        if not str(n).isdigit() or int(n) < 1:
            raise bad(where, f"{at}.verify_ms: expected token counts n >= 1 as keys, found {n!r}")
        pts.append((int(n), _pos(where, f"{at}.verify_ms.{n}", ms)))
    return LevelCosts(
        concurrency=c,
        plain_ms=_pos(where, f"{at}.plain_ms", lv.get("plain_ms")),
        verify_ms=tuple(sorted(pts)),
        pass_ms=_ms_map(where, f"{at}.pass_ms", lv.get("pass_ms")),
        overhead_ms=_ms_map(where, f"{at}.overhead_ms", lv.get("overhead_ms"), signed=True),
    )


def read_costs(path: str | Path) -> tuple[list[LevelCosts], float | None, float | None]:
    """(levels, prefill_ms, new_tokens) from a document's ``"costs"`` object."""
    where = str(path)
    doc = read_doc(path)
    costs = doc.get("costs") if isinstance(doc, dict) else None
    if not isinstance(costs, dict):
        raise bad(
            where,
            "costs: expected an object with levels (eagle3kit bench --levels ... --json), "
            "found none",
        )
    return costs_of(costs, where)


def costs_of(costs: dict, where: str) -> tuple[list[LevelCosts], float | None, float | None]:
    """(levels, prefill_ms, new_tokens) of a ``"costs"`` object (read_costs, the demo)."""
    levels = costs.get("levels")
    if not isinstance(levels, list) or not levels:
        raise bad(where, f"costs.levels: expected a non-empty list, found {levels!r:.60}")
    out = [_level(where, i, lv) for i, lv in enumerate(levels)]
    seen = [lv.concurrency for lv in out]
    if len(set(seen)) != len(seen):
        raise bad(where, f"costs.levels: expected each concurrency once, found {seen}")
    pf, nt = costs.get("prefill_ms"), costs.get("new_tokens")
    prefill = _pos(where, "costs.prefill_ms", pf, zero_ok=True) if pf is not None else None
    new = _pos(where, "costs.new_tokens", nt) if nt is not None else None
    return out, prefill, new


def _method_of(where: str, name: Any) -> tuple[str, str | None]:
    """(method, note) from a document's "method" field."""
    if name is None:
        return registry.DEFAULT, f'no "method" field: read as {registry.DEFAULT}'
    found = registry.find(name) or registry.of_decoder(name)
    if found is not None:
        return found.name, None
    raise bad(where, f"method: expected one of {', '.join(registry.names())}, found {name!r}")


def _cumulative(where: str, key: str, pp: Any) -> tuple[float, ...]:
    if not isinstance(pp, list) or not pp:
        raise bad(
            where,
            f"{key}: expected per-position acceptance P(a >= i) as a non-empty list, found "
            f"{pp!r:.60} (this candidate cannot be priced per depth)",
        )
    vals = []
    for i, p in enumerate(pp):
        ok = isinstance(p, int | float) and not isinstance(p, bool) and 0.0 <= p <= 1.0
        if not ok:
            raise bad(where, f"{key}[{i}]: expected a rate in [0, 1], found {p!r}")
        vals.append(float(p))
    if any(b > a + 1e-12 for a, b in zip(vals, vals[1:], strict=False)):
        raise bad(where, f"{key}: expected P(a >= i), non-increasing in i, found {vals}")
    return tuple(vals)


def _cycles(doc: dict) -> int | None:
    c = doc.get("cycles")
    return int(c) if isinstance(c, int | float) and not isinstance(c, bool) and c > 0 else None


def _from_eval(doc: dict, where: str, label: str | None) -> list[Candidate]:
    name, _ = _method_of(where, doc.get("method"))
    tree = doc.get("method") == "tree"
    pp = _cumulative(where, "per_position_acceptance", doc.get("per_position_acceptance"))
    return [_candidate(doc, doc, where, name, tree, pp, label)]


def _candidate(
    row: dict,
    doc: dict,
    where: str,
    name: str,
    tree: bool,
    pp: tuple[float, ...],
    label: str | None,
) -> Candidate:
    """A candidate from one measured row of `doc` (an eval document is its own row);
    `label` None: the method's name, "(tree)" after a tree's."""
    base = f"{name} (tree)" if tree else name
    return Candidate(
        label=label or base,
        method=name,
        per_position=pp,
        cycles=_cycles(row),
        drafted=_num(row.get("drafted_per_cycle")),
        passes_per_cycle=len(pp) if tree else None,
        draft=doc.get("drafter") if isinstance(doc.get("drafter"), str) else None,
        source=where,
        cost_key=base,
    )


def _num(v: Any) -> float | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def _from_bench(doc: dict, where: str, label: str | None) -> list[Candidate]:
    out = []
    for i, row in enumerate(doc.get("methods") or []):
        runs = registry.of_decoder(row.get("name")) if isinstance(row, dict) else None
        if runs is None:
            continue  # greedy and transformers' lookup: not a candidate
        name, _ = _method_of(where, row.get("method") or runs.name)
        tree = row["name"] == "tree"
        key = f"methods[{i}].per_position_acceptance"
        pp = _cumulative(where, key, row.get("per_position_acceptance"))
        base = f"{name} (tree)" if tree else name
        out.append(
            _candidate(row, doc, where, name, tree, pp, f"{label} {base}" if label else None)
        )
    return out


def read_candidates(path: str | Path, label: str | None = None) -> list[Candidate]:
    """The candidates an eval or bench JSON carries (docstring above)."""
    where = str(path)
    doc = read_doc(path)
    kind = kind_of(doc)
    if kind == "eval":
        return _from_eval(doc, where, label)
    if kind == "bench":
        out = _from_bench(doc, where, label)
        if not out:
            raise bad(where, "methods: expected a lookup, chain or tree row, found none")
        return out
    found = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
    raise bad(where, f"kind: expected 'eagle3kit.eval' or 'eagle3kit.bench', found {found!r}")


def parse_accept_arg(text: str) -> tuple[str | None, str]:
    """`--accept LABEL=FILE` or `--accept FILE` -> (label or None, file)."""
    label, sep, path = text.partition("=")
    if sep and label and not Path(text).exists():
        return label, path
    return None, text


def _live_label(dep: dict, i: int, where: str) -> tuple[str, str]:
    """(method, label) of a speculative deployment from what the server said it runs: the
    method live/server.py read off it (P-EAGLE, SGLang's MTP-as-EAGLE), else its algorithm."""
    spec = (dep.get("server") or {}).get("speculative") or {}
    algo = str(spec.get("algorithm") or "")
    found = registry.find(spec.get("method")) or registry.from_engine("any", algo)
    if found is None:
        raise bad(
            where,
            f"deployments[{i}].server.speculative.algorithm: expected one of "
            f"{', '.join(registry.engine_names())}, found {algo or 'none'} (vLLM says it only "
            "with VLLM_SERVER_DEV_MODE=1)",
        )
    return found.name, found.name


def _view(lv: dict, suite: str | None, where: str) -> dict:
    """A level's figures, or one suite's: the pooled decode tok/s (all decoded tokens / all
    decode time: the rate the cycle model predicts; files before it: the median request's),
    acceptance inline."""
    if suite is None:
        tps = lv.get("decode_tokens_per_s_pooled")
        tps = tps or (lv.get("decode_tokens_per_s") or {}).get("median")
        return {"tps": tps, **(lv.get("acceptance") or {})}
    s = (lv.get("suites") or {}).get(suite)
    if s is None:
        raise bad(where, f"levels[].suites: expected suite {suite!r}, found none")
    return {"tps": s.get("decode_tokens_per_s_pooled") or s.get("decode_tokens_per_s"), **s}


def read_live(
    path: str | Path, suite: str | None = None
) -> tuple[list[LevelCosts], list[Candidate]]:
    """From a `bench --url ... --baseline-url ... --json` run (or one `suite` of it): per
    level, the baseline's plain step (1000 / its pooled decode tok/s) and each
    speculative server's whole cycle (1000 * tau / its pooled decode tok/s), and each server's
    per-position acceptance at its lowest level as a candidate."""
    where = str(path)
    doc = read_doc(path)
    if kind_of(doc) != "bench-live":
        found = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        raise bad(where, f"kind: expected 'eagle3kit.bench-live', found {found!r}")
    deps = [d for d in doc.get("deployments") or [] if isinstance(d, dict)]
    base = next((d for d in deps if d.get("role") == "baseline"), None)
    if base is None:
        raise bad(where, "deployments: expected a baseline (bench --baseline-url), found none")
    plain = {lv["concurrency"]: _view(lv, suite, where) for lv in base.get("levels") or []}
    cycles: dict[int, dict[str, float]] = {c: {} for c in plain}
    cands, seen = [], set()
    for i, dep in enumerate(deps):
        if dep.get("role") != "speculative":
            continue
        name, label = _live_label(dep, i, where)
        if label in seen:
            label = f"{label} {dep.get('url')}"
        seen.add(label)
        levels = sorted(dep.get("levels") or [], key=lambda lv: lv["concurrency"])
        acc = [_view(lv, suite, where) for lv in levels]
        if not levels or not acc[0].get("per_position_acceptance"):
            raise bad(where, f"deployments[{i}]: expected per-position acceptance, found none")
        pp = _cumulative(
            where, f"deployments[{i}].per_position_acceptance", acc[0]["per_position_acceptance"]
        )
        steps = (acc[0].get("counters") or {}).get("drafts")
        cands.append(Candidate(label, name, pp, cycles=int(steps) if steps else None, source=where))
        for lv, a in zip(levels, acc, strict=True):
            tps = a["tps"]
            if lv["concurrency"] in cycles and tps and a.get("tau_online"):
                cycles[lv["concurrency"]][label] = 1000.0 * a["tau_online"] / tps
    out = []
    for c, lv in sorted(plain.items()):
        tps = lv["tps"]
        if tps:
            out.append(LevelCosts(c, 1000.0 / tps, (), cycle_ms=cycles[c]))
    return out, cands
