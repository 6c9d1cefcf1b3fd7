"""Will speculation pay, and what would it take? The cycle model, in plain arithmetic.

One speculative cycle drafts k tokens and verifies them (plus the bonus token) in one target
forward. With per-step *conditional* acceptance p_i (draft i is accepted given drafts 1..i-1
were), the expected tokens emitted per cycle -- the accept length tau -- is

    tau = 1 + sum_{i=1..k} prod_{j<=i} p_j          (constant p: tau = sum_{i=0..k} p^i)
    tau -> 1 / (1 - p)                               as k -> infinity

and speculative throughput is tau / cycle_s. The plain decoder gives baseline_tps, so
speculation pays when tau > baseline_tps * cycle_s (the break-even accept length).

The cycle is either given whole (`cycle_ms`, e.g. the 30 ms measured in the seed) or composed:

    cycle_ms(k) = k * draft_ms + verify_ms(k + 1)

where verify_ms(n) (one target forward over n tokens) is a linear fit
`intercept_ms + per_token_ms * n`, or measured points n -> ms, interpolated linearly between
points and extrapolated beyond the largest n along the last segment (slope clamped at >= 0;
flat with a single point, i.e. verify cost assumed not to grow). Below the smallest measured n
the model refuses: what was not measured is not guessed, so measure n = 2 (depth 1) if you
want depth 1 planned.

Nothing here imports torch or matplotlib; the picture is `eagle3kit.plan.plots.plot_plan`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from eagle3kit.core.artifacts import stamp
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.plan.cycle import (
    CycleModel,
    _depth,
    _number,
    _positive,
    _rate,
    make_baseline,
    make_cycle,
)

DEFAULT_DEPTH = 3  # SGLang's usual --speculative-num-steps for EAGLE-3 chains
DEFAULT_MAX_DEPTH = 10  # best-depth search range 1..10 unless told otherwise

# --- Accept length <-> per-step acceptance ----------------------------------------------------


def conditional(per_position: Sequence[float]) -> list[float]:
    """P(a >= i | a >= i-1) from P(a >= i), i = 1..k (0.0 past a position never reached):
    the per-step rates `accept_len` takes, from measured per-position acceptance."""
    prev, out = 1.0, []
    for p in per_position:
        out.append(p / prev if prev > 0 else 0.0)
        prev = p
    return out


def accept_len(rates: Sequence[float]) -> float:
    """tau for a chain with per-position conditional rates [p1..pk]: 1 + sum_i prod_{j<=i} p_j."""
    tau, survive = 1.0, 1.0
    for p in rates:
        survive *= p  # prod_{j<=i} p_j: probability that drafts 1..i are all accepted
        tau += survive
    return tau


def accept_len_const(p: float, depth: float) -> float:
    """tau for a constant per-step rate p at depth k: sum_{i=0..k} p^i; k = inf gives 1/(1-p)."""
    if math.isinf(depth):
        return 1.0 / (1.0 - p)
    return accept_len([p] * int(depth))


def rate_for_accept_len(tau: float, depth: float = math.inf) -> float | None:
    """The constant per-step rate p that gives accept length `tau` at depth k (inverse of above).

    k = inf: p = 1 - 1/tau (closed form). Finite k: tau(p) = sum_{i=0..k} p^i rises from 1 at
    p = 0 to k+1 at p = 1, so bisection finds the unique p. Returns 0.0 when tau <= 1 (any
    acceptance will do) and None when tau > k+1 (unreachable at depth k, even with p = 1).
    """
    if tau <= 1.0:
        return 0.0
    if math.isinf(depth):
        return 1.0 - 1.0 / tau
    k = int(depth)
    if tau > k + 1:
        return None
    if tau == k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if accept_len_const(mid, k) < tau:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return 0.5 * (lo + hi)


# --- Acceptance -------------------------------------------------------------------------------


def rates_of(where: str, doc: Any) -> tuple[float, ...]:
    """The conditional rates of a kind-less acceptance document (a list, or an object with
    per_position_acceptance)."""
    shape = '{"per_position_acceptance": [p1, p2, ...]} or a list [p1, p2, ...]'
    if isinstance(doc, dict) and "per_position_acceptance" not in doc:
        raise Eagle3Error(f"{where}: expected {shape}, found an object without that key")
    rates = doc["per_position_acceptance"] if isinstance(doc, dict) else doc
    if not isinstance(rates, list):
        raise Eagle3Error(f"{where}: expected {shape}, found {type(rates).__name__} {rates!r:.60}")
    return _rates(where, rates)


def _rates(where: str, rates: Sequence[Any]) -> tuple[float, ...]:
    """Per-position rates: a non-empty list of numbers in [0, 1] (1.0 may be measured)."""
    if not rates:
        raise Eagle3Error(f"{where}: expected a non-empty list of per-position rates, found []")
    for i, r in enumerate(rates):
        if not _number(r) or not 0.0 <= r <= 1.0:
            raise Eagle3Error(
                f"{where}: per_position_acceptance[{i}]: expected a rate in [0, 1], found {r!r}"
            )
    return tuple(float(r) for r in rates)


@dataclass(frozen=True)
class Acceptance:
    """Exactly one of: a constant rate p, per-position rates [p1..pk], or tau at `depth`."""

    rate: float | None = None
    per_position: tuple[float, ...] | None = None
    tau: float | None = None

    def accept_len(self, depth: int, tau_depth: int) -> float:
        """tau at depth k. A given tau is turned into the constant p it implies at tau_depth."""
        if self.per_position is not None:
            return accept_len(self.per_position[:depth])
        return accept_len_const(self.const_rate(tau_depth), depth)

    def const_rate(self, depth: int) -> float:
        """The constant per-step rate: given, or the one that reproduces tau at depth k."""
        if self.rate is not None:
            return self.rate
        tau = self.tau if self.tau is not None else accept_len((self.per_position or ())[:depth])
        p = rate_for_accept_len(tau, depth)
        assert p is not None  # validated: tau <= depth + 1
        return p

    def max_depth(self) -> int | None:
        return len(self.per_position) if self.per_position is not None else None


def make_acceptance(
    acceptance: float | None = None,
    per_position: Sequence[float] | None = None,
    accept_len_: float | None = None,
) -> Acceptance:
    given = [
        n
        for n, v in (
            ("--acceptance", acceptance),
            ("--acceptance-file", per_position),
            ("--accept-len", accept_len_),
        )
        if v is not None
    ]
    if len(given) != 1:
        found = "none" if not given else " and ".join(given)
        raise Eagle3Error(
            f"--acceptance: expected exactly one of --acceptance P, --acceptance-file FILE, "
            f"--accept-len TAU, found {found}"
        )
    if acceptance is not None:
        return Acceptance(rate=_rate("--acceptance", acceptance))
    if per_position is not None:
        return Acceptance(per_position=_rates("--acceptance-file", per_position))
    if not _number(accept_len_) or accept_len_ < 1.0:  # type: ignore[operator]
        raise Eagle3Error(f"--accept-len: expected an accept length >= 1, found {accept_len_!r}")
    return Acceptance(tau=float(accept_len_))  # type: ignore[arg-type]


# --- The plan ---------------------------------------------------------------------------------


def _r(x: float | None, nd: int = 6) -> float | None:
    """Round for JSON (ints pass through, None stays None)."""
    return x if x is None or isinstance(x, int) else round(x, nd)


@dataclass(frozen=True)
class TargetResult:
    """What a target throughput needs: tau = tps * cycle_s, and the per-step rate for it."""

    tps: float
    tau: float  # needed at the planned depth's cycle time
    per_step_acceptance: float  # constant p needed as k -> inf (1 - 1/tau), same cycle time
    per_step_acceptance_at_depth: float | None  # None: unreachable at depth k (tau > k+1)
    depth: int
    easiest_depth: int | None = None  # composed cycle: the depth needing the lowest p
    easiest_per_step_acceptance: float | None = None

    @property
    def reachable_at_depth(self) -> bool:
        return self.per_step_acceptance_at_depth is not None

    @property
    def note(self) -> str:
        if self.reachable_at_depth:
            return ""
        return (
            f"unreachable at depth {self.depth}: needs tau "
            f"{self.tau:.3g} > {self.depth + 1} (every draft accepted)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "tps": self.tps,
            "tau": _r(self.tau),
            "per_step_acceptance": _r(self.per_step_acceptance),
            "per_step_acceptance_at_depth": _r(self.per_step_acceptance_at_depth),
            "unreachable_at_depth": not self.reachable_at_depth,
            "note": self.note,
            "easiest_depth": self.easiest_depth,
            "easiest_per_step_acceptance": _r(self.easiest_per_step_acceptance),
        }


@dataclass(frozen=True)
class DepthPoint:
    depth: int
    cycle_ms: float
    tau: float
    tps: float


@dataclass(frozen=True)
class PlanResult:
    """Everything `eagle3kit plan` reports; `to_json()` is its --json document."""

    baseline_tps: float
    cycle: CycleModel
    depth: int
    cycle_ms: float  # at `depth`
    tau: float  # the accept length given (any kind: docs/ARCHITECTURE.md, Glossary)
    per_step_acceptance: float  # constant p (given, or the one implied at `depth`)
    per_position_acceptance: tuple[float, ...] | None
    throughput_tps: float
    break_even_tau: float
    break_even_per_step_acceptance_at_depth: float | None
    break_even_per_step_acceptance: float
    ideal_tps: float
    best_depth: int | None
    best_depth_tps: float | None
    best_depth_tau: float | None
    max_depth: int
    targets: tuple[TargetResult, ...] = ()
    depths: tuple[DepthPoint, ...] = field(default=())  # composed cycle only
    request: RequestResult | None = None  # with new_tokens and prefill_ms
    method: str | None = None  # plan --method: whose drafting cost the cycle has

    @property
    def speedup(self) -> float:
        return self.throughput_tps / self.baseline_tps

    @property
    def pays(self) -> bool:
        """Speculation at least matches the plain decoder (exit 1 otherwise)."""
        return self.throughput_tps >= self.baseline_tps

    @property
    def cycle_model(self) -> str:
        return self.cycle.describe()

    def to_json(self) -> dict[str, Any]:
        doc = {
            "baseline_tps": _r(self.baseline_tps),
            "cycle_ms": _r(self.cycle_ms),
            "tau": _r(self.tau),
            "throughput_tps": _r(self.throughput_tps),
            "speedup": _r(self.speedup),
            "break_even_tau": _r(self.break_even_tau),
            "best_depth": self.best_depth,
            "targets": [t.to_json() for t in self.targets],
            "pays": self.pays,
            "depth": self.depth,
            "cycle_model": self.cycle_model,
            "per_step_acceptance": _r(self.per_step_acceptance),
            "per_position_acceptance": (
                list(self.per_position_acceptance) if self.per_position_acceptance else None
            ),
            "break_even_per_step_acceptance_at_depth": _r(
                self.break_even_per_step_acceptance_at_depth
            ),
            "break_even_per_step_acceptance": _r(self.break_even_per_step_acceptance),
            "ideal_tau": self.depth + 1,
            "ideal_tps": _r(self.ideal_tps),
            "best_depth_tps": _r(self.best_depth_tps),
            "best_depth_tau": _r(self.best_depth_tau),
            "max_depth": self.max_depth if self.cycle.composed else None,
            "depths": [{k: _r(v) for k, v in asdict(d).items()} for d in self.depths],
            "request": {k: _r(v) for k, v in asdict(self.request).items()}
            if self.request
            else None,
        }
        if self.method is not None:  # plan --method: whose drafting cost the cycle has
            doc["method"] = self.method
        return stamp(doc, "plan")


@dataclass(frozen=True)
class RequestResult:
    """One request end to end: the prefill emits its first token, cycles the other N - 1.

    tps = N / (prefill_ms + (N - 1) / tau * cycle_ms) * 1000
    """

    new_tokens: float
    prefill_ms: float
    tps: float


def request_tps(new_tokens: float, prefill_ms: float, tau: float, cycle_ms: float) -> RequestResult:
    n = _positive("--new-tokens", new_tokens, "tokens per request")
    if not _number(prefill_ms) or prefill_ms < 0:
        raise Eagle3Error(f"--prefill-ms: expected a time in ms >= 0, found {prefill_ms!r}")
    p = float(prefill_ms)
    return RequestResult(n, p, 1000.0 * n / (p + (n - 1) / tau * cycle_ms))


def _method_cycle(cycle: CycleModel, method: str | None) -> CycleModel:
    """The cycle with the method's drafting cost: k, one or no drafter passes per cycle."""
    if method is None:
        return cycle
    from eagle3kit.core import registry

    return replace(cycle, passes=registry.get(method).passes)


def plan(
    *,
    baseline_tps: float | None = None,
    decode_ms: float | None = None,
    cycle_ms: float | None = None,
    draft_ms: float | None = None,
    verify_ms: Mapping[int, float] | Iterable[tuple[int, float]] | None = None,
    verify_fit: tuple[float, float] | None = None,
    acceptance: float | None = None,
    per_position: Sequence[float] | None = None,
    tau: float | None = None,
    depth: int | None = None,
    max_depth: int | None = None,
    target_tps: Sequence[float] = (),
    new_tokens: float | None = None,
    prefill_ms: float | None = None,
    method: str | None = None,
) -> PlanResult:
    """Plan speculation: tau, throughput, break-even, targets and best depth.

    Give one baseline (`baseline_tps` | `decode_ms`), one cycle (`cycle_ms` | `draft_ms` with
    `verify_ms` points or `verify_fit`), one acceptance (`acceptance` p | `per_position`
    [p1..pk] | `tau`). `depth` defaults to len(per_position), else 3. A given tau is
    read as the constant p it implies at `depth` when other depths are priced. With
    `new_tokens` and `prefill_ms`, also one request's end-to-end tok/s (`RequestResult`).
    """
    _check_request(new_tokens, prefill_ms)
    base = make_baseline(baseline_tps, decode_ms)
    cycle = _method_cycle(make_cycle(cycle_ms, draft_ms, verify_ms, verify_fit), method)
    acc = make_acceptance(acceptance, per_position, tau)
    k, kmax = _depths(acc, cycle, depth, max_depth)

    depths = _depth_points(cycle, acc, k, kmax)
    req = (new_tokens, prefill_ms)
    return _result(base, cycle, acc, k, kmax, depths, target_tps, method, req)


def _result(base, cycle, acc, k, kmax, depths, target_tps, method, req) -> PlanResult:
    """tau, throughput = tau / cycle_s, and the break-even accept length baseline * cycle_s at
    depth k; the best of ``depths`` and the targets; one request's tok/s where ``req`` is
    (new_tokens, prefill_ms) with both given."""
    cyc_ms = cycle.ms(k)
    cycle_s = cyc_ms / 1000.0
    tau = acc.accept_len(k, k)
    tau_be = base * cycle_s
    best = max(depths, key=lambda d: d.tps) if depths else None  # first max: shallowest
    return PlanResult(
        baseline_tps=base,
        cycle=cycle,
        depth=k,
        cycle_ms=cyc_ms,
        tau=tau,
        per_step_acceptance=acc.const_rate(k),
        per_position_acceptance=acc.per_position[:k] if acc.per_position else None,
        throughput_tps=tau / cycle_s,
        break_even_tau=tau_be,
        break_even_per_step_acceptance_at_depth=rate_for_accept_len(tau_be, k),
        break_even_per_step_acceptance=rate_for_accept_len(tau_be, math.inf),  # type: ignore[arg-type]
        ideal_tps=(k + 1) / cycle_s,  # every draft accepted: tau = k + 1
        best_depth=best.depth if best else None,
        best_depth_tps=best.tps if best else None,
        best_depth_tau=best.tau if best else None,
        max_depth=kmax,
        targets=tuple(_target(t, base, cycle_s, k, depths) for t in target_tps),
        depths=tuple(depths),
        method=method,
        request=None if req[0] is None else request_tps(req[0], req[1], tau, cyc_ms),
    )


def _check_request(new_tokens: float | None, prefill_ms: float | None) -> None:
    if (new_tokens is None) != (prefill_ms is None):
        given, missing = ("--new-tokens", "--prefill-ms")[:: 1 if prefill_ms is None else -1]
        raise Eagle3Error(
            f"{missing}: expected it with {given} (one request needs both), found none"
        )


def _depths(acc: Acceptance, cycle: CycleModel, depth: int | None, max_depth: int | None):
    """(k, kmax): the depth planned and the best-depth search's range, validated."""
    if depth is None:
        depth = acc.max_depth() or DEFAULT_DEPTH
    k = _depth("--depth", depth)
    if acc.per_position is not None and k > len(acc.per_position):
        raise Eagle3Error(
            f"--depth: expected at most {len(acc.per_position)} (the rates the acceptance file "
            f"gives), found {k}"
        )
    if acc.tau is not None and acc.tau > k + 1:
        raise Eagle3Error(
            f"--accept-len: expected at most depth+1 = {k + 1} at --depth {k}, found {acc.tau:g}"
        )
    kmax = _depth("--max-depth", max_depth if max_depth is not None else max(DEFAULT_MAX_DEPTH, k))
    if acc.per_position is not None:
        kmax = min(kmax, len(acc.per_position))
    if not cycle.valid(k):
        cycle.ms(k)  # raises the --verify-ms message naming the smallest measured n
    return k, kmax


def _depth_points(cycle: CycleModel, acc: Acceptance, k: int, kmax: int) -> list[DepthPoint]:
    """tau(d) / cycle_s(d) for d = 1..kmax, only when depth costs time (composed cycle)."""
    out: list[DepthPoint] = []
    if cycle.composed:
        for d in range(1, kmax + 1):
            if cycle.valid(d):
                c = cycle.ms(d)
                t = acc.accept_len(d, k)
                out.append(DepthPoint(d, c, t, t / (c / 1000.0)))
    return out


def _target(
    target: float, base: float, cycle_s: float, k: int, depths: list[DepthPoint]
) -> TargetResult:
    """What a target tok/s needs at depth k, and (composed) the depth that asks the least."""
    t = _positive("--target-tps", target, "a rate in tok/s")
    if t <= base:
        raise Eagle3Error(
            f"--target-tps: expected a target above the baseline, found {t:g} tok/s, which "
            f"needs no speculation: the baseline already gives {base:g} tok/s"
        )
    need = t * cycle_s  # tau needed at this depth's cycle time
    easiest = None
    for dp in depths:  # composed: the depth whose own cycle time asks the least of p
        p_d = rate_for_accept_len(t * dp.cycle_ms / 1000.0, dp.depth)
        if p_d is not None and (easiest is None or p_d < easiest[1]):
            easiest = (dp.depth, p_d)
    return TargetResult(
        tps=t,
        tau=need,
        per_step_acceptance=rate_for_accept_len(need, math.inf),  # type: ignore[arg-type]
        per_step_acceptance_at_depth=rate_for_accept_len(need, k),
        depth=k,
        easiest_depth=easiest[0] if easiest else None,
        easiest_per_step_acceptance=easiest[1] if easiest else None,
    )
