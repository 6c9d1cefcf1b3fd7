"""What a speculative run returns about itself: per-cycle counts and times, and their summary.

With a_c the drafts accepted in cycle c (0..k) over C cycles:

    accept length tau         = mean_c (a_c + 1)          tokens emitted per target forward
    per-position acceptance_i = #{c: a_c >= i} / C        i = 1..k (the i-th draft accepted)
    conditional acceptance_i  = #{c: a_c >= i} / #{c: a_c >= i-1}

For a tree, a_c is the length of the accepted path and position i is depth i.
The last cycle counts only what it produced before generation ended (EOS included, the
token limit), so tau is the tokens a target forward actually produced.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from eagle3kit.plan.forecast import conditional


@dataclass
class Cycle:
    """One draft + verify cycle."""

    drafted: int  # draft tokens sent to the target (k for a chain, tree nodes for a tree)
    accepted: int  # drafts accepted (the path length); the cycle emits accepted + 1 tokens
    draft_s: float  # drafter time: catch-up on the last cycle's tokens + the draft steps
    verify_s: float  # the target's verify forward
    cycle_s: float  # the whole cycle, bookkeeping included


@dataclass
class DecodeStats:
    """Counts and times of one generation (batch 1)."""

    depth: int
    method: str  # "chain" | "tree" | "greedy"
    prompt_tokens: int = 0
    new_tokens: int = 0
    prefill_s: float = 0.0
    total_s: float = 0.0  # wall time of the whole generation, prefill included
    cycles: list[Cycle] = field(default_factory=list)

    @property
    def tau_online(self) -> float:
        """Mean tokens emitted per cycle, mean(accepted + 1) (docs/ARCHITECTURE.md, Glossary)."""
        if not self.cycles:
            return 1.0
        return sum(c.accepted + 1 for c in self.cycles) / len(self.cycles)

    def per_position_acceptance(self) -> list[float]:
        n = len(self.cycles)
        return [
            sum(c.accepted >= i for c in self.cycles) / n if n else 0.0
            for i in range(1, self.depth + 1)
        ]

    def conditional_acceptance(self) -> list[float]:
        return conditional(self.per_position_acceptance())

    @property
    def tokens_per_s(self) -> float:
        """New tokens over the whole wall time (prefill included)."""
        return self.new_tokens / self.total_s if self.total_s > 0 else 0.0

    def mean_ms(self, name: str) -> float:
        """Mean of a per-cycle time (draft_s, verify_s, cycle_s) in ms."""
        vals = [getattr(c, name) for c in self.cycles]
        return 1e3 * statistics.fmean(vals) if vals else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "depth": self.depth,
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "cycles": len(self.cycles),
            "tau_online": self.tau_online,
            "per_position_acceptance": self.per_position_acceptance(),
            "conditional_acceptance": self.conditional_acceptance(),
            "tokens_per_s": self.tokens_per_s,
            "prefill_ms": 1e3 * self.prefill_s,
            "total_ms": 1e3 * self.total_s,
            "draft_ms": self.mean_ms("draft_s"),
            "verify_ms": self.mean_ms("verify_s"),
            "cycle_ms": self.mean_ms("cycle_s"),
        }
