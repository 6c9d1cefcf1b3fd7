"""Token choice for the target and the drafter: greedy, or temperature + top-p sampling.

The speculative-sampling rule (Leviathan et al. 2023; Chen et al. 2023), per draft token d_i
drawn from the draft distribution q_i, against the target distribution p_i at that position:

    accept d_i with probability min(1, p_i(d_i) / q_i(d_i))
    on the first rejection emit r ~ norm(max(p_i - q_i, 0))       (the residual), and stop
    when all k are accepted emit the bonus b ~ p_{k+1}

Every emitted token is then distributed exactly as p (the target's own sampling distribution,
temperature and top-p included). q lives on the draft vocabulary: it is scattered onto target
ids with d2t, so target ids outside the draft vocabulary have q = 0 (never drafted; a residual
may still emit them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from eagle3kit.core.errors import Eagle3Error

if TYPE_CHECKING:
    from eagle3kit.model.protocols import Drafter


@dataclass(frozen=True)
class Sampling:
    """temperature 0 = greedy (argmax); top_p keeps the smallest head of mass >= top_p."""

    temperature: float = 0.0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise Eagle3Error(f"temperature: expected >= 0, found {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise Eagle3Error(f"top_p: expected 0 < top_p <= 1, found {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


GREEDY = Sampling()  # the default: argmax


def probs(logits: torch.Tensor, s: Sampling) -> torch.Tensor:
    """softmax(logits / T), then top-p: keep tokens while the mass before them is < top_p."""
    p = torch.softmax(logits.float() / s.temperature, dim=-1)  # [..., V]
    if s.top_p < 1.0:
        sp, order = p.sort(dim=-1, descending=True)  # [..., V]
        drop = (sp.cumsum(-1) - sp) >= s.top_p  # the head before them already holds top_p
        sp = sp.masked_fill(drop, 0.0)
        p = torch.zeros_like(p).scatter(-1, order, sp)
        p = p / p.sum(-1, keepdim=True)
    return p


def make_generator(device: torch.device | str, seed: int) -> torch.Generator:
    """A seeded random generator on ``device``: the device of the tensors it will sample."""
    return torch.Generator(device=torch.device(device)).manual_seed(seed)


def draw(p: torch.Tensor, gen: torch.Generator | None) -> int:
    """One token id from the distribution p [V]."""
    return int(torch.multinomial(p, 1, generator=gen))


def draft_probs_on_target(q_draft: torch.Tensor, drafter: Drafter, vocab_size: int) -> torch.Tensor:
    """Draft probabilities [n, Vd] scattered onto target ids: [n, V] (0 off the draft vocab)."""
    ids = drafter.to_target_ids(torch.arange(q_draft.shape[-1], device=q_draft.device))  # [Vd]
    q = torch.zeros(q_draft.shape[0], vocab_size, device=q_draft.device)  # [n, V]
    return q.index_add_(1, ids, q_draft.float())


def accept_sampled(
    p: torch.Tensor, q: torch.Tensor, drafts: list[int], gen: torch.Generator | None
) -> tuple[int, int]:
    """(accepted count a, next token) for drafts [k] with target p [k+1, V], draft q [k, V].

    The rule of the module docstring; q[i, drafts[i]] > 0 since drafts[i] was drawn from q[i].
    """
    for i, d in enumerate(drafts):
        r = float(torch.rand((), generator=gen, device=p.device))  # gen lives there too
        if r < min(1.0, float(p[i, d] / q[i, d])):
            continue
        residual = (p[i] - q[i]).clamp(min=0.0)  # [V]
        total = float(residual.sum())
        # p == q up to rounding leaves no residual mass; then p itself is the right law
        return i, draw(residual / total if total > 0 else p[i], gen)
    return len(drafts), draw(p[len(drafts)], gen)
