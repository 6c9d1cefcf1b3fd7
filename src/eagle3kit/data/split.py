"""The held-out split by sample id (torch-free, so `train --dry-run` reads it from headers):
sample i goes to held-out when its rank under sha256(f"{seed}:{id}") is among the first
n_heldout, so the same ids give the same split in any order and in any store."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from eagle3kit.core.errors import Eagle3Error


def split_ids(
    ids: Sequence[str], heldout: float | int = 0.05, seed: int = 0
) -> tuple[list[int], list[int]]:
    """Deterministic split by id: held-out = the n ids with the smallest sha256(f"{seed}:{id}").

    `heldout` is a fraction in [0, 1) (n = round(fraction * len), at least 1 when the fraction
    is > 0 and there are 2+ samples) or a count (int >= 0, below len(ids)).
    """
    n_all = len(ids)
    if isinstance(heldout, bool) or not isinstance(heldout, int | float):
        raise Eagle3Error(f"heldout: expected a fraction or a count, found {heldout!r}")
    if isinstance(heldout, float):
        if not 0.0 <= heldout < 1.0:
            raise Eagle3Error(f"heldout: expected a fraction in [0, 1), found {heldout}")
        n = round(heldout * n_all)
        n = max(n, 1) if heldout > 0 and n_all >= 2 else n
    else:
        n = heldout
    if not (0 <= n < n_all or n == 0):
        raise Eagle3Error(f"heldout: expected a count in 0..{n_all - 1}, found {heldout}")
    keys = [hashlib.sha256(f"{seed}:{i}".encode()).digest() for i in ids]
    order = sorted(range(n_all), key=lambda j: (keys[j], j))
    held = sorted(order[:n])
    held_set = set(held)
    return [j for j in range(n_all) if j not in held_set], held
