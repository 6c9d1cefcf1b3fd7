"""The cycle model of `plan`: how long one speculative cycle takes at depth k.

    cycle_ms(k) = cycle_ms                                   (given whole), or
    cycle_ms(k) = k * draft_ms + verify_ms(k + 1)            (composed)

verify_ms(n) is a linear fit `intercept_ms + per_token_ms * n`, or measured points n -> ms,
interpolated linearly between points and extrapolated beyond the largest n along the last
segment (slope clamped at >= 0). Below the smallest measured n the model refuses. Also the
validation helpers plan.py shares: every message names the option, the expectation and what
was found. Split out of plan.py (which re-exports these names).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from eagle3kit.core.errors import Eagle3Error

MAX_DEPTH_LIMIT = 1024  # a sanity cap: the search is O(max_depth^2)

# --- Validation helpers: every message names the option, the expectation and what was found ---


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _positive(option: str, value: Any, unit: str) -> float:
    if not _number(value) or value <= 0:
        raise Eagle3Error(f"{option}: expected {unit} > 0, found {value!r}")
    return float(value)


def _rate(option: str, value: Any) -> float:
    if not _number(value) or not 0.0 <= value < 1.0:
        raise Eagle3Error(f"{option}: expected a per-step acceptance in [0, 1), found {value!r}")
    return float(value)


def _depth(option: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Eagle3Error(f"{option}: expected a depth >= 1 (draft steps), found {value!r}")
    if value > MAX_DEPTH_LIMIT:
        raise Eagle3Error(f"{option}: expected a depth <= {MAX_DEPTH_LIMIT}, found {value}")
    return value


def _fmt(x: float) -> str:
    return f"{x:g}"


# --- The cycle model --------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyFit:
    """verify_ms(n) = intercept_ms + per_token_ms * n (intercept > 0, slope >= 0)."""

    intercept_ms: float
    per_token_ms: float

    def ms(self, n: int) -> float:
        return self.intercept_ms + self.per_token_ms * n

    def describe(self) -> str:
        return f"verify(n) = {_fmt(self.intercept_ms)} + {_fmt(self.per_token_ms)}*n ms"


@dataclass(frozen=True)
class VerifyPoints:
    """Measured verify times, (n tokens, ms) sorted by n; linear between, see module doc."""

    points: tuple[tuple[int, float], ...]

    @property
    def min_n(self) -> int:
        return self.points[0][0]

    def ms(self, n: int) -> float:
        pts = self.points
        if n < pts[0][0]:
            raise Eagle3Error(
                f"--verify-ms: expected a measurement at n <= {n} tokens (depth {n - 1} "
                f"verifies {n}), found the smallest n = {pts[0][0]}; the model does not "
                "extrapolate below the smallest measured n"
            )
        for (n0, t0), (n1, t1) in zip(pts, pts[1:], strict=False):
            if n0 <= n <= n1:  # interpolate on the segment
                return t0 + (t1 - t0) * (n - n0) / (n1 - n0)
        n_last, t_last = pts[-1]
        if n == n_last or len(pts) == 1:
            return t_last  # one point: flat beyond it
        (n0, t0), (n1, t1) = pts[-2], pts[-1]
        slope = max(0.0, (t1 - t0) / (n1 - n0))  # last segment, never decreasing
        return t_last + slope * (n - n_last)

    def describe(self) -> str:
        return "verify " + ", ".join(f"{n}:{_fmt(t)}" for n, t in self.points) + " (n:ms)"


@dataclass(frozen=True)
class CycleModel:
    """Either a whole cycle time, or passes(k) * draft_ms + verify(k+1): passes(k) = k for a
    sequential drafter (eagle3, eagle3.1, mtp), 1 for one-pass drafters (peagle, dflash),
    0 for prompt lookup (ngram); plan/methods.py's table."""

    cycle_ms: float | None = None
    draft_ms: float | None = None
    verify: VerifyFit | VerifyPoints | None = None
    passes: str = "k"  # "k" | "1" | "0"

    def draft_passes(self, depth: int) -> int:
        return {"k": depth, "1": 1, "0": 0}[self.passes]

    @property
    def composed(self) -> bool:
        return self.cycle_ms is None

    def ms(self, depth: int) -> float:
        """Milliseconds per speculative cycle at depth k."""
        if self.cycle_ms is not None:
            return self.cycle_ms
        assert self.draft_ms is not None and self.verify is not None
        return self.draft_passes(depth) * self.draft_ms + self.verify.ms(depth + 1)

    def valid(self, depth: int) -> bool:
        """Whether the model can price depth k (measured points refuse below their smallest n)."""
        return not (isinstance(self.verify, VerifyPoints) and depth + 1 < self.verify.min_n)

    def describe(self) -> str:
        if self.cycle_ms is not None:
            return f"cycle {_fmt(self.cycle_ms)} ms, given whole"
        assert self.draft_ms is not None and self.verify is not None
        n = {"k": "k*", "1": "1*", "0": "0*"}[self.passes]
        return (
            f"cycle(k) = {n}{_fmt(self.draft_ms)} ms draft + verify(k+1); {self.verify.describe()}"
        )


def parse_verify_point(text: str) -> tuple[int, float]:
    """'N:MS' -> (N, MS), e.g. '4:31.5'. Used by the CLI's repeated --verify-ms."""
    n_s, sep, ms_s = text.partition(":")
    try:
        if not sep:
            raise ValueError
        n, ms = int(n_s), float(ms_s)
    except ValueError as e:
        raise Eagle3Error(
            f"--verify-ms: expected N:MS (tokens:milliseconds, e.g. 4:31.5), found {text!r}"
        ) from e
    return n, ms


def parse_verify_fit(text: str) -> tuple[float, float]:
    """'INTERCEPT,PER_TOKEN' -> (intercept_ms, per_token_ms), e.g. '20,1.5'."""
    parts = text.split(",")
    try:
        if len(parts) != 2:
            raise ValueError
        a, b = float(parts[0]), float(parts[1])
    except ValueError as e:
        raise Eagle3Error(
            f"--verify-fit: expected INTERCEPT_MS,PER_TOKEN_MS (e.g. 20,1.5), found {text!r}"
        ) from e
    return a, b


def make_cycle(
    cycle_ms: float | None = None,
    draft_ms: float | None = None,
    verify_ms: Mapping[int, float] | Iterable[tuple[int, float]] | None = None,
    verify_fit: tuple[float, float] | None = None,
) -> CycleModel:
    """Validate and build the cycle model: exactly one of cycle_ms, or draft_ms + one verify."""
    has_points = verify_ms is not None and len(list(_items(verify_ms))) > 0
    composed = draft_ms is not None or has_points or verify_fit is not None
    if cycle_ms is not None and composed:
        raise Eagle3Error(
            "--cycle-ms: expected either a whole cycle time or --draft-ms with "
            "--verify-ms/--verify-fit, found both"
        )
    if cycle_ms is not None:
        return CycleModel(cycle_ms=_positive("--cycle-ms", cycle_ms, "a time in ms"))
    if not composed:
        raise Eagle3Error(
            "--cycle-ms: expected a cycle time (--cycle-ms, or --draft-ms with "
            "--verify-ms/--verify-fit), found none"
        )
    if has_points and verify_fit is not None:
        raise Eagle3Error("--verify-ms: expected either --verify-ms or --verify-fit, found both")
    if draft_ms is None:
        opt = "--verify-ms" if has_points else "--verify-fit"
        raise Eagle3Error(f"{opt}: expected --draft-ms with it (a composed cycle), found none")
    draft = _positive("--draft-ms", draft_ms, "a time in ms")
    if verify_fit is not None:
        a, b = verify_fit
        intercept = _positive("--verify-fit", a, "an intercept in ms")
        if not _number(b) or b < 0:
            raise Eagle3Error(f"--verify-fit: expected a per-token ms >= 0, found {b!r}")
        return CycleModel(draft_ms=draft, verify=VerifyFit(intercept, float(b)))
    if not has_points:
        raise Eagle3Error(
            "--draft-ms: expected --verify-ms N:MS or --verify-fit INTERCEPT,PER_TOKEN with it, "
            "found neither"
        )
    pts: dict[int, float] = {}
    for n, ms in _items(verify_ms):  # type: ignore[arg-type]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise Eagle3Error(f"--verify-ms: expected a token count N >= 1, found {n!r}")
        if n in pts:
            raise Eagle3Error(f"--verify-ms: expected each N once, found N = {n} twice")
        pts[n] = _positive("--verify-ms", ms, "a time in ms")
    return CycleModel(draft_ms=draft, verify=VerifyPoints(tuple(sorted(pts.items()))))


def _items(v: Mapping[int, float] | Iterable[tuple[int, float]]) -> list[tuple[int, float]]:
    return list(v.items()) if isinstance(v, Mapping) else list(v)


def make_baseline(baseline_tps: float | None = None, decode_ms: float | None = None) -> float:
    """Plain-decode tokens/s, from tok/s or from ms per decode step (tps = 1000 / decode_ms)."""
    if baseline_tps is not None and decode_ms is not None:
        raise Eagle3Error(
            "--baseline-tps: expected either --baseline-tps or --decode-ms, found both"
        )
    if baseline_tps is not None:
        return _positive("--baseline-tps", baseline_tps, "a rate in tok/s")
    if decode_ms is not None:
        return 1000.0 / _positive("--decode-ms", decode_ms, "a time in ms")
    raise Eagle3Error("--baseline-tps: expected --baseline-tps or --decode-ms, found neither")
