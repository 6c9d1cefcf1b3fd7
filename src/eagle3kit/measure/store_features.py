"""Features from a feature store instead of a loaded target: for `eval --features` and
`probe --features-new/--features-old`.

A store (`eagle3kit.data.store`; written in-process or by `data capture --engine vllm`) holds,
per token, the target's hidden states at its ``aux_layers`` (h-indices) and its teacher. Here
it is read for a drafter: the columns of the layers the drafter reads, in the drafter's order
(a store may hold more, e.g. both readings of a drafter's ids for the probe), the samples the
in-process paths would use (DATA's held-out split), cut at ``max_len`` (causal, so the same as
running the target on the cut sequence). Nothing of the target is loaded but, when the
drafter carries no embedding of its own, the target's input embedding (read by header).
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import torch

from eagle3kit.core.errors import bad


def open_store(path: str | Path) -> Any:
    from eagle3kit.data.store import FeatureStore

    return FeatureStore(path)


def store_layers(store: Any) -> list[int]:
    return [int(i) for i in store.manifest.get("aux_layers") or []]


def target_num_layers(store: Any) -> int:
    return int((store.manifest.get("target") or {}).get("num_layers") or 0)


def check_vocab(store: Any, drafter: Any, where: str) -> None:
    """The store's teacher columns must be the drafter's draft vocab (same d2t)."""
    from eagle3kit.train.sources import store_vocab

    d2t, _ = store_vocab(store, where)
    if not torch.equal(d2t.cpu(), drafter.d2t.cpu().long()):
        raise bad(
            where,
            f"vocab: the store's teacher covers a draft vocab of {d2t.numel()} ids other than "
            f"the drafter's {drafter.d2t.numel()}; capture with the drafter's vocab (--vocab)",
        )


def columns(store: Any, layers: list[int], where: str) -> list[int]:
    """Feature columns of ``layers`` in the store's aux [N, k*H]; missing layers are refused."""
    have = store_layers(store)
    H = int(store.manifest.get("hidden_size") or 0)
    missing = [i for i in layers if i not in have]
    if missing or H <= 0:
        raise bad(
            where,
            f"aux_layers: the store holds h{have}, the drafter reads h{list(layers)} "
            f"(missing h{missing}); capture them (data capture --aux-layers / --extra-layers)",
        )
    return [have.index(i) * H + j for i in layers for j in range(H)]


def held_rows(store: Any, heldout: float = 0.05, n: int | None = None) -> list[int]:
    """The held-out samples, as DATA's split picks them (all, when there is only one)."""
    _, held = store.split(heldout) if len(store) > 1 else ([], list(range(len(store))))
    if n is None:
        return list(held)
    return list(held)[:n] or list(range(min(n, len(store))))


def features(
    store: Any,
    rows: list[int],
    layers: list[int],
    drafter: Any,
    where: str,
    *,
    max_len: int | None = None,
    chunk: int = 8,
) -> list[Any]:
    """Feature batches of ``rows``: aux at ``layers`` only, cut at ``max_len``, on the drafter's
    device and dtype."""
    cols = torch.tensor(columns(store, layers, where))  # [k*H]
    dev, dt = drafter.fc.weight.device, drafter.fc.weight.dtype
    out = []
    for s in range(0, len(rows), chunk):
        f = store.get(rows[s : s + chunk])
        f = replace(f, aux=f.aux.index_select(-1, cols))  # [B, T, k*H]
        if max_len is not None and f.input_ids.shape[1] > max_len:
            f = replace(f, **{x.name: getattr(f, x.name)[:, :max_len] for x in fields(f)})
        out.append(f.to(dev, dt))
    return out


def drafter_for(
    path: str, target: str | None, store: Any, device: str = "cpu", dtype: Any = torch.float32
) -> tuple[Any, Any, str, bool]:
    """(Eagle3Drafter, spec, layout, own embedding?) on ``device``, with the target's input
    embedding read by header from ``target`` (default: the store's target) when the drafter
    carries none."""
    from eagle3kit.checkpoint.reader import read_drafter
    from eagle3kit.model.drafter import Eagle3Drafter

    spec, tensors, head = read_drafter(path)
    layout = head.layout
    d = Eagle3Drafter.from_tensors(spec, tensors, device=device, dtype=dtype, where=path)
    own = bool(d.embed_loaded)
    if not own:
        set_target_embedding(d, spec, target, store)
    return d.eval().requires_grad_(False), spec, layout, own


def set_target_embedding(d: Any, spec: Any, target: str | None, store: Any) -> None:
    """Give the drafter ``target``'s input embedding (default: the store's target), by header."""
    from eagle3kit.checkpoint.convert import target_embedding

    src = target or (store.manifest.get("target") or {}).get("name_or_path")
    if not src:
        raise bad("--target", "the drafter has no embed_tokens: expected the target for its own")
    w = d.fc.weight
    d.set_embedding(target_embedding(str(src), spec).to(w.device, w.dtype))


def drafter_layers(spec: Any, store: Any) -> list[int]:
    from eagle3kit.core.spec import default_aux_layers

    return list(spec.aux_layers or default_aux_layers(target_num_layers(store)))
