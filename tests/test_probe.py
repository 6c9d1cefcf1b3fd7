"""Probe: similarity metrics against hand-computed values, then the probe on zoo tiny members."""

from __future__ import annotations

import math

import pytest
import torch

from eagle3kit import similarity as sim
from eagle3kit.errors import Eagle3Error

# ---------------------------------------------------------------- similarity, by hand


def test_cosine_hand_values():
    a = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    b = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    c = sim.cosine_per_token(a, b)
    assert c.tolist() == pytest.approx([1.0, 1 / math.sqrt(2)])
    mean, p10 = sim.cosine_stats(a, b)
    assert mean == pytest.approx((1 + 1 / math.sqrt(2)) / 2)
    # two values, linear interpolation at q = 0.1: lo + 0.1 * (hi - lo)
    assert p10 == pytest.approx(1 / math.sqrt(2) + 0.1 * (1 - 1 / math.sqrt(2)))


def test_cka_hand_value_both_forms():
    # A = a - mean = [-1, 0, 1]; B = b - mean = [2/3, -1/3, -1/3]
    # |B^T A|^2 = 1, |A^T A| = 2, |B^T B| = 2/3  ->  CKA = 1 / (2 * 2/3) = 3/4
    a = torch.tensor([[1.0], [2.0], [3.0]])
    b = torch.tensor([[1.0], [0.0], [0.0]])
    assert sim.linear_cka(a, b) == pytest.approx(0.75)
    # zero columns change nothing, and push D past N: the Gram (N x N) form is used
    pad = torch.zeros(3, 4)
    assert sim.linear_cka(torch.cat([a, pad], 1), torch.cat([b, pad], 1)) == pytest.approx(0.75)


def test_cka_invariances():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 8, generator=g)
    q, _ = torch.linalg.qr(torch.randn(8, 8, generator=g))  # orthogonal
    assert sim.linear_cka(x, x) == pytest.approx(1.0)
    assert sim.linear_cka(x, x @ q) == pytest.approx(1.0)
    assert sim.linear_cka(x, 3.0 * x) == pytest.approx(1.0)
    assert sim.linear_cka(x, x + 5.0) == pytest.approx(1.0)  # centring
    y = torch.randn(50, 8, generator=g)
    assert sim.linear_cka(x, y) < 0.5  # independent noise
    # both forms agree on a random pair (N < D uses the Gram form)
    xs, ys = x[:6].double(), y[:6].double()
    A, B = xs - xs.mean(0), ys - ys.mean(0)
    feat = float((B.T @ A).pow(2).sum() / ((A.T @ A).norm() * (B.T @ B).norm()))
    assert sim.linear_cka(xs, ys) == pytest.approx(feat, rel=1e-9)


def test_norm_ratio_and_compare():
    a = torch.tensor([[3.0, 4.0], [0.0, 1.0]])  # norms 5, 1: mean 3
    b = torch.tensor([[6.0, 8.0], [0.0, 0.0]])  # norms 10, 0: mean 5
    assert sim.norm_ratio(a, b) == pytest.approx(5 / 3)
    rows = sim.aux_similarity(torch.cat([a, a], 1), torch.cat([a, b], 1), [2, 5])
    assert [r["layer"] for r in rows] == [2, 5]
    assert rows[0] == {
        "layer": 2,
        "cosine_mean": 1.0,
        "cosine_p10": 1.0,
        "cka": 1.0,
        "norm_ratio": 1.0,
    }
    assert rows[1]["norm_ratio"] == pytest.approx(5 / 3, abs=1e-6)


def test_similarity_bad_input():
    with pytest.raises(Eagle3Error, match="same tokens"):
        sim.compare(torch.zeros(3, 2), torch.zeros(4, 2))
    with pytest.raises(Eagle3Error, match="constant"):
        sim.linear_cka(torch.ones(3, 2), torch.randn(3, 2))
