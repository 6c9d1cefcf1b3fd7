"""How alike are two targets' hidden states on the same tokens? (the Phase 0 probe's first half)

Rows are tokens, columns features: ``a`` [N, D] from the reference target (the one a drafter
was trained on), ``b`` [N, D'] from the new target, row t of both for the same token.

- cosine, per token: ``c_t = <a_t, b_t> / (|a_t| |b_t|)``; reported as the mean over tokens and
  the 10th percentile (``p10``: the bad tail a mean hides). Needs D = D'.
- linear CKA (Kornblith et al. 2019, "Similarity of neural network representations
  revisited"): with column-centred ``A = a - mean(a)``, ``B = b - mean(b)``,
  ``CKA = |B^T A|_F^2 / (|A^T A|_F |B^T B|_F)``, in [0, 1]; 1 for identical representations,
  invariant to orthogonal transforms and to isotropic scaling of either side (not to
  arbitrary linear maps), so it sees a rotated basis as the same information, cosine does not.
  Computed in the feature space (D x D') or, when N is smaller, through the N x N Gram
  matrices (``|B^T A|_F^2 = tr(A A^T B B^T)``), in float64.
- norm ratio: ``mean_t |b_t| / mean_t |a_t|``: > 1 when the new target's states are larger
  (a drafter's fc and norms were fitted to the old scale).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from eagle3kit.core.errors import Eagle3Error


def _config_hidden_size(model: str) -> int | None:
    """hidden_size from a local model dir's config.json (text_config for multimodal ones);
    None for a hub id or a config without it (then the loaded models are compared)."""
    cfg = Path(model).expanduser() / "config.json"
    try:
        doc = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    h = (doc.get("text_config") or {}).get("hidden_size", doc.get("hidden_size"))
    return h if isinstance(h, int) else None


def check_targets(
    target: str, reference: str | None, h_new: int | None = None, h_ref: int | None = None
) -> None:
    """The probe's similarity compares two targets' hidden states token by token: one width.

    Checked from the configs (before any weight is read) and again with the loaded models'
    sizes (``h_new``, ``h_ref``) for hub ids."""
    if reference is None:
        return
    h_new = h_new if h_new is not None else _config_hidden_size(target)
    h_ref = h_ref if h_ref is not None else _config_hidden_size(reference)
    if h_new is not None and h_ref is not None and h_new != h_ref:
        raise Eagle3Error(
            f"--reference-target {reference}: hidden size {h_ref}, but --target {target} has "
            f"{h_new}; the probe compares the two targets' hidden states, so they must match "
            "(a sibling of the same architecture)"
        )


def _check_rows(a: torch.Tensor, b: torch.Tensor, same_width: bool) -> None:
    if a.ndim != 2 or b.ndim != 2:
        raise Eagle3Error(
            f"similarity: expected [N, D] matrices, found {list(a.shape)} and {list(b.shape)}"
        )
    if a.shape[0] != b.shape[0]:
        raise Eagle3Error(
            "similarity: expected the same tokens (rows) on both sides, found "
            f"{a.shape[0]} and {b.shape[0]}"
        )
    if a.shape[0] < 2:
        raise Eagle3Error(f"similarity: expected at least 2 tokens, found {a.shape[0]}")
    if same_width and a.shape[1] != b.shape[1]:
        raise Eagle3Error(
            f"similarity: cosine needs equal widths, found {a.shape[1]} and {b.shape[1]}"
        )


def cosine_per_token(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``c_t = <a_t, b_t> / (|a_t| |b_t|)`` for rows of ``a``, ``b`` [N, D]: [N] (float64)."""
    _check_rows(a, b, same_width=True)
    a, b = a.double(), b.double()
    den = a.norm(dim=1) * b.norm(dim=1)  # [N]
    return (a * b).sum(dim=1) / den.clamp_min(1e-300)  # [N]


def cosine_stats(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(mean, 10th percentile) of the per-token cosine."""
    c = cosine_per_token(a, b)  # [N]
    return float(c.mean()), float(torch.quantile(c, 0.1))


def linear_cka(a: torch.Tensor, b: torch.Tensor) -> float:
    """Linear CKA of ``a`` [N, D] and ``b`` [N, D'] (see the module docstring)."""
    _check_rows(a, b, same_width=False)
    a, b = a.double(), b.double()
    A, B = a - a.mean(dim=0), b - b.mean(dim=0)  # [N, D], [N, D']
    n, d, e = A.shape[0], A.shape[1], B.shape[1]
    if n < max(d, e):  # Gram form: N x N
        ka, kb = A @ A.T, B @ B.T  # [N, N]
        num = (ka * kb).sum()
        den = ka.norm() * kb.norm()
    else:  # feature form: D x D'
        num = (B.T @ A).pow(2).sum()
        den = (A.T @ A).norm() * (B.T @ B).norm()
    if float(den) == 0.0:
        raise Eagle3Error("similarity: CKA is undefined when one side is constant over tokens")
    return float(num / den)


def norm_ratio(a: torch.Tensor, b: torch.Tensor) -> float:
    """``mean_t |b_t| / mean_t |a_t|``: the new target's scale relative to the reference's."""
    _check_rows(a, b, same_width=False)
    na = a.double().norm(dim=1).mean()
    if float(na) == 0.0:
        raise Eagle3Error("similarity: the reference hidden states are all zero")
    return float(b.double().norm(dim=1).mean() / na)


def compare(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """cosine_mean, cosine_p10, cka and norm_ratio of ``a`` (reference) vs ``b`` (new)."""
    a, b = a.double(), b.double()  # once: the metrics' own .double() then copy nothing
    mean, p10 = cosine_stats(a, b)
    return {
        "cosine_mean": round(mean, 6),
        "cosine_p10": round(p10, 6),
        "cka": round(linear_cka(a, b), 6),
        "norm_ratio": round(norm_ratio(a, b), 6),
    }


def aux_similarity(
    ref_aux: torch.Tensor, new_aux: torch.Tensor, layers: Sequence[int]
) -> list[dict[str, Any]]:
    """Per aux layer: ``ref_aux``, ``new_aux`` [N, k*H] hold k = len(layers) hidden states side
    by side (the TargetModel's ``aux`` order); one row of ``compare`` per layer."""
    k = len(layers)
    if ref_aux.shape != new_aux.shape or ref_aux.shape[-1] % k:
        raise Eagle3Error(
            f"similarity: expected two [N, {k}*H] aux matrices of one shape (targets of one "
            f"hidden size), found {list(ref_aux.shape)} and {list(new_aux.shape)}"
        )
    rows = []
    for layer, ra, na in zip(
        layers, ref_aux.chunk(k, dim=-1), new_aux.chunk(k, dim=-1), strict=True
    ):
        rows.append({"layer": int(layer), **compare(ra, na)})
    return rows
