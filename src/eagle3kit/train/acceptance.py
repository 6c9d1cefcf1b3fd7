"""Offline acceptance: one aggregator, one name per meaning (used by train, eval and probe).

Three accept lengths exist in the product; each has one name:

    tau_walk            the walked cycles: greedy chain decoding of depth k replayed on the
                        data (`ttt.walk`): a cycle starts where the previous one ended, accepts
                        a <= k drafts and emits a + 1 tokens; tau_walk = mean(a + 1) over the
                        cycles = 1 + sum_i P(a >= i). On answers the target wrote itself with
                        greedy decoding this is exactly what online chain decoding does.
    tau_every_position  every position as a cycle start:
                        1 + sum_{i=1..k} prod_{j<=i} cond_acc_j (`ttt.tau_every_position`).
                        It reads higher than tau_walk: real cycles often start right after a
                        token the drafter missed, where it is weaker.
    tau_online          the decoder's own count (not computed here): tokens emitted per target
                        forward in real decoding, `decode.stats.DecodeStats.tau_online`, which
                        `eval --online`, `bench` and `generate` report as "tau_online".

`acceptance(drafter, batches, k)` sums the TTT counts of the batches (`ttt.ttt_counts`) and
returns an `Acceptance`. Training keeps RUN/best by `tau_walk`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eagle3kit.train.ttt import Counts, tau_every_position, ttt_counts

if TYPE_CHECKING:
    from collections.abc import Iterable

    from eagle3kit.data.features import Features
    from eagle3kit.model.drafter import Eagle3Drafter


@dataclass
class Acceptance:
    """Teacher-forced acceptance of a drafter over some samples, per draft step i < k."""

    depth: int
    acc: list[float]  # P(step i right) over every counted position
    cond_acc: list[float]  # P(step i right | steps < i right), every position
    loss: list[float]  # cross-entropy to the target's distribution, per step
    counted: list[int]  # positions counted, per step
    walk_acc: list[float]  # P(a >= i+1) over the walked cycles
    cycles: int  # cycles walked
    tau_walk: float
    tau_every_position: float
    tau_every_position_by_depth: list[float]  # the same at depth 1..k

    def rounded(self, ndigits: int) -> dict[str, Any]:
        """The per-step lists and taus rounded to `ndigits` (counts as they are)."""

        def r(xs: list[float]) -> list[float]:
            return [round(x, ndigits) for x in xs]

        return {
            "acc": r(self.acc),
            "cond_acc": r(self.cond_acc),
            "counted": self.counted,
            "loss": r(self.loss),
            "walk_acc": r(self.walk_acc),
            "cycles": self.cycles,
            "tau_every_position": round(self.tau_every_position, ndigits),
            "tau_walk": round(self.tau_walk, ndigits),
        }


def from_counts(counts: Counts) -> Acceptance:
    """An `Acceptance` from summed counts (`ttt.Counts`, summed over batches and ranks)."""
    m = counts.finish()
    k = counts.k
    by_depth = [tau_every_position(m["cond_acc"], d) for d in range(1, k + 1)]
    return Acceptance(
        depth=k,
        acc=m["acc"],
        cond_acc=m["cond_acc"],
        loss=m["loss"],
        counted=m["counted"],
        walk_acc=m["walk_acc"],
        cycles=m["walk_cycles"],
        tau_walk=m["tau_walk"],
        tau_every_position=tau_every_position(m["cond_acc"]),
        tau_every_position_by_depth=by_depth,
    )


def count(drafter: Eagle3Drafter, batches: Iterable[Features], k: int) -> Counts:
    """Summed TTT counts of `drafter` over feature batches, in eval mode (mode restored)."""
    total = Counts(k)
    was = drafter.training
    drafter.eval()
    try:
        for f in batches:
            total = total + ttt_counts(drafter, f, k)
    finally:
        drafter.train(was)
    return total


def acceptance(drafter: Eagle3Drafter, batches: Iterable[Features], k: int) -> Acceptance:
    """Offline acceptance of `drafter` over feature batches (`Features`) at depth k."""
    return from_counts(count(drafter, batches, k))


def metrics_row(step: int, a: Acceptance) -> dict[str, Any]:
    """One line of RUN/metrics.jsonl (lines written before the names were settled are read by
    `core.retired.current_row`)."""
    return {
        "step": step,
        "loss": a.loss,
        "acc": a.acc,
        "cond_acc": a.cond_acc,
        "tau_walk": a.tau_walk,
        "tau_every_position": a.tau_every_position,
        "tau_every_position_by_depth": a.tau_every_position_by_depth,
        "counted": a.counted,
        "walk_acc": a.walk_acc,
        "cycles": a.cycles,
    }
