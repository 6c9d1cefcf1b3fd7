"""The draft vocabulary: build, check, save and summarise the d2t/t2d pair.

An EAGLE-3 drafter predicts over a draft vocabulary of N target ids (N = draft_vocab_size,
V = the target's vocab_size). Two index tensors describe it:

    used   = sorted ascending target ids in the draft vocab          # [N]
    d2t[i] = used[i] - i        (draft id i -> target id i + d2t[i])  # int64 [N]
    t2d[v] = v in used          (target id v -> is it in the vocab)   # bool  [V]

A valid pair has: d2t of an integer dtype; every target id i + d2t[i] in [0, V); no target id
named twice; t2d of length V marking exactly those ids. `build_vocab` picks the N most frequent
ids (ties broken by the lower id); `coverage` is the share of counted tokens that a top-N
vocab keeps, sum(top-N counts) / sum(counts), the ceiling on what a drafter can ever match.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from eagle3kit.core.atomic import save_safetensors
from eagle3kit.core.errors import Eagle3Error, bad

if TYPE_CHECKING:  # torch is imported where tensors are made: inspect/compat stay torch-free
    import torch


def _as_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _top_ids(counts: torch.Tensor, n: int) -> torch.Tensor:
    """The n ids with the largest counts, ties by lower id, in order of rank."""
    import torch

    # stable sort of -counts keeps equal counts in ascending id order
    return torch.argsort(-counts.long(), stable=True)[:n]  # [n]


def _check_counts(counts: Any, where: str) -> torch.Tensor:
    import torch

    counts = torch.as_tensor(counts)
    if counts.dim() != 1:
        raise bad(
            where, f"counts: expected a 1-D tensor [vocab_size], found shape {list(counts.shape)}"
        )
    if counts.dtype.is_floating_point or counts.dtype == torch.bool:
        raise bad(where, f"counts: expected an integer dtype, found {counts.dtype}")
    if counts.numel() and int(counts.min()) < 0:
        raise bad(where, f"counts: expected counts >= 0, found {int(counts.min())}")
    return counts.long()


def build_vocab(counts: torch.Tensor, draft_vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-N ids by count -> (d2t int64 [N], t2d bool [V]); see the module docstring."""
    import torch

    counts = _check_counts(counts, "build_vocab")
    v = counts.shape[0]
    if not 0 < draft_vocab_size <= v:
        raise bad(
            "build_vocab",
            f"draft_vocab_size: expected 1..{v} (vocab_size), found {draft_vocab_size}",
        )
    used = torch.sort(_top_ids(counts, draft_vocab_size)).values  # [N] ascending target ids
    d2t = used - torch.arange(draft_vocab_size, dtype=torch.long)  # [N]
    t2d = torch.zeros(v, dtype=torch.bool)  # [V]
    t2d[used] = True
    return d2t, t2d


def summarise_vocab(d2t: Any, vocab_size: int) -> dict[str, Any]:
    """Counts of what is wrong with a d2t (for inspect): length, target span, bad entries."""
    d = _as_numpy(d2t).reshape(-1)
    integer = d.dtype.kind in "iu"
    tgt = np.arange(d.shape[0], dtype=np.int64) + d.astype(np.int64)  # [N]
    return {
        "length": int(d.shape[0]),
        "dtype": str(d.dtype),
        "integer": integer,
        "target_min": int(tgt.min()) if len(tgt) else None,
        "target_max": int(tgt.max()) if len(tgt) else None,
        "negative": int((tgt < 0).sum()),
        "out_of_range": int(((tgt < 0) | (tgt >= vocab_size)).sum()),
        "duplicates": int(np.count_nonzero(np.diff(np.sort(tgt)) == 0)),  # sort: O(N log N)
    }


def vocab_problems(d2t: Any, t2d: Any | None, vocab_size: int) -> list[tuple[str, str]]:
    """Every problem of a d2t/t2d pair as (code, message naming the field); [] when valid.

    Codes: d2t-dtype, d2t-negative, d2t-range, d2t-duplicates, t2d-length, t2d-disagree.
    `t2d=None` checks d2t alone.
    """
    out: list[tuple[str, str]] = []
    s = summarise_vocab(d2t, vocab_size)
    if not s["integer"]:
        out.append(("d2t-dtype", f"d2t: expected an integer dtype (int64), found {s['dtype']}"))
        return out
    span = f"draft_id + d2t[draft_id] spans {s['target_min']}..{s['target_max']}"
    if s["negative"]:
        out.append(
            (
                "d2t-negative",
                f"d2t: expected target ids >= 0, found {s['negative']} negative ({span})",
            )
        )
    too_big = s["out_of_range"] - s["negative"]
    if too_big:
        out.append(
            (
                "d2t-range",
                f"d2t: expected target ids < {vocab_size} (vocab_size), found {too_big} beyond "
                f"({span})",
            )
        )
    if s["duplicates"]:
        out.append(
            (
                "d2t-duplicates",
                f"d2t: expected distinct target ids, found {s['duplicates']} draft ids mapping to "
                "a target id already taken",
            )
        )
    if t2d is not None:
        t = _as_numpy(t2d).reshape(-1)
        if t.shape[0] != vocab_size:
            out.append(
                (
                    "t2d-length",
                    f"t2d: expected {vocab_size} entries (vocab_size), found {t.shape[0]}",
                )
            )
        elif not s["out_of_range"]:
            d = _as_numpy(d2t).reshape(-1).astype(np.int64)
            tgt = np.sort(np.arange(d.shape[0], dtype=np.int64) + d)
            marked = np.flatnonzero(t.astype(bool))
            if not np.array_equal(tgt, marked):
                out.append(
                    (
                        "t2d-disagree",
                        f"t2d: expected exactly the {len(tgt)} target ids d2t names marked, found "
                        f"{len(marked)} marked, {len(np.setxor1d(tgt, marked))} differing",
                    )
                )
    return out


def derive_t2d(d2t: Any, vocab_size: int) -> Any:
    """t2d [V] bool marking the target ids d2t names: t2d[i + d2t[i]] = True.

    For a checkpoint that carries d2t but no t2d (engines never read t2d, so some writers
    leave it out); a trainer that left t2d all zero would count every position as out of the
    draft vocab. d2t is checked first (integer, in range, distinct). A torch tensor in gives
    a torch tensor on its device; anything else gives a numpy array."""
    problems = vocab_problems(d2t, None, vocab_size)
    if problems:
        raise bad("d2t", problems[0][1])
    if hasattr(d2t, "detach"):  # torch: stay on the tensor's device
        import torch

        d = d2t.reshape(-1).long()
        t2d = torch.zeros(vocab_size, dtype=torch.bool, device=d.device)
        t2d[torch.arange(d.shape[0], device=d.device) + d] = True
        return t2d
    d = np.asarray(d2t).reshape(-1).astype(np.int64)
    out = np.zeros(vocab_size, dtype=np.bool_)
    out[np.arange(d.shape[0], dtype=np.int64) + d] = True
    return out


def validate_vocab(d2t: Any, t2d: Any | None, vocab_size: int, where: str) -> None:
    """Raise Eagle3Error (`where: field: expected ..., found ...`) at the first problem."""
    problems = vocab_problems(d2t, t2d, vocab_size)
    if problems:
        raise bad(where, problems[0][1])


def save_vocab(path: str | Path, d2t: torch.Tensor, t2d: torch.Tensor) -> None:
    """Write {d2t int64 [N], t2d bool [V]} to a safetensors file, atomically."""
    import torch

    d2t = torch.as_tensor(d2t)
    t2d = torch.as_tensor(t2d)
    validate_vocab(d2t, t2d, t2d.shape[0], str(path))
    save_safetensors(path, {"d2t": d2t.to(torch.long), "t2d": t2d.to(torch.bool)})


def _header_keys(path: Path) -> set[str]:
    """The tensor names a safetensors file's header lists (8-byte length, then JSON); an
    unreadable header lists none."""
    import json
    import struct

    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 100_000_000:
                return set()
            head = json.loads(f.read(n))
    except (OSError, ValueError, struct.error):
        return set()
    return set(head) - {"__metadata__"} if isinstance(head, dict) else set()


def vocab_file(path: str | Path) -> Path:
    """The safetensors file a `--vocab` path names: a vocab file (`data vocab`), or a drafter
    checkpoint, whose own weights hold its d2t and t2d: its safetensors file, or its directory
    (the one `*.safetensors` in it that holds d2t and t2d). Eagle3Error when there is none."""
    p = Path(path)
    if not p.is_dir():
        return p
    files = sorted(p.glob("*.safetensors"))
    hits = [f for f in files if {"d2t", "t2d"} <= _header_keys(f)]
    if len(hits) == 1:
        return hits[0]
    found = f"{len(hits)} of them" if hits else f"none of {[f.name for f in files]}"
    raise bad(
        str(p),
        "--vocab: expected a vocab file or a drafter checkpoint with one *.safetensors holding "
        f"d2t and t2d, found {found}",
    )


def load_vocab(path: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Read and validate a vocab -> (d2t int64 [N], t2d bool [V]): a file written by
    `save_vocab`, or a drafter checkpoint (file or directory; `vocab_file`)."""
    import torch
    from safetensors import SafetensorError, safe_open

    path = vocab_file(path)
    if not path.is_file():
        raise bad(str(path), "expected a safetensors file with d2t and t2d, found no file")
    try:
        with safe_open(str(path), framework="pt") as f:
            keys = set(f.keys())
            missing = sorted({"d2t", "t2d"} - keys)
            if missing:
                raise bad(str(path), f"{missing[0]}: expected a tensor, found keys {sorted(keys)}")
            d2t, t2d = f.get_tensor("d2t"), f.get_tensor("t2d")
    except SafetensorError as e:
        raise bad(
            str(path), f"expected a safetensors file, found one the reader refuses ({e})"
        ) from e
    if t2d.dtype != torch.bool:
        raise bad(str(path), f"t2d: expected dtype bool, found {t2d.dtype}")
    validate_vocab(d2t, t2d, t2d.shape[0], str(path))
    return d2t.long(), t2d


def coverage(counts: torch.Tensor, sizes: list[int] | tuple[int, ...]) -> dict[int, float]:
    """{N: sum(top-N counts) / sum(counts)} for each N in sizes (0.0 when nothing was counted)."""
    import torch

    counts = _check_counts(counts, "coverage")
    total = int(counts.sum())
    ranked = torch.sort(counts, descending=True).values  # [V]
    cum = torch.cumsum(ranked, 0)  # [V]
    out: dict[int, float] = {}
    for n in sizes:
        if n < 0:
            raise bad("coverage", f"sizes: expected sizes >= 0, found {n}")
        kept = int(cum[min(n, len(cum)) - 1]) if n > 0 and len(cum) else 0
        out[int(n)] = kept / total if total else 0.0
    return out


__all__ = [
    "Eagle3Error",
    "build_vocab",
    "coverage",
    "derive_t2d",
    "load_vocab",
    "vocab_file",
    "save_vocab",
    "summarise_vocab",
    "validate_vocab",
    "vocab_problems",
]
