"""EAGLE-3 / EAGLE 3.1 at the measure layer: the part core/registry.py asks for (offline eval,
also from a feature store; the probe's stages; the time of one drafter pass). Their offline
acceptance is the training-time-test metrics (train/acceptance.py) on features computed as
training computes them (data/features.py); P-EAGLE's part reuses these."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.progress import Progress, emit
from eagle3kit.measure import store_features as S
from eagle3kit.measure.costs import like, median_ms
from eagle3kit.measure.evaluate import EvalData, offline_batches, offline_doc
from eagle3kit.measure.probe_aux import probe_aux as probe

if TYPE_CHECKING:
    from eagle3kit.model.drafter import Eagle3Drafter
    from eagle3kit.model.target import TargetModel

__all__ = ["evaluate_by_length", "evaluate_offline", "evaluate_store", "pass_ms", "probe"]


def evaluate_offline(
    target: TargetModel,
    drafter: Eagle3Drafter,
    data: EvalData,
    depth: int = 3,
    *,
    batch_size: int = 8,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Walked and every-position acceptance on the held-out samples' features."""
    from eagle3kit.train.acceptance import acceptance

    if depth < 1:
        raise Eagle3Error(f"depth: expected draft steps >= 1, found {depth}")
    a = acceptance(drafter, offline_batches(target, drafter, data, batch_size, progress), depth)
    return offline_doc(a, drafter.method, len(data.samples), len(data.skipped))


def evaluate_by_length(
    target: TargetModel,
    drafter: Eagle3Drafter,
    data: EvalData,
    depth: int,
    lengths: tuple[int, ...],
    *,
    batch_size: int = 8,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """`evaluate_offline` with every position also counted in its context bucket
    (measure/by_length.py): one unrolled pass per batch, the buckets and the whole run."""
    from eagle3kit.measure import by_length as BL
    from eagle3kit.train.acceptance import from_counts
    from eagle3kit.train.ttt import Counts, counts_by_position

    if depth < 1:
        raise Eagle3Error(f"depth: expected draft steps >= 1, found {depth}")
    total = [Counts(depth) for _ in range(len(lengths) + 1)]
    was = drafter.training
    drafter.eval()
    try:
        for f in offline_batches(target, drafter, data, batch_size, progress):
            sets = BL.position_sets(f.loss_mask.cpu(), lengths)
            got = counts_by_position(drafter, f, depth, sets)
            total = [a + b for a, b in zip(total, got, strict=True)]
    finally:
        drafter.train(was)
    accs = [from_counts(c) for c in total]
    whole = offline_doc(accs[-1], drafter.method, len(data.samples), len(data.skipped))
    ranges = BL.bucket_ranges(lengths)
    entries = [BL.offline_entry(a, lo, hi) for a, (lo, hi) in zip(accs, ranges, strict=False)]
    return BL.by_length_doc(whole, entries, lengths)


def evaluate_store(
    drafter: str,
    features: str | Path,
    depth: int = 3,
    *,
    target: str | None = None,
    heldout: float | int | None = None,
    batch_size: int = 8,
    device: str = "cpu",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The same from a feature store (measure/evaluate.py `evaluate_store`): the target's
    hidden states and argmax from the store, the drafter's layers picked by h-index."""
    from eagle3kit.train.acceptance import acceptance

    store = S.open_store(features)
    d, spec, _, _ = S.drafter_for(drafter, target, store, device)
    S.check_vocab(store, d, str(features))
    rows, how = S.held_rows(store, heldout)
    layers = S.drafter_layers(spec, store)

    def batches():
        feats = S.features(store, rows, layers, d, str(features), chunk=batch_size)
        for i, f in enumerate(feats):
            yield f
            done = min((i + 1) * batch_size, len(rows))
            emit(progress, "offline eval", done, len(rows), "samples")

    a = acceptance(d, batches(), depth)
    extra = {"aux_layers": layers, "heldout": how}
    return offline_doc(a, d.method, len(rows), 0, source=str(features), **extra)


def pass_ms(target, drafter, ids: torch.Tensor, aux: torch.Tensor, repeats: int, sync) -> float:
    """One drafter step [c, 1] over its cache of the prompt (the chain's steps 2..k)."""
    from eagle3kit.model.attention import DraftCache

    cache = DraftCache()
    first = drafter(ids, like(drafter, aux), cache)  # the prompt into the drafter's cache
    p = cache.length
    h = first.hidden[:, -1:]  # [c, 1, H]
    tok = ids[:, -1:]

    def run() -> None:
        drafter(tok, h, cache, from_aux=False)
        cache.crop(p)

    return median_ms(run, repeats, sync)
