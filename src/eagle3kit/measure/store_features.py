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
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import bad

if TYPE_CHECKING:
    from eagle3kit.model.drafter import Eagle3Drafter


def open_store(path: str | Path) -> Any:
    from eagle3kit.data.store import FeatureStore

    return FeatureStore(path)


def store_layers(store: Any) -> list[int]:
    return store.layers


def target_num_layers(store: Any) -> int:
    return int((store.manifest.get("target") or {}).get("num_layers") or 0)


def check_vocab(store: Any, drafter: Eagle3Drafter, where: str) -> None:
    """The store's teacher columns must be the drafter's draft vocab (same d2t)."""
    from eagle3kit.train.sources import store_vocab

    d2t, _ = store_vocab(store, where)
    if not torch.equal(d2t.cpu(), drafter.d2t.cpu().long()):
        raise bad(
            where,
            f"vocab: the store's teacher covers a draft vocab of {d2t.numel()} ids other than "
            f"the drafter's {drafter.d2t.numel()}; capture with the drafter's vocab (--vocab)",
        )


def held_rows(
    store: Any, heldout: float | int | None = None, n: int | None = None
) -> tuple[list[int], dict[str, Any]]:
    """(rows, how): the samples scored and how they were chosen. ``heldout`` None: the whole
    store when it was captured from held-out data (its manifest says so), else DATA's held-out
    split, 5% by sample id (the one training leaves out); a fraction or a count: that split of
    the store (1.0 or every sample: the whole store). ``n`` keeps the first n of them."""
    from eagle3kit.data.prepared import split_ids

    total = len(store)
    whole = (
        (heldout is None and store.heldout_data)
        or (isinstance(heldout, float) and heldout == 1.0)
        or (isinstance(heldout, int) and heldout == total)
    )
    if whole or total == 1:
        rows = list(range(total))
        rule = "the whole store" + (
            " (captured from held-out data)" if heldout is None and store.heldout_data else ""
        )
    else:
        amount = 0.05 if heldout is None else heldout
        if isinstance(amount, int) and amount > total:
            raise bad("--heldout", f"expected at most the store's {total} samples, found {amount}")
        rows = split_ids(store.ids, amount, 0)[1]
        size = f"{amount:g} of the store" if isinstance(amount, float) else f"{amount} samples"
        rule = f"held-out split by sample id, {size}" + (
            " (DATA's default split, the one training leaves out)" if heldout is None else ""
        )
    if n is not None:
        rows = rows[:n]
    how = {"rule": rule, "heldout": heldout, "samples": len(rows), "store_samples": total}
    return rows, how


def features(
    store: Any,
    rows: list[int],
    layers: list[int],
    drafter: Eagle3Drafter,
    where: str,
    *,
    max_len: int | None = None,
    chunk: int = 8,
) -> list[Any]:
    """Feature batches of ``rows``: aux at ``layers`` only (by h-index; a layer the store lacks
    is refused naming the store), cut at ``max_len``, on the drafter's device and dtype."""
    store.slots(layers)  # refuse before reading any shard
    dev, dt = drafter.fc.weight.device, drafter.fc.weight.dtype
    out = []
    for s in range(0, len(rows), chunk):
        f = store.get(rows[s : s + chunk], layers)  # [B, T, k*H] aux
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
    from eagle3kit.model.loading import load_drafter

    ld = load_drafter(path, device=device, dtype=dtype)  # its method's model part builds it
    d, spec, layout = ld.drafter, ld.spec, ld.layout
    own = bool(d.embed_loaded)
    if not own:
        set_target_embedding(d, spec, target, store)
    return d.eval().requires_grad_(False), spec, layout, own


def set_target_embedding(d: Any, spec: Any, target: str | None, store: Any) -> None:
    """Give the drafter ``target``'s input embedding (default: the store's target), by header."""
    from eagle3kit.checkpoint.eagle3.convert import target_embedding

    src = target or (store.manifest.get("target") or {}).get("name_or_path")
    if not src:
        raise bad("--target", "the drafter has no embed_tokens: expected the target for its own")
    w = d.fc.weight
    d.set_embedding(target_embedding(str(src), spec).to(w.device, w.dtype))


def drafter_layers(spec: Any, store: Any) -> list[int]:
    from eagle3kit.core.spec import default_aux_layers

    return list(spec.aux_layers or default_aux_layers(target_num_layers(store)))
