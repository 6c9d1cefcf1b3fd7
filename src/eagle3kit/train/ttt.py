"""Training-time test (TTT): the drafter unrolled over k draft steps, its loss and its metrics.

Alignment (docs/train.md, "What one step computes"). At position t, step 0 reads the
target's aux states at t and the embedding of token x[t+1], and predicts x[t+2]; step i
reads step i-1's output hidden at t and the embedding of x[t+1+i], and predicts x[t+2+i].
Step i at t is what chain decoding does at rotary position t+i after a prefix that ends at
t, so its query sees

    step 0's keys at positions 0..t   (the causal prefix)   and   its own column t of steps 1..i

(`ttt_mask`). The teacher of step i at t is the target's next-token distribution at t+1+i,
restricted to the draft vocabulary (`teacher_logp`, `teacher_ids`).

Loss of step i, over the set C_i of positions t where the predicted token is an assistant token
(loss_mask[t+2+i]) and the target's argmax at t+1+i lies in the draft vocabulary:

    L_i = (1/|C_i|) sum_{t in C_i} - sum_j p_j(t+1+i) log q_i(teacher_ids_j | t)
    L   = sum_i 0.8^i L_i

with p = softmax over the K teacher columns (= exp(teacher_logp) when K = Vd). That is the
default, `--loss kl`; another loss replaces the inner term by its own per-position value
against the same teacher (train/losses.py `position_losses`; a top-K teacher then keeps its
rest mass, `losses.teacher_from_logp`), with the same C_i, averages and step weights.

Metrics of step i count every position M_i where loss_mask[t+2+i] (a target argmax outside
the draft vocabulary is a miss, as it is in decoding). hit_i(t) = (d2t-mapped argmax of q_i at
t == target_argmax[t+1+i]); chain_i(t) = (t in M_0 and hit_0(t)) and ... and (t in M_i and
hit_i(t)): a chain through a prompt token is not one decoding would draft.

    acc_i      = |{t in M_i: hit_i}| / |M_i|
    cond_acc_i = |{t in M_i: chain_i}| / |{t in M_i: chain_{i-1}}|       (chain_{-1} = true)
    tau        = 1 + sum_{i=1..k} prod_{j<=i} cond_acc_j                 (tau_every_position)

tau is the accept length a greedy chain of k drafts would reach from a position drawn
uniformly from the data. Decoding does not start cycles uniformly: a cycle starts right after
the previous one ended, often just after a token the drafter missed. `walk` replays that: in
each assistant span [s, e) the first cycle drafts from t = s-1 (the prompt's prefill emitted
x[s]); a cycle at t accepts a(t) = the leading run of chain hits at t (at most k) and emits
a(t)+1 tokens (fewer when the span ends first, as decoding stops at EOS), so the next cycle
starts at t + a(t) + 1, until t + 2 >= e. Over the C cycles
walked:

    walk_acc_i = #{cycles: a >= i} / C,   tau_walk = 1 + sum_i walk_acc_i

On data the target wrote itself with greedy decoding, this is exactly the cycle sequence greedy
chain decoding of those prompts goes through.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.model.drafter import DraftCache
from eagle3kit.train.losses import Teacher, position_losses, teacher_from_logp

if TYPE_CHECKING:
    from eagle3kit.model.drafter import Eagle3Drafter

STEP_DECAY = 0.8  # step weights 0.8^i (EAGLE)


def ttt_mask(t: int, k: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Bool [T, k*T]: block 0 causal (s <= t), blocks 1..k-1 diagonal (own position only).

    Step i uses the first (i+1)*T columns (its keys are appended to the cache before attention).
    """
    causal = torch.ones(t, t, dtype=torch.bool, device=device).tril()  # [T, T]
    eye = torch.eye(t, dtype=torch.bool, device=device)  # [T, T]
    return torch.cat([causal] + [eye] * (k - 1), dim=1)  # [T, k*T]


@functools.lru_cache(maxsize=8)
def ttt_bias(t: int, k: int, device: str, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """`ttt_mask` as the additive masks attention adds to its scores (0 where it may attend,
    -inf elsewhere), one contiguous [T, (i+1)*T] per step i, in the drafter's dtype. Built
    once per (T, k, device, dtype) and reused: scaled_dot_product_attention would otherwise
    turn a bool mask into this one on every call, forward and backward."""
    mask = ttt_mask(t, k, device)  # [T, k*T]
    bias = torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill_(~mask, float("-inf"))
    return tuple(bias[:, : (i + 1) * t].contiguous() for i in range(k))


def shift(x: torch.Tensor, n: int, fill: int | float | bool = 0) -> torch.Tensor:
    """y[:, t] = x[:, t+n] along dim 1, `fill` past the end."""
    if n == 0:
        return x
    pad = torch.full_like(x[:, :n], fill)
    return torch.cat([x[:, n:], pad], dim=1)


def unroll(drafter: Eagle3Drafter, input_ids: torch.Tensor, aux: torch.Tensor, k: int):
    """Yield the logits [B, T, Vd] of steps 0..k-1 (see the module docstring). The hidden
    step i reads is step i-1's output: h, or norm(h) for a `norm_output` drafter
    (`DraftOutput.hidden`), as decoding runs it; a drafter may feed a step other inputs
    (`step_inputs`: a P-EAGLE drafter's steps i >= 1 are its parallel depths, every position t
    an anchor, depth i reading the mask token and `mask_hidden` at position t+i, under the
    same mask: methods/peagle/model.py)."""
    b, t = input_ids.shape
    bias = ttt_bias(t, k, str(input_ids.device), _dtype(drafter))  # [T, (i+1)*T] per step
    pos = torch.arange(t, device=input_ids.device).expand(b, t)  # [B, T]
    cache = DraftCache()
    hidden, from_aux = aux, True  # [B, T, 3Ht] on step 0, then [B, T, H]
    for i in range(k):
        ids = shift(input_ids, 1 + i)  # [B, T]: x[t+1+i]
        ids, hidden, from_aux = drafter.step_inputs(i, ids, hidden, from_aux)
        out = drafter(ids, hidden, cache, pos + i, bias[i], from_aux=from_aux)
        hidden, from_aux = out.hidden, False
        yield out.logits


def ttt_forward(drafter: Eagle3Drafter, feats: Any, k: int) -> list[torch.Tensor]:
    """Logits [B, T, Vd] of each of the k unrolled steps."""
    return list(unroll(drafter, feats.input_ids, feats.aux.to(_dtype(drafter)), k))


def _dtype(drafter: Eagle3Drafter) -> torch.dtype:
    return drafter.fc.weight.dtype


_FIELDS = ("loss_sum", "loss_n", "hits", "counted", "chain", "chain_prev", "walk_ge", "walk_n")


@dataclass
class Counts:
    """Sums over positions, per step; add them across batches and ranks, then `finish`."""

    k: int
    loss_sum: torch.Tensor = field(default=None)  # [k] sum of the loss over C_i
    loss_n: torch.Tensor = field(default=None)  # [k] |C_i|
    hits: torch.Tensor = field(default=None)  # [k] |{M_i: hit_i}|
    counted: torch.Tensor = field(default=None)  # [k] |M_i|
    chain: torch.Tensor = field(default=None)  # [k] |{M_i: chain_i}|
    chain_prev: torch.Tensor = field(default=None)  # [k] |{M_i: chain_{i-1}}|
    walk_ge: torch.Tensor = field(default=None)  # [k] #{walked cycles: a >= i+1}
    walk_n: torch.Tensor = field(default=None)  # [k] #walked cycles (the same in every column)

    def __post_init__(self) -> None:
        for name in _FIELDS:
            if getattr(self, name) is None:
                setattr(self, name, torch.zeros(self.k, dtype=torch.float64))

    def stacked(self) -> torch.Tensor:
        """[8, k] float64 (one all_reduce for all of them)."""
        return torch.stack([getattr(self, name) for name in _FIELDS])

    @classmethod
    def from_stacked(cls, s: torch.Tensor) -> Counts:
        return cls(s.shape[1], *s.cpu().unbind(0))

    def __add__(self, o: Counts) -> Counts:
        return Counts.from_stacked(self.stacked() + o.stacked())

    def finish(self) -> dict[str, list[float]]:
        """acc, cond_acc, loss, counted, walk_acc per step (0.0 where nothing was counted),
        and tau_walk and walk_cycles."""

        def ratio(a: torch.Tensor, b: torch.Tensor) -> list[float]:
            return [float(x / y) if y > 0 else 0.0 for x, y in zip(a, b, strict=True)]

        return {
            "acc": ratio(self.hits, self.counted),
            "cond_acc": ratio(self.chain, self.chain_prev),
            "loss": ratio(self.loss_sum, self.loss_n),
            "counted": [int(c) for c in self.counted],
            "walk_acc": ratio(self.walk_ge, self.walk_n),
            "tau_walk": 1.0 + sum(ratio(self.walk_ge, self.walk_n)),
            "walk_cycles": int(self.walk_n[0]) if self.k else 0,
        }


def batch_teacher(feats: Any, vd: int, loss: str = "kl") -> Teacher:
    """The teacher of a batch [B, T, K] as loss `loss` reads it (losses.teacher_from_logp: the
    whole draft vocabulary when K = vd, else the top-K ids, renormalised for kl, with their
    rest mass for the others). Computed once per batch; every TTT step reads a shifted
    slice."""
    lp = feats.teacher_logp
    return teacher_from_logp(loss, lp, None if lp.shape[-1] == vd else feats.teacher_ids)


def step_terms(
    drafter: Eagle3Drafter,
    feats: Any,
    logits: torch.Tensor,
    i: int,
    *,
    metrics: bool = True,
    teacher: Teacher | None = None,
    loss: str = "kl",
):
    """(loss, loss positions C_i, hit, metric positions M_i), each [B, L] over t = 0..L-1
    (hit is None without `metrics`): the loss `loss` of each position (train/losses.py
    `position_losses`) against `teacher` (`batch_teacher(feats, Vd, loss)`, when already
    computed).

    L = T - 2 - i: later positions predict past the end of the sequence. Views, not copies:
    position t of step i reads the teacher at t+1+i and the loss mask at t+2+i.
    """
    n = 1 + i  # teacher offset
    t = feats.input_ids.shape[1]
    L = max(0, t - n - 1)
    lm = feats.loss_mask[:, n + 1 :]  # [B, L]: the predicted token is an assistant token
    tgt = feats.target_argmax[:, n : n + L]  # [B, L] target ids
    in_vocab = drafter.t2d[tgt]  # [B, L]
    if teacher is None:
        teacher = batch_teacher(feats, logits.shape[-1], loss)
    ell = position_losses(loss, logits[:, :L], teacher.sliced(slice(n, n + L)))  # [B, L]
    hit = None
    if metrics:
        hit = drafter.to_target_ids(logits[:, :L].argmax(-1)) == tgt  # [B, L]
    return ell, lm & in_vocab, hit, lm


def ttt_loss(
    drafter: Eagle3Drafter,
    feats: Any,
    k: int,
    *,
    norm: torch.Tensor | None = None,
    counts: bool = True,
    loss: str = "kl",
) -> tuple[torch.Tensor, Counts]:
    """(sum_i 0.8^i L_i, the step's Counts). The loss keeps autograd; counts are detached.
    `loss`: the per-position loss (train/losses.py; kl, the default, is the soft cross
    entropy of the module docstring), also what Counts' loss sums.

    `norm` [k] replaces |C_i| as the denominator (data-parallel training divides every rank's
    sum by the global count, so the summed gradients equal one process on the whole batch).
    `counts=False` skips the metrics (host syncs and the walk): the Counts stay zero, and
    nothing waits on the device. The loss is float32 whatever `norm`'s dtype.
    """
    c = Counts(k)
    total = torch.zeros((), device=feats.input_ids.device)  # float32
    if counts:
        chain = torch.ones_like(feats.loss_mask)  # [B, T]
        ok = torch.zeros(*feats.loss_mask.shape, k, dtype=torch.bool)  # [B, T, k] hit_i & M_i
    teacher = batch_teacher(feats, int(drafter.d2t.numel()), loss)  # [B, T, K], for all k steps
    for i, logits in enumerate(unroll(drafter, feats.input_ids, feats.aux.to(_dtype(drafter)), k)):
        ell, cmask, hit, m = step_terms(
            drafter, feats, logits, i, metrics=counts, teacher=teacher, loss=loss
        )
        s = (ell * cmask).sum()
        n = cmask.sum()
        denom = norm[i].float() if norm is not None else n.clamp(min=1)
        total = total + (STEP_DECAY**i) * s / denom
        if not counts:
            continue
        with torch.no_grad():
            chain = chain[:, : hit.shape[1]]  # [B, L]: positions that still predict inside T
            prev, chain = chain, chain & hit & m
            c.loss_sum[i], c.loss_n[i] = float(s.detach()), float(n)
            c.hits[i], c.counted[i] = float((hit & m).sum()), float(m.sum())
            c.chain[i], c.chain_prev[i] = float((chain & m).sum()), float((prev & m).sum())
            ok[:, : hit.shape[1], i] = (hit & m).cpu()
    if counts:
        cycles = walk(ok, feats.loss_mask.cpu())
        for i in range(k):
            c.walk_ge[i], c.walk_n[i] = float(sum(a > i for a in cycles)), float(len(cycles))
    return total, c


def walk(ok: torch.Tensor, loss_mask: torch.Tensor) -> list[int]:
    """Accepted drafts of each cycle greedy chain decoding goes through on the data (module
    docstring). ok [B, T, k]: step i hits at t and counts (hit_i & M_i); loss_mask [B, T]."""
    return [a for _, _, a in walk_cycles(ok, loss_mask)]


def walk_cycles(ok: torch.Tensor, loss_mask: torch.Tensor) -> list[tuple[int, int, int]]:
    """(row b, start t, accepted drafts a) of each walked cycle, in `walk`'s order."""
    runs = ok.int().cumprod(-1).sum(-1).tolist()  # [B][T]: a(t), the leading run of hits
    out: list[tuple[int, int, int]] = []
    for b, (run, lm) in enumerate(zip(runs, loss_mask.tolist(), strict=True)):
        n, s = len(lm), 0
        while s < n:
            if not lm[s]:
                s += 1
                continue
            e = s
            while e < n and lm[e]:
                e += 1
            t = max(s - 1, 0)
            while t + 2 < e:  # x[t+2..e-1] still to emit
                a = min(run[t], e - t - 3)  # the span's end stops the cycle, as EOS does
                out.append((b, t, a))
                t += a + 1
            s = e
    return out


def counts_by_position(
    drafter: Eagle3Drafter, feats: Any, k: int, where: list[torch.Tensor]
) -> list[Counts]:
    """`ttt_counts` of one batch restricted to each position set of ``where`` (bool [B, T]
    each: the positions t counted; a walked cycle counts in the set of its start t), from
    one unrolled pass. No loss terms (loss_sum and loss_n stay zero)."""
    out = [Counts(k) for _ in where]
    with torch.no_grad():
        chain = torch.ones_like(feats.loss_mask)  # [B, T]
        ok = torch.zeros(*feats.loss_mask.shape, k, dtype=torch.bool)  # [B, T, k]
        aux = feats.aux.to(_dtype(drafter))
        for i, logits in enumerate(unroll(drafter, feats.input_ids, aux, k)):
            _, _, hit, m = step_terms(drafter, feats, logits, i)
            chain = chain[:, : hit.shape[1]]
            prev, chain = chain, chain & hit & m
            for c, w in zip(out, where, strict=True):
                w = w[:, : hit.shape[1]].to(m.device)
                c.hits[i], c.counted[i] = float((hit & m & w).sum()), float((m & w).sum())
                c.chain[i] = float((chain & m & w).sum())
                c.chain_prev[i] = float((prev & m & w).sum())
            ok[:, : hit.shape[1], i] = (hit & m).cpu()
    cycles = walk_cycles(ok, feats.loss_mask.cpu())
    for c, w in zip(out, where, strict=True):
        mine = [a for b, t, a in cycles if bool(w[b, t])]
        for i in range(k):
            c.walk_ge[i], c.walk_n[i] = float(sum(a > i for a in mine)), float(len(mine))
    return out


def loss_positions(t2d: torch.Tensor, feats: Any, k: int) -> torch.Tensor:
    """|C_i| for i < k, float32 [k] on the features' device: known before the forward
    (data-parallel normalisation); computed without waiting on the device."""
    t = feats.input_ids.shape[1]
    out = []
    for i in range(k):
        L = max(0, t - i - 2)
        lm = feats.loss_mask[:, i + 2 :]  # [B, L]
        out.append((lm & t2d[feats.target_argmax[:, i + 1 : i + 1 + L]]).sum())
    return torch.stack(out).float()


def ttt_counts(drafter: Eagle3Drafter, feats: Any, k: int) -> Counts:
    """Counts of one batch without gradients (evaluation)."""
    with torch.no_grad():
        return ttt_loss(drafter, feats, k)[1]


def ttt_metrics(drafter: Eagle3Drafter, feats: Any, k: int) -> dict[str, list[float]]:
    """acc [k], cond_acc [k], loss [k], counted [k] of one batch (see the module docstring)."""
    return ttt_counts(drafter, feats, k).finish()


def tau_every_position(cond_acc: list[float], depth: int | None = None) -> float:
    """tau = 1 + sum_{i=1..d} prod_{j<=i} cond_acc_j, d = depth (default: all steps)."""
    tau, run = 1.0, 1.0
    for p in cond_acc[: depth if depth is not None else len(cond_acc)]:
        run *= p
        tau += run
    return tau
