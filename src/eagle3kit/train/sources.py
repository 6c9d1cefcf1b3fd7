"""Where training batches come from: online (the target runs on each batch) or offline (a
feature store). Both hand out `eagle3kit.data.features.Features` for a list of sample indices,
so the loop has one path; online and offline batches of the same samples are the same tensors
up to the store's aux quantisation.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import bad

if TYPE_CHECKING:
    from eagle3kit.model.protocols import RunningTarget


class OnlineSource:
    """DATA dir + a target run here: `compute_features` per batch, nothing written to disk."""

    kind = "online"

    def __init__(
        self,
        data: Any,
        target: RunningTarget,
        d2t: torch.Tensor,
        *,
        max_len: int,
        topk: int | None = None,
    ) -> None:
        self.data, self.target, self.d2t, self.max_len, self.topk = data, target, d2t, max_len, topk

    def split(self, heldout: float | int, seed: int = 0) -> tuple[list[int], list[int]]:
        return self.data.split(heldout, seed)

    def batch(self, indices: list[int]) -> Any:
        from eagle3kit.data.features import compute_features
        from eagle3kit.data.prepared import Sample, collate

        samples = []
        for i in indices:
            s = self.data[i]
            samples.append(Sample(s.id, s.input_ids[: self.max_len], s.loss_mask[: self.max_len]))
        ids, attn, loss = collate(samples)  # [B, T] each
        return compute_features(self.target, ids, attn, loss, self.d2t, self.topk)


class OfflineSource:
    """A feature store written by `eagle3kit data capture`: `FeatureStore.get` per batch."""

    kind = "offline"

    def __init__(self, store: Any, *, max_len: int, layers: Any = None) -> None:
        """``layers``: the h-indices to hand out (the drafter's; a store may hold more)."""
        self.store, self.max_len = store, max_len
        self.layers = None if layers is None else [int(i) for i in layers]
        if self.layers is not None:
            store.slots(self.layers)  # a layer the store lacks: refused now, naming the store

    def split(self, heldout: float | int, seed: int = 0) -> tuple[list[int], list[int]]:
        return self.store.split(heldout, seed)

    def batch(self, indices: list[int]) -> Any:
        from dataclasses import fields, replace

        f = self.store.get(list(indices), self.layers)
        if f.input_ids.shape[1] <= self.max_len:
            return f
        return replace(f, **{x.name: getattr(f, x.name)[:, : self.max_len] for x in fields(f)})


def store_vocab(store: Any, where: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The (d2t, t2d) a feature store's teacher columns were taken with (its manifest's vocab)."""
    from eagle3kit.core.digest import sha256_file
    from eagle3kit.core.vocab import load_vocab

    man = store.manifest
    v = man.get("vocab") or {}
    size = int((man.get("target") or {}).get("vocab_size") or 0)
    if v.get("file") is None:  # captured over the full target vocab
        n = int(v.get("draft_vocab_size") or size)
        return torch.zeros(n, dtype=torch.long), torch.ones(n, dtype=torch.bool)
    p = Path(v["file"])
    if not p.is_file():
        raise bad(where, f"vocab.file: the manifest names {p}, which does not exist")
    if v.get("sha256") and sha256_file(p) != v["sha256"]:
        raise bad(str(p), "sha256: not the vocab file the store was captured with")
    d2t, t2d = load_vocab(p)
    return d2t.long(), t2d.bool()
