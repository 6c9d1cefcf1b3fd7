"""`probe` with a DFlash drafter D: can a block drafter trained for OLD serve NEW (K2 -> K2.5)?

The steps of `measure/probe.py`, with what differs for block drafters:
- readings of D's ids: z-lab's `target_layer_ids` z name layer outputs, h[z + 1] (what D was
  trained on when its file is right), or h[z], what an engine one layer off feeds it
  (docs/dflash.md "Layer ids"); D's offline acceptance on NEW under each tells which;
- acceptance: the block evaluation of `measure/block_eval.py` (one pass per answer position,
  a run r of leading drafts equal to the target's greedy tokens), on NEW and on OLD;
  `tau_every_position` (1 + sum P(r >= i)), as `probe` reports for EAGLE-3;
- similarity of OLD vs NEW at the chosen layers and on D's context projection
  hidden_norm(fc(aux)); online block decoding on both; the same verdict rules (`decide`).
D uses NEW's embedding and lm_head (OLD's for the reference) unless it carries its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.progress import emit

if TYPE_CHECKING:
    from eagle3kit.model.dflash import DFlashDrafter
    from eagle3kit.model.target import TargetModel

# `P` below is measure/probe.py itself, handed in by its `probe` (which dispatches here), so
# the two modules do not import each other: its stages, readings rule, similarity, online
# decoding and verdict are used as they are.


def block_candidates(spec: Any, num_layers: int) -> list[dict[str, Any]]:
    """The readings of D's z-lab ids that fit the target: h[z+1] (declared) and h[z]."""
    out = []
    for name, layers, who, declared in (
        ("h[id+1]", spec.aux_layers, "ids name layer outputs (z-lab; speculators writes id+1)",
         True),
        ("h[id]", spec.target_layer_ids, "an engine one layer off (the stream entering layer id)",
         False),
    ):  # fmt: skip
        if all(0 <= i < num_layers for i in layers):
            out.append({"reading": name, "layers": list(layers), "writers": who,
                        "declared": declared})  # fmt: skip
    return out


@dataclass
class _Samples:
    """A probe batch as the data `evaluate_offline_dflash` reads: (ids, loss mask) per row."""

    samples: list[tuple[torch.Tensor, torch.Tensor]]
    source: Any
    skipped: list[Any] = field(default_factory=list)


def _samples(batch: Any) -> _Samples:
    rows = []
    for b in range(batch.input_ids.shape[0]):
        n = int(batch.attention_mask[b].sum())
        rows.append((batch.input_ids[b, :n], batch.loss_mask[b, :n].long()))
    return _Samples(rows, batch.source)


def block_acceptance(
    d: DFlashDrafter, target: TargetModel, batch: Any, depth: int
) -> dict[str, Any]:
    from eagle3kit.measure.block_eval import evaluate_offline_dflash

    return acceptance_summary(evaluate_offline_dflash(target, d, _samples(batch), depth))


def acceptance_summary(r: dict[str, Any]) -> dict[str, Any]:
    """The probe's acceptance fields from an offline eval result (all answer positions)."""
    ap = r["all_positions"]
    return {
        "acc": ap["per_position_acceptance"],
        "cond_acc": ap["conditional_acceptance"],
        "counted": ap["counted"],
        "tau_every_position": r["tau_every_position"],
        "tau_walk": r["tau_walk"],
    }


def _feats(P: ModuleType, target: TargetModel, batch: Any, layers: list[int]) -> list[Any]:
    from eagle3kit.data.features import compute_features

    t = P._with_aux(target, layers)
    try:
        full = torch.zeros(t.vocab_size, dtype=torch.long)  # the whole vocabulary
        with torch.no_grad():
            return [compute_features(t, batch.input_ids, batch.attention_mask,
                                     batch.loss_mask, full)]  # fmt: skip
    finally:
        t.close()


def _readings(P: ModuleType, d: Any, new: Any, batch: Any, depth: int) -> dict[str, Any]:
    cands = block_candidates(d.spec, new.num_layers)
    acc = {}
    for c in cands:
        t = P._with_aux(new, c["layers"])
        try:
            acc[c["reading"]] = block_acceptance(P._on_block(d, t), t, batch, depth)
        finally:
            t.close()
    return {"candidates": cands, "acceptance": acc, "chosen": P.choose_reading(cands, acc)}


def _online(
    P: ModuleType,
    d: DFlashDrafter,
    target: TargetModel,
    layers: list[int],
    batch: Any,
    depth: int,
    args,
) -> Any:
    t = P._with_aux(target, layers)
    try:
        return P.online_tau(P._on_block(d, t), t, batch, depth, *args)
    finally:
        t.close()


def probe_block(
    P: ModuleType, doc: dict[str, Any], run: Any, speeds: tuple[float | None, float | None]
) -> dict[str, Any]:
    """`probe`'s document for a DFlash drafter (module docstring); `doc` holds compat etc.,
    `run` is probe's Run (the loaded drafter and targets, the batch, depth, online sizes)."""
    d, new, ref = run.loaded.drafter, run.loaded.target, run.loaded.reference
    batch, progress = run.batch, run.progress
    depth = run.depth = min(run.depth, d.spec.num_proposals)
    online_args = (run.online_prompts, run.online_tokens)
    aux = _readings(P, d, new, batch, depth)
    layers = aux["chosen"]["layers"]
    sim, fc_sim, acc_ref = [], None, None
    emit(progress, "probe", 2, P.STAGES, "stage", doing="similarity")
    if ref is not None:
        old_f, new_f = _feats(P, ref, batch, layers), _feats(P, new, batch, layers)
        sim, fc_sim = P.hidden_similarity(old_f, new_f, d, layers)
        emit(progress, "probe", 3, P.STAGES, "stage", doing="reference acceptance")
        t = P._with_aux(ref, layers)
        try:
            acc_ref = block_acceptance(P._on_block(d, t), t, batch, depth)
        finally:
            t.close()
    emit(progress, "probe", 4, P.STAGES, "stage", doing="online decoding")
    online = {"target": _online(P, d, new, layers, batch, depth, online_args)}
    if ref is not None:
        online["reference"] = _online(P, d, ref, layers, batch, depth, online_args)
    against = P.Against(sim, fc_sim, acc_ref, online)
    return P._result({**doc, "method": "dflash", "depth": depth}, aux, against, speeds, run)
