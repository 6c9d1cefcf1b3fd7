"""train/losses.py against hand computations: every loss's value and gradient on a law of three
tokens (values from math.log, gradients from the closed forms dL/dz_v = q_v (g_v - sum_u q_u
g_u) with g = dL/dq written out per loss), the top-K teacher's bins, chunking, and what the
forward keeps for the backward."""

from __future__ import annotations

import math

import pytest
import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.train import losses
from eagle3kit.train.loss_names import LOSSES
from eagle3kit.train.losses import Teacher, position_losses

Q = [0.5, 0.3, 0.2]  # the draft's law
P = [0.2, 0.5, 0.3]  # the target's law


def _z(q: list[float]) -> torch.Tensor:
    return torch.tensor([[[math.log(x) for x in q]]], dtype=torch.float32)  # [1, 1, V]


def _value_and_grad(name: str, q=Q, p=P, **kw) -> tuple[float, list[float]]:
    z = _z(q).requires_grad_()
    t = Teacher(torch.tensor([[p]]), **kw)
    loss = position_losses(name, z, t)
    loss.sum().backward()
    return float(loss.detach()), z.grad[0, 0].tolist()


def _through_softmax(g: list[float], q=Q) -> list[float]:
    """dL/dz from dL/dq: q_v (g_v - sum_u q_u g_u)."""
    mean = sum(qu * gu for qu, gu in zip(q, g, strict=True))
    return [qv * (gv - mean) for qv, gv in zip(q, g, strict=True)]


ALPHA = 0.2 + 0.3 + 0.2  # sum min(p, q)
M = [(a + b) / 2 for a, b in zip(P, Q, strict=True)]
KL_PQ = sum(p * math.log(p / q) for p, q in zip(P, Q, strict=True))
LAM = math.exp(-3.0 * ALPHA)
TV_G = [0.0, -1.0, -1.0]  # -1[q_b <= p_b]
HAND = {
    "kl": (
        -sum(p * math.log(q) for p, q in zip(P, Q, strict=True)),
        [q - p for p, q in zip(P, Q, strict=True)],
    ),
    "rkl": (
        sum(q * math.log(q / p) for p, q in zip(P, Q, strict=True)),
        _through_softmax([math.log(q / p) + 1 for p, q in zip(P, Q, strict=True)]),
    ),
    "jsd": (
        0.5
        * sum(p * math.log(p / m) + q * math.log(q / m) for p, q, m in zip(P, Q, M, strict=True)),
        _through_softmax([0.5 * math.log(q / m) for q, m in zip(Q, M, strict=True)]),
    ),
    "tv": (1 - ALPHA, _through_softmax(TV_G)),
    "ce": (-math.log(0.3), [0.5, 0.3 - 1.0, 0.2]),  # argmax p is token 1
    "lk": (-math.log(ALPHA), [g / ALPHA for g in _through_softmax(TV_G)]),
    "lk-hybrid": (
        LAM * KL_PQ + (1 - LAM) * (1 - ALPHA),
        [
            LAM * (q - p) + (1 - LAM) * t
            for p, q, t in zip(P, Q, _through_softmax(TV_G), strict=True)
        ],
    ),
}


@pytest.mark.parametrize("name", LOSSES)
def test_each_loss_matches_the_hand_computation(name):
    value, grad = _value_and_grad(name)
    want_value, want_grad = HAND[name]
    assert value == pytest.approx(want_value, abs=1e-6)
    assert grad == pytest.approx(want_grad, abs=1e-6)


def test_the_divergences_vanish_where_the_laws_agree():
    for name in ("rkl", "jsd"):
        value, grad = _value_and_grad(name, q=P, p=P)
        assert value == pytest.approx(0.0, abs=1e-6) and grad == pytest.approx([0.0] * 3, abs=1e-6)
    for name in ("tv", "lk"):  # not differentiable where q = p: the value alone
        assert _value_and_grad(name, q=P, p=P)[0] == pytest.approx(0.0, abs=1e-6)


def test_a_top_k_teacher_is_read_as_its_ids_and_one_rest_bin():
    """V = 4, the teacher keeps ids 0 and 2 (0.5, 0.3) and leaves 0.2 elsewhere; the draft's
    law (0.1, 0.2, 0.3, 0.4) has 0.6 outside those ids. Bins: p = (0.5, 0.3, 0.2), q = (0.1,
    0.3, 0.6)."""
    q = [0.1, 0.2, 0.3, 0.4]
    kw = dict(ids=torch.tensor([[[0, 2]]]), rest=torch.tensor([[0.2]]))
    pb, qb = [0.5, 0.3, 0.2], [0.1, 0.3, 0.6]
    want = {
        "tv": 1 - (0.1 + 0.3 + 0.2),
        "rkl": sum(b * math.log(b / a) for a, b in zip(pb, qb, strict=True)),
        "kl": -sum(a * math.log(b) for a, b in zip(pb, qb, strict=True)),
        "ce": -math.log(0.1),  # the teacher's greedy token is id 0
    }
    for name, value in want.items():
        assert _value_and_grad(name, q=q, p=[0.5, 0.3], **kw)[0] == pytest.approx(value, abs=1e-6)


def _case(seed: int, b=2, t=7, v=11, k=None):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(b, t, v, generator=g)
    if k is None:
        return z, Teacher(torch.randn(b, t, v, generator=g).softmax(-1))
    ids = torch.stack([torch.randperm(v, generator=g)[:k] for _ in range(b * t)]).view(b, t, k)
    p = torch.rand(b, t, k, generator=g)
    p = p / p.sum(-1, keepdim=True) * 0.9
    return z, Teacher(p, ids, torch.full((b, t), 0.1))


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("k", [None, 4])
def test_chunks_give_the_whole_batch_values_and_gradients(monkeypatch, name, k):
    """Positions are independent; an elementwise kernel may round a last bit otherwise at a
    chunk's edge, so equal to float rounding."""
    z, t = _case(1, k=k)
    w = torch.rand(z.shape[:2], generator=torch.Generator().manual_seed(2))

    def run():
        x = z.clone().requires_grad_()
        out = position_losses(name, x, t)
        (out * w).sum().backward()
        return out.detach(), x.grad

    whole = run()
    monkeypatch.setattr(losses, "CHUNK_BYTES", 4 * z.shape[0] * z.shape[2] * 2)  # 2 positions
    assert len(losses._chunks(z)) == 4
    chunked = run()
    for a, b in zip(whole, chunked, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("k", [None, 4])
def test_kl_is_the_soft_cross_entropy_eagle3_trained_with_bitwise(k):
    """The EAGLE-3 loss before the loss choice: -(p * log_softmax(z)[ids]).sum(-1) with a
    renormalised teacher, written out here; `kl` must give its values and gradients."""
    z, t = _case(3, k=k)
    t = Teacher(t.p / t.p.sum(-1, keepdim=True), t.ids)  # renormalised: no rest
    w = torch.rand(z.shape[:2], generator=torch.Generator().manual_seed(4))
    a = z.clone().requires_grad_()
    logq = torch.log_softmax(a.float(), dim=-1)
    ref = -(t.p * (logq if k is None else logq.gather(-1, t.ids))).sum(-1)
    (ref * w).sum().backward()
    b = z.clone().requires_grad_()
    out = position_losses("kl", b, t)
    (out * w).sum().backward()
    assert torch.equal(out.detach(), ref.detach()) and torch.equal(a.grad, b.grad)


@pytest.mark.parametrize("name", LOSSES)
def test_the_forward_keeps_no_full_vocabulary_copy(name):
    """What autograd saves for the backward: the logits and the teacher, nothing of the size
    of a [B, T, Vd] log-softmax (the eager form saves one per call)."""
    z, t = _case(5, b=2, t=16, v=64, k=8)
    saved: list[int] = []

    def pack(x):
        saved.append(x.data_ptr() if x.numel() == z.numel() else 0)
        return x

    x = z.clone().requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        position_losses(name, x, t)
    big = [ptr for ptr in saved if ptr]
    assert big == [x.data_ptr()], f"{len(big)} vocabulary-sized tensors kept, expected the logits"
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        saved.clear()
        torch.log_softmax(x, -1).sum()
    assert [ptr for ptr in saved if ptr], "the check sees what the eager form keeps"


def test_an_unknown_loss_names_the_choices():
    with pytest.raises(Eagle3Error, match="--loss: expected one of kl, rkl, jsd, tv, ce, lk"):
        position_losses("mse", *_case(6)[:1], _case(6)[1])
