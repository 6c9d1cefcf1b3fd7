"""benchmarks/bench_features.py's stand-in layer has the statistics its docstring claims, and its
error measures are what they say."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_features import SyntheticLayers, aux_errors, merge_errors  # noqa: E402


def test_synthetic_layer_statistics():
    syn = SyntheticLayers(hidden=512, vocab_size=64, seed=3)
    x = syn.layer(2000, 0)  # [n, H]
    o = syn.outliers[0]
    ordinary = torch.ones(512, dtype=torch.bool)
    ordinary[o] = False
    typical = x[:, ordinary].abs().median()
    gain = x[:, o].abs().median(0).values / typical  # per outlier channel
    assert ((gain > 15) & (gain < 130)).all(), gain  # 20-100x, give or take the noise
    signs = torch.sign(x[:, o])
    assert (signs == signs[0]).float().mean() > 0.95  # a fixed sign per channel
    z = x[:, ordinary].flatten() / x[:, ordinary].std()
    assert float((z**4).mean()) > 6  # heavy tails: a Gaussian's kurtosis is 3
    rms = x[:, ordinary].pow(2).mean(-1).sqrt()  # [n] per token
    q = torch.quantile(rms, torch.tensor([0.1, 0.9]))
    assert float(q[1] / q[0]) > 2  # the per-token scale varies several-fold


def test_aux_errors_on_a_known_perturbation():
    exact = torch.ones(4, 6)
    exact[:, 2] = 50.0  # one outlier column
    got = exact.clone()
    got[:, 0] += 0.1  # ordinary error
    got[0, 2] += 5.0  # outlier error: 10%
    e = merge_errors([aux_errors(exact, got, torch.tensor([2]))])
    assert abs(e["mean_rel_err"] - (0.4 + 5.0) / (20 + 200)) < 1e-6
    assert abs(e["mean_rel_err_ordinary_channels"] - 0.4 / 20) < 1e-6
    assert abs(e["outlier_max_abs_err"] - 5.0) < 1e-6
    assert abs(e["outlier_max_rel_err"] - 0.1) < 1e-6
    assert e["outlier_max_abs_value"] == 50.0
