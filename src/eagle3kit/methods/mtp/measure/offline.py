"""Offline eval of an MTP head (``eval --method mtp``): the same JSON as an EAGLE-3 drafter's
(measure/evaluate.py), with ``"method": "mtp"``.

The head's K teacher-forced recursive steps run over each held-out sample
(methods/mtp/train/finetune.py
``unroll``); draft i at anchor t is accepted when steps 1..i all give the target's own greedy
tokens. ``per_position_acceptance`` / ``accept_len``: the cycles chain decoding would walk
through each answer (``tau_walk``); ``all_positions``: every answer position as a cycle start.
Online eval runs through measure/timing.py, which drafts with methods/mtp/decode.py for a head.
"""

from __future__ import annotations

from typing import Any

from eagle3kit.core.artifacts import few_sequences, stamp
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.plan.forecast import conditional


def evaluate_mtp_offline(target, head, data, depth: int = 3, *, batch_size: int = 8) -> dict:
    """``data``: an EvalData (its held-out ``samples``: (input_ids [T], loss_mask [T]))."""
    from eagle3kit.data.prepared import Sample
    from eagle3kit.methods.mtp.train.finetune import evaluate_head

    if depth < 1:
        raise Eagle3Error(f"depth: expected draft steps >= 1, found {depth}")
    samples = [Sample(str(i), ids, mask) for i, (ids, mask) in enumerate(data.samples)]
    longest = max((len(s.input_ids) for s in samples), default=0)
    r = evaluate_head(
        target,
        head,
        samples,
        list(range(len(samples))),
        k=depth,
        batch=batch_size,
        max_len=longest,
    )
    w = r["walk"]
    doc: dict[str, Any] = {
        "mode": "offline",
        "method": "mtp",
        "depth": depth,
        "tau_walk": w["tau_walk"],
        "tau_every_position": r["tau_every_position"],
        "per_position_acceptance": w["per_position_acceptance"],
        "conditional_acceptance": conditional(w["per_position_acceptance"]),
        "cycles": w["cycles"],
        "all_positions": {
            "tau_every_position": r["tau_every_position"],
            "per_position_acceptance": r["per_position_acceptance"],
            "conditional_acceptance": conditional(r["per_position_acceptance"]),
            "counted": r["anchors"],
        },
        "samples": len(samples),
        "skipped": len(getattr(data, "skipped", [])),
        "warnings": few_sequences(len(samples), "offline acceptance"),
    }
    return stamp(doc, "eval")
