"""`probe` with a DFlash drafter D: can a block drafter trained for OLD serve NEW (K2 -> K2.5)?

The steps of `measure/probe.py`, with what differs for block drafters:
- readings of D's ids: z-lab's `target_layer_ids` z name layer outputs, h[z + 1] (what D was
  trained on when its file is right), or h[z], what an engine one layer off feeds it
  (docs/dflash.md "Layer ids"); D's offline acceptance on NEW under each tells which;
- acceptance: the block evaluation of `methods/dflash/measure/offline.py` (one pass per answer
position,
  a run r of leading drafts equal to the target's greedy tokens), on NEW and on OLD;
  `tau_every_position` (1 + sum P(r >= i)), as `probe` reports for EAGLE-3;
- similarity of OLD vs NEW at the chosen layers and on D's context projection
  hidden_norm(fc(aux)); online block decoding on both; the same verdict rules (`decide`).
D uses NEW's embedding and lm_head (OLD's for the reference) unless it carries its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.progress import emit
from eagle3kit.measure.probe import (
    STAGES,
    Against,
    Run,
    choose_reading,
    hidden_similarity,
    online_tau,
    result,
    with_aux,
)
from eagle3kit.measure.probe_batches import acceptance_summary, batch_samples

if TYPE_CHECKING:
    from eagle3kit.methods.dflash.model import DFlashDrafter
    from eagle3kit.model.target import TargetModel


def block_candidates(spec: Any, num_layers: int) -> list[dict[str, Any]]:
    """The readings of D's z-lab ids that fit the target: h[z+1] (declared) and h[z]."""
    out = []
    for name, layers, who, declared in (
        (
            "h[id+1]",
            spec.aux_layers,
            "ids name layer outputs (z-lab; speculators writes id+1)",
            True,
        ),
        (
            "h[id]",
            spec.target_layer_ids,
            "an engine one layer off (the stream entering layer id)",
            False,
        ),
    ):
        if all(0 <= i < num_layers for i in layers):
            out.append(
                {"reading": name, "layers": list(layers), "writers": who, "declared": declared}
            )
    return out


def block_acceptance(
    d: DFlashDrafter, target: TargetModel, batch: Any, depth: int
) -> dict[str, Any]:
    from eagle3kit.methods.dflash.measure.offline import evaluate_offline_dflash

    return acceptance_summary(evaluate_offline_dflash(target, d, batch_samples(batch), depth))


def _feats(target: TargetModel, batch: Any, layers: list[int]) -> list[Any]:
    from eagle3kit.data.features import compute_features

    t = with_aux(target, layers)
    try:
        full = torch.zeros(t.vocab_size, dtype=torch.long)  # the whole vocabulary
        with torch.no_grad():
            return [
                compute_features(t, batch.input_ids, batch.attention_mask, batch.loss_mask, full)
            ]
    finally:
        t.close()


def _readings(d: Any, new: Any, batch: Any, depth: int) -> dict[str, Any]:
    cands = block_candidates(d.spec, new.num_layers)
    acc = {}
    for c in cands:
        t = with_aux(new, c["layers"])
        try:
            acc[c["reading"]] = block_acceptance(on_target(d, t), t, batch, depth)
        finally:
            t.close()
    return {"candidates": cands, "acceptance": acc, "chosen": choose_reading(cands, acc)}


def on_target(drafter: DFlashDrafter, target: TargetModel) -> DFlashDrafter:
    """A DFlash drafter without its own embedding/lm_head borrows the serving target's."""
    if not hasattr(drafter, "embed_tokens"):
        drafter.attach_target(target)
    return drafter


def _online(d: DFlashDrafter, target: TargetModel, layers: list[int], run: Run) -> Any:
    t = with_aux(target, layers)
    try:
        args = (run.online_prompts, run.online_tokens)
        return online_tau(on_target(d, t), t, run.batch, run.depth, *args)
    finally:
        t.close()


def probe(doc: dict[str, Any], run: Run) -> dict[str, Any]:
    """`probe`'s document for a DFlash drafter (module docstring; the part core/registry.py
    asks for): `doc` holds compat etc., `run` is measure/probe.py's (the loaded drafter and
    targets, the batch, depth, online sizes, speeds)."""
    d, new, ref = run.loaded.drafter, run.loaded.target, run.loaded.reference
    batch, progress = run.batch, run.progress
    depth = run.depth = min(run.depth, d.spec.num_proposals)
    aux = _readings(d, new, batch, depth)
    layers = aux["chosen"]["layers"]
    sim, fc_sim, acc_ref = [], None, None
    emit(progress, "probe", 2, STAGES, "stage", doing="similarity")
    if ref is not None:
        old_f, new_f = _feats(ref, batch, layers), _feats(new, batch, layers)
        sim, fc_sim = hidden_similarity(old_f, new_f, d, layers)
        emit(progress, "probe", 3, STAGES, "stage", doing="reference acceptance")
        t = with_aux(ref, layers)
        try:
            acc_ref = block_acceptance(on_target(d, t), t, batch, depth)
        finally:
            t.close()
    emit(progress, "probe", 4, STAGES, "stage", doing="online decoding")
    online = {"target": _online(d, new, layers, run)}
    if ref is not None:
        online["reference"] = _online(d, ref, layers, run)
    against = Against(sim, fc_sim, acc_ref, online)
    return result({**doc, "method": "dflash", "depth": depth}, aux, against, run)
