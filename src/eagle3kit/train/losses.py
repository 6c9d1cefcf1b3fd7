"""The losses a drafter trains with: how far its law q is from the target's p, per position.

q = softmax(z) over the draft vocabulary (z: the drafter's logits); p is the target's law at
the same position, given as probabilities `p` of `ids` (a top-K teacher) or of every draft id
in order (`ids` None). A top-K teacher's vocabulary is read as K + 1 bins: the K kept ids and
one bin "rest" holding the mass the teacher did not keep (`rest`, 0 for a renormalised
teacher) and whatever q puts outside the K ids. With every id kept the bins are the ids and
the formulas below are the exact divergences; with K < Vd they are the divergences of the two
laws coarsened to those bins (for KL, reverse KL, JSD and TV a lower bound, by data
processing). For bins b:

    kl         - sum_b p_b log q_b                   forward KL(p || q) + H(p); H(p) is the
                                                     teacher's entropy, a constant: the same
                                                     gradient, and the value logged (EAGLE-3)
    rkl        sum_b q_b (log q_b - log p_b)         reverse KL(q || p): mode-seeking
    jsd        (KL(p || m) + KL(q || m)) / 2,        Jensen-Shannon (Lin 1991), m = (p + q) / 2;
                                                     bounded by log 2
    tv         1 - alpha,  alpha = sum_b min(p_b, q_b)
                                                     total variation; alpha is the chance
                                                     speculative sampling accepts a draft from
                                                     q when the target samples from p
    ce         - log q_a,  a = argmax_b p_b          hard labels: the target's greedy token
    lk         - log alpha  (alpha clamped >= 1e-5)  LK's negative log-acceptance: the gradient
                                                     of tv scaled by 1 / alpha
    lk-hybrid  lam KL(p || q) + (1 - lam) TV,        LK's hybrid, lam = exp(-eta sg(alpha))
                                                     (sg: no gradient through lam; eta = 3)

LK: Samarin et al., "LK Losses: Direct Acceptance Rate Optimization for Speculative Decoding",
arXiv 2602.23881; the same definitions (and eta = 3) as vllm-project/speculators 0.9.0
`losses/eager.py` (`neg_log_acceptance_loss`, `lk_hybrid_loss`), which computes them over the
whole draft vocabulary from dense teacher logits.

Memory. The draft vocabulary is the widest axis of training: a [B, T, Vd] float32 copy per
step is what runs out first. `position_losses` computes the loss in chunks of positions with no
gradient kept, and recomputes each chunk's gradient in the backward pass (a local autograd
graph of one chunk): the step holds the logits and one chunk's temporaries, never a
full-vocabulary log-softmax per TTT step. Positions are independent, so the values and
gradients are those of the whole batch at once (to float rounding: an elementwise kernel may
round a last bit otherwise at a chunk's edge; a row-wise one, as kl's log-softmax, does not).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from eagle3kit.train.loss_names import check_loss

LK_ETA = 3.0  # the LK paper's best hybrid setting (speculators' default)
ALPHA_FLOOR = 1e-5  # lk: -log(max(alpha, floor)), as speculators clamps it
P_FLOOR = 1e-30  # log p of a bin the teacher gives no mass (reverse KL's only infinity)
CHUNK_BYTES = 1 << 26  # float32 temporaries per chunk: 64 MiB


@dataclass(frozen=True)
class Teacher:
    """The target's law at [..] positions over the draft vocabulary: probabilities `p`
    [.., K] of the draft ids `ids` [.., K] (None: K = Vd, every id in order) and the mass
    `rest` [..] of the ids it did not keep (None: nothing left out)."""

    p: torch.Tensor
    ids: torch.Tensor | None = None
    rest: torch.Tensor | None = None

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Teacher:
        """`fn` applied to each of its tensors (an index over the leading dims)."""
        return Teacher(
            fn(self.p),
            None if self.ids is None else fn(self.ids),
            None if self.rest is None else fn(self.rest),
        )

    def sliced(self, s: slice) -> Teacher:
        """The teacher at positions `s` of dim 1 (views)."""
        return self.map(lambda x: x[:, s])


def teacher_from_logp(name: str, logp: torch.Tensor, ids: torch.Tensor | None) -> Teacher:
    """The teacher loss `name` reads from the features' one (data/features.py: `logp` [.., K]
    a log-softmax over the draft vocabulary, every id in order when `ids` is None, else its K
    largest, not renormalised). Full: p = exp(logp). Top-K: `kl` renormalises over the K ids
    (EAGLE-3's soft cross entropy, the loss before this choice, bitwise); every other loss
    reads the K probabilities as they are and `rest` = 1 - their sum, the draft vocabulary's
    mass the features left out (clamped at 0: a float16 store may round the sum past 1)."""
    lp = logp.float()
    if ids is None:
        return Teacher(lp.exp())
    if name == "kl":
        return Teacher(lp.softmax(-1), ids)
    p = lp.exp()
    return Teacher(p, ids, (1.0 - p.sum(-1)).clamp(min=0.0))


def token_teacher(tokens: torch.Tensor) -> Teacher:
    """A one-hot teacher at `tokens` [..] (draft ids): the data token as the label, for
    which `kl` and `ce` are both -log q_token."""
    return Teacher(torch.ones(*tokens.shape, 1, device=tokens.device), tokens.unsqueeze(-1))


def position_losses(
    name: str, logits: torch.Tensor, teacher: Teacher, *, eta: float = LK_ETA
) -> torch.Tensor:
    """The loss `name` at every position: logits [B, T, Vd] -> [B, T] float32, with autograd
    to the logits (module doc: chunked, no full-vocabulary copy kept for the backward)."""
    fn = _FORMULAS[check_loss(name)]
    if name == "lk-hybrid":
        fn = _hybrid(eta)
    return _Chunked.apply(logits, teacher.p, teacher.ids, teacher.rest, fn)


# -- the formulas, on one chunk of positions ------------------------------------------------


def _bins(z: torch.Tensor, t: Teacher) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log q, q, p) over the bins: [.., K] for a full teacher, [.., K+1] with the rest bin."""
    logq = F.log_softmax(z.float(), dim=-1)  # [.., Vd]
    if t.ids is None:
        return logq, logq.exp(), t.p.float()
    logq_k = logq.gather(-1, t.ids)  # [.., K]
    q_k = logq_k.exp()
    q_rest = (1.0 - q_k.sum(-1, keepdim=True)).clamp(min=0.0)  # [.., 1]
    rest = t.rest if t.rest is not None else torch.zeros_like(t.p[..., 0])
    p = torch.cat([t.p.float(), rest.float().unsqueeze(-1)], dim=-1)  # [.., K+1]
    q = torch.cat([q_k, q_rest], dim=-1)
    return q.clamp(min=P_FLOOR).log(), q, p


def _kl(z: torch.Tensor, t: Teacher) -> torch.Tensor:
    logq = F.log_softmax(z.float(), dim=-1)  # [.., Vd]
    if t.ids is None:
        return -(t.p * logq).sum(-1)
    logq_k = logq.gather(-1, t.ids)  # [.., K]
    ce = -(t.p * logq_k).sum(-1)
    if t.rest is None:
        return ce
    q_rest = (1.0 - logq_k.exp().sum(-1)).clamp(min=P_FLOOR)
    return ce - t.rest * q_rest.log()


def _rkl(z: torch.Tensor, t: Teacher) -> torch.Tensor:
    logq, q, p = _bins(z, t)
    return (q * (logq - p.clamp(min=P_FLOOR).log())).sum(-1)


def _jsd(z: torch.Tensor, t: Teacher) -> torch.Tensor:
    logq, q, p = _bins(z, t)
    logp = p.clamp(min=P_FLOOR).log()
    logm = torch.logaddexp(logq, logp) - math.log(2.0)
    kl_pm = (p * (logp - logm)).sum(-1)
    kl_qm = (q * (logq - logm)).sum(-1)
    return 0.5 * (kl_pm + kl_qm)


def _alpha(z: torch.Tensor, t: Teacher) -> torch.Tensor:
    _, q, p = _bins(z, t)
    return torch.minimum(p, q).sum(-1)


def _tv(z: torch.Tensor, t: Teacher) -> torch.Tensor:
    return 1.0 - _alpha(z, t)


def _ce(z: torch.Tensor, t: Teacher) -> torch.Tensor:
    logq = F.log_softmax(z.float(), dim=-1)  # [.., Vd]
    best = t.p.argmax(-1, keepdim=True)  # [.., 1] column of the teacher's greedy token
    ids = best if t.ids is None else t.ids.gather(-1, best)
    return -logq.gather(-1, ids).squeeze(-1)


def _lk(z: torch.Tensor, t: Teacher) -> torch.Tensor:
    return -_alpha(z, t).clamp(min=ALPHA_FLOOR).log()


def _hybrid(eta: float) -> Callable[[torch.Tensor, Teacher], torch.Tensor]:
    def hybrid(z: torch.Tensor, t: Teacher) -> torch.Tensor:
        logq, q, p = _bins(z, t)
        alpha = torch.minimum(p, q).sum(-1)
        kl = (p * (p.clamp(min=P_FLOOR).log() - logq)).sum(-1)
        lam = torch.exp(-eta * alpha.detach())
        return lam * kl + (1.0 - lam) * (1.0 - alpha)

    return hybrid


_FORMULAS: dict[str, Callable[[torch.Tensor, Teacher], torch.Tensor]] = {
    "kl": _kl,
    "rkl": _rkl,
    "jsd": _jsd,
    "tv": _tv,
    "ce": _ce,
    "lk": _lk,
    "lk-hybrid": _hybrid(LK_ETA),
}


# -- chunked evaluation -----------------------------------------------------------------------


def _chunks(logits: torch.Tensor) -> list[slice]:
    """Slices of dim 1 (positions) whose float32 [B, c, Vd] temporaries fit CHUNK_BYTES."""
    b, t, v = logits.shape
    step = max(1, CHUNK_BYTES // (4 * max(1, b * v)))
    return [slice(s, min(s + step, t)) for s in range(0, t, step)]


class _Chunked(torch.autograd.Function):
    """loss [B, T] = fn(logits [B, T, Vd], teacher), one chunk of positions at a time; the
    backward recomputes each chunk under autograd (module doc)."""

    @staticmethod
    def forward(ctx, logits, p, ids, rest, fn):  # noqa: ANN001 (autograd's signature)
        teacher = Teacher(p, ids, rest)
        with torch.no_grad():
            out = [fn(logits[:, s], teacher.sliced(s)) for s in _chunks(logits)]
        ctx.save_for_backward(logits, p, ids, rest)
        ctx.fn = fn
        return torch.cat(out, dim=1) if out else logits.new_zeros(logits.shape[:2])

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001
        logits, p, ids, rest = ctx.saved_tensors
        teacher = Teacher(p, ids, rest)
        out = torch.zeros_like(logits)
        for s in _chunks(logits):
            with torch.enable_grad():
                z = logits[:, s].detach().requires_grad_()
                loss = ctx.fn(z, teacher.sliced(s))
                (g,) = torch.autograd.grad(loss, z, grad[:, s])
            out[:, s] = g
        return out, None, None, None, None
