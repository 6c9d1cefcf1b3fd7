"""Which method pays, at which load? The cycle model per speculative method, from measured costs.

Every method drafts k tokens and the target verifies them with the bonus token in one forward
(chain verification, docs/plan.md "Methods"). What differs is the drafting cost per cycle:

    cycle_ms(c, k) = passes(k) * pass_ms(c) + verify_ms(c, 1 + drafted(k)) + overhead_ms(c)

    method     passes(k)   why
    eagle3     k           one drafter step per draft token, in sequence
    eagle3.1   k           the same drafter with 3.1's norms (same cost)
    peagle     1           P-EAGLE fills the k slots in one causal pass (parallel drafting)
    dflash     1           DFlash drafts the block [token, mask x k] in one bidirectional pass
    mtp        k           the target's own MTP head, rerun recursively for k > 1 (as vLLM does)
    ngram      0           prompt lookup: no model, only a host-side string match

(the passes are core/registry.py's `Method.passes`, the one record of each method).

`c` is the concurrency level (requests decoding together, i.e. the batch): pass_ms(c),
verify_ms(c, n) and the plain step plain_ms(c) are measured at that level. drafted(k) is k for a
chain, the tree's node count for a tree, and for prompt lookup the mean number of tokens it
actually proposed (it proposes fewer, or none, when the context has no match).

With tau(k) = 1 + sum_{i<=k} P(a >= i) (the per-position acceptance, cumulative):

    tok/s per user  = 1000 * tau(k) / cycle_ms(c, k)      plain: 1000 / plain_ms(c)
    total tok/s     = c * tok/s per user                   (c requests step together)

and one request of N new tokens after a prefill: N / (prefill_ms + (N - 1) / tau * cycle_ms).
The interval on tau is +-1.96 standard errors of a cycle's emitted tokens (a + 1) over the
measured cycles, from the same per-position rates (E[a] = sum P(a >= i), E[a^2] =
sum (2i - 1) P(a >= i)); costs are taken as measured. Plain arithmetic, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from eagle3kit.core import registry
from eagle3kit.core.errors import Eagle3Error

# --- Inputs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LevelCosts:
    """What one concurrency level costs, in ms: a plain step, verify of n tokens (measured
    points, linear between, along the last segment beyond), and per method one drafter pass
    and the loop's other per-cycle overhead."""

    concurrency: int
    plain_ms: float
    verify_ms: tuple[tuple[int, float], ...]  # (n, ms) sorted by n
    pass_ms: dict[str, float] = field(default_factory=dict)
    overhead_ms: dict[str, float] = field(default_factory=dict)
    cycle_ms: dict[str, float] = field(default_factory=dict)  # a server's whole cycle, by label

    def verify(self, n: float) -> float:
        """verify_ms(n): the measured points, with the plain step as n = 1 when not measured;
        linear between points, along the last segment beyond the largest (never decreasing)."""
        pts = dict(self.verify_ms)
        pts.setdefault(1, self.plain_ms)
        s = sorted(pts.items())
        if len(s) == 1 or n <= s[0][0]:
            return s[0][1]
        for a, b in zip(s, s[1:], strict=False):
            if a[0] <= n <= b[0]:
                return _lerp(a, b, n)
        a, b = s[-2], s[-1]
        return b[1] + max(0.0, (b[1] - a[1]) / (b[0] - a[0])) * (n - b[0])


def _lerp(a: tuple[int, float], b: tuple[int, float], n: float) -> float:
    return a[1] + (b[1] - a[1]) * (n - a[0]) / (b[0] - a[0])


@dataclass(frozen=True)
class Candidate:
    """One measured drafter (or lookup) of a method: its cumulative per-position acceptance
    P(a >= i), i = 1..k, the cycles it was measured over, and what it sends to verify."""

    label: str  # e.g. "eagle3", "eagle3 (tree)", "ngram"
    method: str
    per_position: tuple[float, ...]  # cumulative P(a >= i)
    cycles: int | None = None
    drafted: float | None = None  # tokens sent to verify per cycle (None: k)
    passes_per_cycle: int | None = None  # drafter passes per cycle when fixed (tree: depth)
    draft: str | None = None  # the drafter's path, for the launch line
    source: str = ""
    cost_key: str | None = None  # the costs' name for its loop (e.g. "eagle3 (tree)")

    @property
    def depth(self) -> int:
        return len(self.per_position)

    def tau(self, k: int) -> float:
        return 1.0 + sum(self.per_position[:k])

    def tau_interval(self, k: int) -> tuple[float, float] | None:
        if not self.cycles:
            return None
        pp = self.per_position[:k]
        mean_a = sum(pp)
        var = sum((2 * i + 1) * p for i, p in enumerate(pp)) - mean_a**2
        se = math.sqrt(max(var, 0.0) / self.cycles)
        return (1.0 + mean_a - 1.96 * se, 1.0 + mean_a + 1.96 * se)

    def sent(self, k: int) -> float:
        """Draft tokens sent to verify per cycle at depth k."""
        if self.drafted is None:
            return float(k)
        return min(self.drafted, float(k)) if k < self.depth else self.drafted


# --- The prediction ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    label: str
    method: str
    concurrency: int
    depth: int  # 0: plain decoding
    cycle_ms: float
    tau: float
    user_tps: float
    total_tps: float
    user_tps_interval: tuple[float, float] | None = None
    request_tps: float | None = None
    request_tps_interval: tuple[float, float] | None = None
    plain_ms: float = 0.0  # the level's plain step

    @property
    def speedup(self) -> float:
        """tok/s per user over plain decoding's at the same level."""
        return self.user_tps * self.plain_ms / 1000.0

    @property
    def break_even_tau(self) -> float:
        """The tau at which this cycle just matches plain decoding: cycle_ms / plain_ms."""
        return self.cycle_ms / self.plain_ms

    def to_json(self) -> dict[str, Any]:
        r = _round
        return {
            "label": self.label,
            "method": self.method,
            "concurrency": self.concurrency,
            "depth": self.depth,
            "cycle_ms": r(self.cycle_ms),
            "tau": r(self.tau),
            "tokens_per_s_per_user": r(self.user_tps),
            "tokens_per_s_per_user_interval": _rl(self.user_tps_interval),
            "tokens_per_s_total": r(self.total_tps),
            "speedup": r(self.speedup),
            "break_even_tau": r(self.break_even_tau),
            "request_tokens_per_s": r(self.request_tps),
            "request_tokens_per_s_interval": _rl(self.request_tps_interval),
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _rl(x: tuple[float, float] | None) -> list[float] | None:
    return None if x is None else [round(v, 4) for v in x]


def _request(n: float | None, prefill: float | None, tau: float, cycle: float) -> float | None:
    if n is None or prefill is None or tau <= 0:
        return None
    return 1000.0 * n / (prefill + (n - 1) / tau * cycle)


def cycle_ms(cand: Candidate, lv: LevelCosts, k: int) -> float:
    """cycle_ms(c, k) = passes * pass_ms(c) + verify_ms(c, 1 + drafted(k)) + overhead_ms(c);
    a running server's cycle is measured whole, at the depth it serves."""
    if cand.label in lv.cycle_ms:
        return lv.cycle_ms[cand.label]
    m = registry.get(cand.method, "candidate method")
    passes = cand.passes_per_cycle if cand.passes_per_cycle is not None else m.draft_passes(k)
    key = cand.method
    if passes and key not in lv.pass_ms:
        raise Eagle3Error(
            f"costs: concurrency {lv.concurrency}: expected a drafter pass time for "
            f"{cand.label!r} (pass_ms), found {sorted(lv.pass_ms) or 'none'}"
        )
    draft = passes * lv.pass_ms.get(key, 0.0)
    over = lv.overhead_ms.get(cand.cost_key or cand.label, lv.overhead_ms.get(cand.method, 0.0))
    return draft + lv.verify(1 + cand.sent(k)) + over


def predict(
    cand: Candidate,
    lv: LevelCosts,
    k: int,
    new_tokens: float | None = None,
    prefill_ms: float | None = None,
) -> Prediction:
    cyc = cycle_ms(cand, lv, k)
    base = lv.plain_ms + lv.overhead_ms.get("plain", 0.0)
    tau = cand.tau(k)
    iv = cand.tau_interval(k)
    user = 1000.0 * tau / cyc
    req = _request(new_tokens, prefill_ms, tau, cyc)
    return Prediction(
        cand.label,
        cand.method,
        lv.concurrency,
        k,
        cyc,
        tau,
        user,
        lv.concurrency * user,
        (1000.0 * iv[0] / cyc, 1000.0 * iv[1] / cyc) if iv else None,
        req,
        (_request(new_tokens, prefill_ms, iv[0], cyc), _request(new_tokens, prefill_ms, iv[1], cyc))
        if iv and req is not None
        else None,
        base,
    )


def plain(lv: LevelCosts, new_tokens: float | None = None, prefill: float | None = None):
    """Plain decoding at level c: one plain step (and its loop's overhead) per token."""
    step = lv.plain_ms + lv.overhead_ms.get("plain", 0.0)
    user = 1000.0 / step
    req = _request(new_tokens, prefill, 1.0, step)
    return Prediction(
        "plain",
        "plain",
        lv.concurrency,
        0,
        step,
        1.0,
        user,
        lv.concurrency * user,
        None,
        req,
        None,
        step,
    )


@dataclass(frozen=True)
class MethodsPlan:
    """Every candidate x depth x level, the best depth of each per level, and the winner."""

    rows: tuple[Prediction, ...]
    best: dict[int, tuple[Prediction, ...]]  # level -> plain + each candidate at its best depth
    winners: dict[int, Prediction]
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "levels": [
                {
                    "concurrency": c,
                    "winner": self.winners[c].label,
                    "winner_depth": self.winners[c].depth,
                    "methods": [p.to_json() for p in self.best[c]],
                }
                for c in sorted(self.best)
            ],
            "grid": [p.to_json() for p in self.rows],
            "notes": list(self.notes),
        }


def plan_methods(
    candidates: Sequence[Candidate],
    levels: Sequence[LevelCosts],
    *,
    depths: Sequence[int] | None = None,
    new_tokens: float | None = None,
    prefill_ms: float | None = None,
) -> MethodsPlan:
    """Predict every candidate at every depth (1..its measured depth, or `depths`) and level;
    the winner of a level is the highest tok/s per user (plain included)."""
    if not levels:
        raise Eagle3Error("costs: expected at least one concurrency level, found none")
    rows, best, winners = [], {}, {}
    for lv in sorted(levels, key=lambda x: x.concurrency):
        here = [plain(lv, new_tokens, prefill_ms)]
        for cand in candidates:
            ks = [k for k in (depths or range(1, cand.depth + 1)) if 1 <= k <= cand.depth]
            if cand.passes_per_cycle is not None or cand.label in lv.cycle_ms:
                ks = [cand.depth]  # a tree, or a server's whole cycle: as measured only
            preds = [predict(cand, lv, k, new_tokens, prefill_ms) for k in ks]
            rows += preds
            if preds:
                here.append(max(preds, key=lambda p: p.user_tps))
        best[lv.concurrency] = tuple(here)
        winners[lv.concurrency] = max(here, key=lambda p: p.user_tps)
    notes = tuple(_missing_notes(candidates))
    return MethodsPlan(tuple(rows), best, winners, notes)


def _missing_notes(candidates: Sequence[Candidate]) -> list[str]:
    have = {c.method for c in candidates}
    return [
        f'{m}: no measured acceptance given (no eval/bench with "method": "{m}"), not priced'
        for m in registry.names()
        if m not in have
    ]


# --- vLLM's dynamic speculative decoding schedule ---------------------------------------------


def vllm_schedule(mp: MethodsPlan, label: str, max_batch: int) -> list[tuple[int, int, int]]:
    """The best k of candidate `label` at each measured level (0 where plain decoding wins),
    as vLLM's `num_speculative_tokens_per_batch_size`: inclusive [lo, hi, k] batch-size ranges,
    the first starting at 1, each level's k held until the next level (docs/plan.md)."""
    levels = sorted(mp.best)
    if levels[0] != 1:
        raise Eagle3Error(
            f"--vllm-schedule: expected costs measured at concurrency 1 (vLLM's schedule must "
            f"start at batch size 1), found the lowest level {levels[0]}"
        )
    if max_batch < levels[-1]:
        raise Eagle3Error(
            f"--max-batch: expected >= the highest measured level {levels[-1]}, found {max_batch}"
        )
    out = []
    for i, c in enumerate(levels):
        mine = [p for p in mp.rows if p.concurrency == c and p.label == label]
        if not mine:
            raise Eagle3Error(f"--vllm-schedule: no prediction for {label!r} at concurrency {c}")
        top = max(mine, key=lambda p: p.user_tps)
        base = next(p for p in mp.best[c] if p.label == "plain")
        k = top.depth if top.user_tps > base.user_tps else 0
        hi = levels[i + 1] - 1 if i + 1 < len(levels) else max_batch
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], hi, k)  # merge equal neighbours
        else:
            out.append((c, hi, k))
    return out


def vllm_schedule_config(mp: MethodsPlan, cand: Candidate, max_batch: int) -> dict[str, Any]:
    """The --speculative-config JSON carrying the schedule (num_speculative_tokens = the
    largest k: vLLM clamps every scheduled k to it)."""
    sched = vllm_schedule(mp, cand.label, max_batch)
    kmax = max(k for *_, k in sched)
    m = registry.get(cand.method, "candidate method")
    if not m.serves("vllm"):
        raise Eagle3Error(f"--vllm-schedule: vLLM does not serve {cand.method}")
    if kmax == 0:
        raise Eagle3Error(
            f"--vllm-schedule: plain decoding wins at every measured level for {cand.label!r}; "
            "serve without speculation (vLLM needs num_speculative_tokens > 0)"
        )
    doc = m.vllm_config(kmax, cand.draft) or {}
    doc["num_speculative_tokens_per_batch_size"] = [list(e) for e in sched]
    return doc
