"""`eagle3kit data vocab`: the draft vocabulary from the loss tokens of a DATA directory.

    counts[v]  = number of loss-masked tokens equal to v            # int64 [V]
    d2t, t2d   = model.vocab.build_vocab(counts, N)                # top-N, ties by lower id
    coverage_N = sum(top-N counts) / sum(counts)                   # the drafter's ceiling

Only loss tokens count: they are what the drafter predicts. The coverage table lists N and a
few other sizes (N/4, N/2, 2N, 4N and the usual 8192/16384/32000/65536, all <= V) so the user
can see what a larger or smaller draft vocab would keep.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from eagle3kit.core.artifacts import stamp
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.data.prepared import META, PreparedData, load_prepared

COMMON_SIZES = (8192, 16384, 32000, 65536)


def loss_token_counts(data: PreparedData, vocab_size: int) -> torch.Tensor:
    """How often each target id occurs as a loss token -> int64 [vocab_size]."""
    toks = data.all_input_ids[data.all_loss_mask].long()  # [N_loss]
    if toks.numel() and int(toks.max()) >= vocab_size:
        raise bad(
            str(data.path / META),
            f"token ids: expected < {vocab_size} (target vocab_size), found {int(toks.max())}",
        )
    return torch.bincount(toks, minlength=vocab_size)  # [V]


def coverage_sizes(n: int, vocab_size: int) -> list[int]:
    """N, N/4, N/2, 2N, 4N and the common sizes, each in 1..V, ascending."""
    cand = {n, n // 4, n // 2, 2 * n, 4 * n, *COMMON_SIZES}
    return sorted(s for s in cand if 1 <= s <= vocab_size)


def draft_vocab(
    data: str | Path, draft_vocab_size: int, out: str | Path, *, sizes: list[int] | None = None
) -> dict[str, Any]:
    """Build d2t/t2d from DATA's loss tokens, save them to `out`; returns the coverage table.

    -> {"draft_vocab_size", "coverage": {N: share}, "vocab_size", "loss_tokens", "out"}
    """
    from eagle3kit.core.vocab import build_vocab, coverage, save_vocab

    d = load_prepared(data)
    vocab_size = (d.meta.get("target") or {}).get("vocab_size")
    if not isinstance(vocab_size, int) or vocab_size < 1:
        raise bad(
            str(d.path / META), f"target.vocab_size: expected a positive int, found {vocab_size!r}"
        )
    if not 1 <= draft_vocab_size <= vocab_size:
        raise Eagle3Error(
            f"--draft-vocab-size: expected 1..{vocab_size} (the target's vocab_size), found "
            f"{draft_vocab_size}"
        )
    counts = loss_token_counts(d, vocab_size)  # [V]
    if int(counts.sum()) == 0:
        raise bad(str(d.path / META), "loss_tokens: expected some, found 0")
    d2t, t2d = build_vocab(counts, draft_vocab_size)
    save_vocab(out, d2t, t2d)
    table = coverage(
        counts, sizes if sizes is not None else coverage_sizes(draft_vocab_size, vocab_size)
    )
    doc = {
        "draft_vocab_size": draft_vocab_size,
        "coverage": table,
        "vocab_size": vocab_size,
        "loss_tokens": int(counts.sum()),
        "out": str(out),
    }
    return stamp(doc, "vocab")
