"""`plan` by context length: up to which context does speculation pay, at concurrency C?

The cycle model takes the KV length L as an input. At each length, from a measurement that
carries `by_length` (bench, eval, bench-live, probe; measure/by_length.py):

    cycle_ms(L, k) = passes(k) * pass_ms(L) + verify_ms(L, 1 + k) + overhead_ms(L)   (bench)
                   = the cycle measured whole at L                        (eval --online, live)
    plain_ms(L)    = plain decoding's step at L
    tau(L)         = the acceptance measured in L's bucket
    decode tok/s   = 1000 * tau(L) / cycle_ms(L),   plain 1000 / plain_ms(L)
    break-even tau = cycle_ms(L) / plain_ms(L)                 (the tau needed at L)
    request tok/s  = N / (prefill_ms(L) + (N - 1) / tau(L) * cycle_ms(L))

with the speculative prefill (the drafter's pass over the prompt included) for the request.
The costs are those measured at L; at a length between two measured ones every cost is
interpolated linearly, and outside them refused (nothing is extrapolated). Acceptance comes
from the same file or from another (`--acceptance-file`, its buckets' lengths priced).

"Pays up to N tokens of context": speculation pays at L when tau(L) >= the break-even tau
(decode phase, as `plan` decides); from the shortest length, N is where the margin
tau - break-even crosses zero, interpolated linearly between the last length that pays and
the first that does not; every measured length paying, N is the longest measured (nothing
is claimed beyond it); the shortest not paying, there is no N.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from eagle3kit.core.artifacts import kind_of
from eagle3kit.core.errors import bad
from eagle3kit.plan.from_file import read_doc
from eagle3kit.plan.method_inputs import _cumulative, _from_bench, costs_of
from eagle3kit.plan.methods import Candidate, LevelCosts, cycle_ms


@dataclass(frozen=True)
class LengthCosts:
    """What one context length costs: composed (`level`) or a whole cycle (`cycle_ms`)."""

    length: int
    plain_ms: float
    level: LevelCosts | None = None
    cycle_ms: float | None = None
    prefill_ms: float | None = None  # plain decoding's prompt
    spec_prefill_ms: float | None = None  # the speculative run's (the drafter's pass too)
    new_tokens: float | None = None


@dataclass(frozen=True)
class LengthAcceptance:
    """The acceptance of one bucket: its tau and cumulative per-position rates (may be ())."""

    length: int
    tau: float
    per_position: tuple[float, ...] = ()
    cycles: int | None = None


@dataclass(frozen=True)
class LengthFile:
    """What a by-length measurement carries: per length its costs and its acceptance, and
    the candidate (method, label, drafted) whose cycle the costs compose."""

    where: str
    costs: tuple[LengthCosts, ...]
    acceptance: tuple[LengthAcceptance, ...]
    candidate: Candidate | None
    depth: int | None


def _lerp(a: float | None, b: float | None, w: float) -> float | None:
    return None if a is None or b is None else a + (b - a) * w


def _lerp_map(a: dict[str, float], b: dict[str, float], w: float) -> dict[str, float]:
    return {k: a[k] + (b[k] - a[k]) * w for k in a if k in b}


def _lerp_level(a: LevelCosts, b: LevelCosts, w: float) -> LevelCosts:
    ns = sorted({n for n, _ in a.verify_ms} | {n for n, _ in b.verify_ms})
    return LevelCosts(
        a.concurrency,
        a.plain_ms + (b.plain_ms - a.plain_ms) * w,
        tuple((n, a.verify(n) + (b.verify(n) - a.verify(n)) * w) for n in ns),
        _lerp_map(a.pass_ms, b.pass_ms, w),
        _lerp_map(a.overhead_ms, b.overhead_ms, w),
    )


def costs_at(costs: tuple[LengthCosts, ...], length: int, where: str) -> LengthCosts:
    """The costs at `length`: measured there, or interpolated between the two measured
    lengths around it; refused outside the measured lengths."""
    pts = sorted(costs, key=lambda c: c.length)
    for c in pts:
        if c.length == length:
            return c
    lo = max((c for c in pts if c.length < length), key=lambda c: c.length, default=None)
    hi = min((c for c in pts if c.length > length), key=lambda c: c.length, default=None)
    if lo is None or hi is None:
        raise bad(
            where,
            f"by_length: expected costs measured around context length {length}, found "
            f"lengths {pts[0].length}..{pts[-1].length} (plan does not extrapolate)",
        )
    w = (length - lo.length) / (hi.length - lo.length)
    level = _lerp_level(lo.level, hi.level, w) if lo.level and hi.level else None
    return LengthCosts(
        length,
        lo.plain_ms + (hi.plain_ms - lo.plain_ms) * w,
        level,
        _lerp(lo.cycle_ms, hi.cycle_ms, w),
        _lerp(lo.prefill_ms, hi.prefill_ms, w),
        _lerp(lo.spec_prefill_ms, hi.spec_prefill_ms, w),
        _lerp(lo.new_tokens, hi.new_tokens, w),
    )


# --- Reading the files ------------------------------------------------------------------------


def _entries(doc: dict, where: str) -> list[dict]:
    out = doc.get("by_length")
    if not isinstance(out, list) or not out or not all(isinstance(e, dict) for e in out):
        raise bad(where, "by_length: expected a list of context buckets, found none")
    for i, e in enumerate(out):
        n = e.get("context_length")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise bad(where, f"by_length[{i}].context_length: expected an integer, found {n!r}")
    return out


def _acc(e: dict, key: str, where: str) -> LengthAcceptance | None:
    """A bucket's acceptance (None: no cycle in it)."""
    tau = e.get(key)
    if tau is None:
        return None
    pp = e.get("per_position_acceptance")
    cum = _cumulative(where, f"by_length[{e['context_length']}]", pp) if pp else ()
    cycles = e.get("cycles") if isinstance(e.get("cycles"), int) else None
    return LengthAcceptance(e["context_length"], float(tau), cum, cycles)


def _bench(doc: dict, where: str, concurrency: int) -> LengthFile:
    costs, accs, cand, depth = [], [], None, None
    for e in _entries(doc, where):
        here = f"{where} (context {e['context_length']})"
        levels, prefill, new = costs_of(e.get("costs") or {}, here)
        level = next((lv for lv in levels if lv.concurrency == concurrency), None)
        if level is None:
            found = [lv.concurrency for lv in levels]
            raise bad(here, f"costs.levels: expected concurrency {concurrency}, found {found}")
        rows = {r.get("name"): r for r in e.get("methods") or []}
        row = rows.get("chain") or rows.get("tree")
        spec_prefill = row.get("prefill_ms") if row else None
        costs.append(
            LengthCosts(
                e["context_length"], level.plain_ms, level, None, prefill, spec_prefill, new
            )
        )
        if row is not None:
            cands = _from_bench({"methods": [row]}, here, None)
            cand, depth = cands[0], row.get("depth")
            accs.append(
                LengthAcceptance(
                    e["context_length"], row["tau_online"], cand.per_position, cand.cycles
                )
            )
    return LengthFile(where, tuple(costs), tuple(accs), cand, depth)


def _whole(doc: dict, where: str, tau_key: str) -> LengthFile:
    """eval (online: whole cycles; offline: acceptance only) and bench-live by_length."""
    costs, accs = [], []
    for e in _entries(doc, where):
        a = _acc(e, tau_key, where)
        if a is not None:
            accs.append(a)
        plain, cyc = e.get("decode_ms"), e.get("cycle_ms")
        if plain and cyc:
            costs.append(
                LengthCosts(
                    e["context_length"],
                    plain,
                    None,
                    cyc,
                    e.get("baseline_prefill_ms"),
                    e.get("prefill_ms"),
                    e.get("new_tokens"),
                )
            )
    return LengthFile(where, tuple(costs), tuple(accs), None, doc.get("depth"))


def _probe(doc: dict, where: str) -> LengthFile:
    """probe (in process or live): NEW's tau per bucket (`by_length[].tau.new`)."""
    accs = []
    for e in _entries(doc, where):
        tau = (e.get("tau") or {}).get("new")
        if tau is not None:
            accs.append(LengthAcceptance(e["context_length"], float(tau)))
    return LengthFile(where, (), tuple(accs), None, doc.get("depth"))


def read_lengths(path: str | Path, concurrency: int = 1) -> LengthFile | None:
    """The by-length figures of a measurement (None: it has no `by_length`)."""
    return lengths_of(read_doc(path), str(path), concurrency)


def lengths_of(doc: Any, where: str, concurrency: int = 1) -> LengthFile | None:
    """`read_lengths` of a document already read (``where`` names it in a refusal)."""
    if not isinstance(doc, dict) or "by_length" not in doc:
        return None
    kind = kind_of(doc)
    if kind == "bench":
        return _bench(doc, where, concurrency)
    if kind == "eval":
        return _whole(doc, where, "tau_online" if doc.get("mode") == "online" else "tau_walk")
    if kind == "bench-live":
        return _whole(doc, where, "tau_online")
    if kind in ("probe", "probe-live"):
        return _probe(doc, where)
    raise bad(where, f"kind: expected a measurement with by_length, found {doc.get('kind')!r}")


# --- The plan ---------------------------------------------------------------------------------


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None else round(x, nd)


def _request(n: float | None, prefill: float | None, tau: float, cycle: float) -> float | None:
    if n is None or prefill is None:
        return None
    return 1000.0 * n / (prefill + (n - 1) / tau * cycle)


@dataclass(frozen=True)
class LengthPoint:
    """The plan at one context length."""

    length: int
    depth: int | None
    tau: float
    cycle_ms: float
    plain_ms: float
    costs: LengthCosts

    @property
    def tps(self) -> float:
        return 1000.0 * self.tau / self.cycle_ms

    @property
    def baseline_tps(self) -> float:
        return 1000.0 / self.plain_ms

    @property
    def break_even_tau(self) -> float:
        return self.cycle_ms / self.plain_ms

    @property
    def pays(self) -> bool:
        return self.tau >= self.break_even_tau

    def request(self) -> tuple[float | None, float | None]:
        """(speculative, plain) tok/s of one request end to end."""
        c = self.costs
        spec = _request(c.new_tokens, c.spec_prefill_ms, self.tau, self.cycle_ms)
        return spec, _request(c.new_tokens, c.prefill_ms, 1.0, self.plain_ms)

    def to_json(self) -> dict[str, Any]:
        spec, plain = self.request()
        return {
            "context_length": self.length,
            "depth": self.depth,
            "tau": _r(self.tau),
            "break_even_tau": _r(self.break_even_tau),
            "cycle_ms": _r(self.cycle_ms),
            "plain_ms": _r(self.plain_ms),
            "tokens_per_s": _r(self.tps),
            "baseline_tokens_per_s": _r(self.baseline_tps),
            "speedup": _r(self.tps / self.baseline_tps),
            "pays": self.pays,
            "new_tokens": _r(self.costs.new_tokens),
            "prefill_ms": _r(self.costs.spec_prefill_ms),
            "baseline_prefill_ms": _r(self.costs.prefill_ms),
            "request_tokens_per_s": _r(spec),
            "baseline_request_tokens_per_s": _r(plain),
            "request_speedup": _r(spec / plain) if spec and plain else None,
        }


@dataclass(frozen=True)
class LengthPlan:
    points: tuple[LengthPoint, ...]
    concurrency: int
    sources: dict[str, str]
    method: str | None = None

    def pays_up_to(self) -> dict[str, Any]:
        """The longest context from the shortest on at which speculation still pays
        (module docstring), and the sentence that says it."""
        pts, c = self.points, self.concurrency
        top = pts[-1].length
        if not pts[0].pays:
            n, say = None, f"does not pay at {pts[0].length} tokens of context (the shortest "
            say += f"measured) at concurrency {c}"
        elif all(p.pays for p in pts):
            n = top
            say = f"pays up to {top} tokens of context at concurrency {c} (every measured "
            say += "length; not measured beyond)"
        else:
            j = next(i for i, p in enumerate(pts) if not p.pays)
            a, b = pts[j - 1], pts[j]
            ma, mb = a.tau - a.break_even_tau, b.tau - b.break_even_tau
            n = int(a.length + (b.length - a.length) * ma / (ma - mb))
            say = f"pays up to {n} tokens of context at concurrency {c} (pays at {a.length}, "
            say += f"not at {b.length})"
        return {"context_length": n, "concurrency": c, "measured_up_to": top, "answer": say}

    def to_json(self) -> dict[str, Any]:
        settings = {"concurrency": self.concurrency, "method": self.method, **self.sources}
        return {
            "by_length_settings": settings,
            "by_length": [p.to_json() for p in self.points],
            "pays_up_to": self.pays_up_to(),
            "break_even_curve": [
                {
                    "context_length": p.length,
                    "tau_needed": _r(p.break_even_tau),
                    "tau": _r(p.tau),
                }
                for p in self.points
            ],
        }


def _point(f: LengthFile, a: LengthAcceptance, depth: int | None, where: str) -> LengthPoint:
    c = costs_at(f.costs, a.length, where)
    if c.level is not None and f.candidate is not None:
        k = depth or f.depth or len(a.per_position) or f.candidate.depth
        cand = replace(f.candidate, per_position=a.per_position or f.candidate.per_position)
        if depth is not None and not a.per_position and depth != f.depth:
            raise bad(
                "--depth",
                f"expected {f.depth} (the acceptance file gives a tau, not "
                f"per-position rates), found {depth}",
            )
        tau = cand.tau(k) if a.per_position else a.tau
        return LengthPoint(a.length, k, tau, cycle_ms(cand, c.level, k), c.plain_ms, c)
    if depth is not None and f.depth is not None and depth != f.depth:
        raise bad(
            "--depth",
            f"expected {f.depth}: {where} measured its cycles whole at that depth, found {depth}",
        )
    assert c.cycle_ms is not None
    return LengthPoint(a.length, f.depth, a.tau, c.cycle_ms, c.plain_ms, c)


def plan_by_length(
    costs: LengthFile,
    acceptance: LengthFile | None = None,
    *,
    concurrency: int = 1,
    depth: int | None = None,
) -> LengthPlan:
    """Price every bucket of `acceptance` (default: the costs file's own) with the costs at
    its length (module docstring)."""
    acc = acceptance or costs
    if not costs.costs:
        raise bad(
            costs.where,
            "by_length: expected costs per length (bench --context-lengths, "
            "eval --online --by-length, bench --url --context-lengths), found none",
        )
    if not acc.acceptance:
        raise bad(acc.where, "by_length: expected a bucket with an accept length, found none")
    where = costs.where
    points = tuple(
        _point(costs, a, depth, where) for a in sorted(acc.acceptance, key=lambda a: a.length)
    )
    sources = {"costs": costs.where, "acceptance": acc.where}
    method = costs.candidate.method if costs.candidate else None
    return LengthPlan(points, concurrency, sources, method)
