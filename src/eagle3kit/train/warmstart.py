"""The drafter a run starts from: fresh (sized for the target) or warm (any checkpoint).

Warm start keeps the checkpoint exactly: its weights, its attention kind, its aux layers and
its vocabulary map d2t/t2d. Rebuilding the map from new data would re-point every lm_head row
(row j would now score another token), so it is opt-in (`rebuild_vocab`), and then each row
moves with its token:

    new lm_head[j] = old lm_head[old_d2t^-1(u_j)]   when target id u_j was in the old vocab
                   = mean of the old rows            otherwise (a neutral start)

L2-SP (Li et al. 2018) adds (lambda/2) * ||w - w_0||^2 over the trainable weights, pulling
them toward the starting point w_0; its gradient lambda * (w - w_0) is added after backward.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from eagle3kit.core.errors import bad
from eagle3kit.model.drafter import Eagle3Drafter


def _set_vocab(m: Eagle3Drafter, d2t: torch.Tensor, t2d: torch.Tensor) -> None:
    with torch.no_grad():
        m.d2t.copy_(d2t)
        m.t2d.copy_(t2d)


def fresh_drafter(
    target_config: dict[str, Any],
    aux_layers: tuple[int, ...],
    d2t: torch.Tensor,
    t2d: torch.Tensor,
    *,
    attention: str = "mha",
    flags: dict[str, bool] | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> Eagle3Drafter:
    """A new drafter for the target: `spec_for_target` shapes, the norm `flags` (EAGLE 3.1:
    train/flags.py), seeded init, the given vocab."""
    from eagle3kit.core.spec import spec_for_target

    spec = spec_for_target(
        target_config,
        attention=attention,
        draft_vocab_size=int(d2t.numel()),
        aux_layers=tuple(aux_layers),
    ).replace(dtype="float32", **(flags or {}))
    torch.manual_seed(seed)
    m = Eagle3Drafter(spec, device=device, dtype=torch.float32)
    _set_vocab(m, d2t, t2d)
    return m


def check_against_target(spec: Any, vocab_size: int, hidden_size: int, where: str) -> None:
    """A warm-start checkpoint must fit the target's vocabulary and hidden size."""
    if spec.vocab_size != vocab_size:
        raise bad(where, f"vocab_size: expected the target's {vocab_size}, found {spec.vocab_size}")
    if spec.hidden_size != hidden_size:
        raise bad(
            where,
            f"hidden_size: expected the target's {hidden_size} (the drafter uses the target's "
            f"embedding), found {spec.hidden_size}",
        )


def warm_drafter(path: str, *, device: str = "cpu") -> Eagle3Drafter:
    """Any layout or hub id, as trained: float32 for training, nothing re-initialised.

    A checkpoint with d2t but no t2d (engines never read t2d, so some writers leave it out)
    loads with t2d all false: every position would count as outside the draft vocabulary and
    the loss would be 0. t2d is then derived from d2t (`t2d_derived` is set)."""
    from eagle3kit.model.loading import load_drafter

    m = load_drafter(path, device=device).drafter.train().requires_grad_(True)
    m.embed_tokens.weight.requires_grad_(False)  # the target's, frozen
    if m.spec.aux_layers is None:
        raise bad(str(path), "aux layers: the checkpoint does not say which target layers it reads")
    m.t2d_derived = not bool(m.t2d.any())
    if m.t2d_derived:
        with torch.no_grad():
            m.t2d.copy_(_derive_t2d(m.d2t, m.spec.vocab_size, str(path)))
    return m


def _derive_t2d(d2t: torch.Tensor, vocab_size: int, where: str) -> torch.Tensor:
    """t2d [V] bool with t2d[j + d2t[j]] = True for every draft id j.

    Private stand-in for `core.vocab.derive_t2d`, which another branch adds; switch to it
    once it is on main."""
    from eagle3kit.core.vocab import vocab_problems

    problems = vocab_problems(d2t.cpu(), None, vocab_size)
    if problems:
        raise bad(where, problems[0][1])
    d = d2t.reshape(-1).long()
    t2d = torch.zeros(vocab_size, dtype=torch.bool, device=d.device)
    t2d[torch.arange(d.shape[0], device=d.device) + d] = True
    return t2d


def rebuild_vocab(m: Eagle3Drafter, d2t: torch.Tensor, t2d: torch.Tensor) -> Eagle3Drafter:
    """A copy of `m` with vocab (d2t, t2d); lm_head rows follow their target ids."""
    old_ids = torch.arange(m.d2t.numel()) + m.d2t.cpu()  # [Vd_old] target ids
    new_ids = torch.arange(d2t.numel()) + d2t  # [Vd_new]
    row_of = {int(t): j for j, t in enumerate(old_ids)}
    old = m.lm_head.weight.detach().cpu()  # [Vd_old, H]
    new = old.mean(0, keepdim=True).repeat(d2t.numel(), 1)  # [Vd_new, H]
    kept = 0
    for j, t in enumerate(new_ids.tolist()):
        if t in row_of:
            new[j] = old[row_of[t]]
            kept += 1
    spec = m.spec.replace(draft_vocab_size=int(d2t.numel()))
    out = m.blank(spec)
    tensors = {k: v for k, v in m.canonical_state(with_embedding=True).items()}
    tensors.update({"lm_head.weight": new, "d2t": d2t, "t2d": t2d})
    out.load_canonical(tensors)
    out.embed_loaded = m.embed_loaded
    out.rows_kept = kept  # reported by the run
    return out


def anchor_of(m: torch.nn.Module) -> dict[str, torch.Tensor]:
    """w_0 for L2-SP: a detached copy of every trainable tensor (sharded like it)."""
    return {n: p.detach().clone() for n, p in m.named_parameters() if p.requires_grad}


def add_l2sp_grad(m: torch.nn.Module, anchor: dict[str, torch.Tensor], weight: float) -> None:
    """grad += weight * (w - w_0): the gradient of (weight/2) ||w - w_0||^2."""
    with torch.no_grad():
        for n, p in m.named_parameters():
            if p.requires_grad and p.grad is not None:
                p.grad.add_(p.detach() - anchor[n], alpha=weight)


def describe(path: str | Path, m: Eagle3Drafter) -> dict[str, Any]:
    out = {
        "path": str(path),
        "attention": getattr(m.spec, "attention", "mha"),
        "draft_vocab_size": m.spec.draft_vocab_size,
        "aux_layers": list(m.spec.aux_layers or ()),
    }
    if getattr(m, "t2d_derived", False):
        out["t2d"] = "derived from d2t (the checkpoint has none)"
    return out
