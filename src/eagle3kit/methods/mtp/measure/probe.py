"""`probe --method mtp`: does an MTP head made for OLD serve NEW (K2 -> K2.5)?

The head H: OLD's own MTP layer (``load_mtp_head``), or a head dir (``--drafter``, from
``train --method mtp``). Served on NEW, H reads NEW's final-normed hidden state h_t and NEW's
token embedding (methods/mtp/model.py: the embedding, rotary and lm_head are the serving target's),
so:
- compat: H's tensors must have NEW's shapes (hidden size, vocabulary), refused in one line
  otherwise; and how each engine serves an MTP head (plan/methods.py launch lines);
- similarity of OLD vs NEW on what H reads: the final-normed hidden state (FinalNormTap) and
  the token embedding, on the probe's batch (real tokens);
- H's offline acceptance on NEW and on OLD (`evaluate_mtp_offline`, its all-positions
  per-position acceptance and `tau_every_position`, as `probe` reports for EAGLE-3);
- online chain decoding (`mtp_generate`) on both, `online_tau`'s figures;
- the same verdict rules (`decide`), the final hidden state's cosine in the place of fc(aux).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import bad
from eagle3kit.core.progress import emit
from eagle3kit.measure.probe import (
    STAGES,
    Against,
    Loaded,
    Request,
    Run,
    batch_of,
    data_figures,
    online_tau,
    result,
)
from eagle3kit.measure.probe_batches import acceptance_summary, batch_samples
from eagle3kit.methods.mtp.checkpoint.layout import METHOD

if TYPE_CHECKING:
    from eagle3kit.methods.mtp.model import MTPHead
    from eagle3kit.model.target import TargetModel


def _check_shapes(new: TargetModel, ref: TargetModel, target: str) -> None:
    """H (built on OLD's shapes) must fit NEW: one line naming the field, expected vs found."""
    for field, want, got in (
        ("hidden_size", ref.hidden_size, new.hidden_size),
        ("vocab_size", ref.vocab_size, new.vocab_size),
    ):
        if want != got:
            raise bad(
                f"--target {target}",
                f"{field}: expected {want} (the MTP head's, from the reference), found {got}",
            )


def load_heads(
    new_loader: Any, ref: TargetModel | None, target: str, head: str | None
) -> tuple[TargetModel, MTPHead, MTPHead | None]:
    """NEW (``new_loader()``, called once H on OLD is loaded: a refused head costs no load of
    NEW) and H on NEW and on OLD: the same tensors (``head``, else OLD's own MTP layer), each
    sharing its target's embedding, rotary and lm_head."""
    from eagle3kit.methods.mtp.model import load_mtp_head

    if ref is None:
        new = new_loader()
        return new, load_mtp_head(new, head), None
    on_ref = load_mtp_head(ref, head)  # refused when OLD ships no head and no --drafter
    new = new_loader()
    _check_shapes(new, ref, target)
    return new, load_mtp_head(new, head or ref.name_or_path), on_ref


def final_hidden(target: TargetModel, batch: Any) -> torch.Tensor:
    """[N, H]: the final-normed hidden states of the batch's real tokens."""
    from eagle3kit.methods.mtp.model import FinalNormTap

    tap = FinalNormTap(target)
    dev = target.device
    try:
        with torch.no_grad():
            target.model(
                input_ids=batch.input_ids.to(dev), attention_mask=batch.attention_mask.to(dev)
            )
        h = tap.take()
    finally:
        tap.close()
    return h[batch.attention_mask.bool().to(h.device)].float().cpu()


def similarity(
    new: TargetModel, ref: TargetModel, batch: Any
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Rows OLD vs NEW (`compare`) on the final hidden state and the embedding of the batch's
    real tokens; and the final hidden state's figures (the verdict's input)."""
    from eagle3kit.measure.similarity import compare

    fin = compare(final_hidden(ref, batch), final_hidden(new, batch))
    ids = batch.input_ids[batch.attention_mask.bool()]
    with torch.no_grad():
        e_old = ref.embed_tokens(ids.to(ref.device)).float().cpu()
        e_new = new.embed_tokens(ids.to(new.device)).float().cpu()
    rows = [{"layer": "final_norm", **fin}, {"layer": "embedding", **compare(e_old, e_new)}]
    return rows, fin


def head_acceptance(head: MTPHead, target: TargetModel, batch: Any, depth: int) -> dict:
    """H's offline acceptance on ``target`` over the batch, every answer position a start."""
    from eagle3kit.methods.mtp.measure.offline import evaluate_mtp_offline

    return acceptance_summary(evaluate_mtp_offline(target, head, batch_samples(batch), depth))


def compat_doc(new: TargetModel, head: str | None, target: str, depth: int) -> dict[str, Any]:
    """How each engine serves H on NEW (plan/methods.py launch lines), H's shapes checked."""
    from eagle3kit.core import registry

    notes = [
        "vLLM and SGLang read the MTP layer from the target's checkpoint: to serve this head "
        "on NEW, stitch it into NEW's checkpoint (convert; docs/mtp.md)",
    ]
    return {
        "verdict": "ok",
        "method": METHOD,
        "head": head or "the reference target's own MTP layer",
        "shapes": {"hidden_size": new.hidden_size, "vocab_size": new.vocab_size},
        "engines": registry.launch_lines(registry.target_head().name, depth, target, None),
        "notes": notes,
    }


def _online(head: MTPHead, target: TargetModel, run: Run) -> Any:
    args = (run.depth, run.online_prompts, run.online_tokens)
    return online_tau(head, target, run.batch, *args)  # decodes as the head's method does


def probe_head(req: Request) -> dict[str, Any]:
    """`probe --method mtp` (the part core/registry.py asks for): load NEW, OLD and the head
    on each (a refused head costs no load of NEW), then the stages (module docstring)."""
    from eagle3kit.measure.similarity import check_targets
    from eagle3kit.model.loading import load_target

    check_targets(req.target, req.reference)
    on = {"device": req.device, "dtype": req.dtype}
    ref = load_target(req.reference, **on) if req.reference else None
    new, *heads = load_heads(lambda: load_target(req.target, **on), ref, req.target, req.drafter)
    doc = {
        "drafter": req.drafter,
        "target": req.target,
        "reference": req.reference,
        "compat": compat_doc(new, req.drafter, req.target, req.depth),
        "depth": req.depth,
    }
    batch = batch_of(req, new)
    doc["data"] = data_figures(batch)
    loaded = Loaded(METHOD, None, tuple(heads), new, ref)
    run = Run(
        loaded,
        batch,
        req.depth,
        True,
        req.online_prompts,
        req.online_tokens,
        req.progress,
        req.speeds,
        req.drafter,
    )
    return _stages(doc, run)


def _stages(doc: dict[str, Any], run: Run) -> dict[str, Any]:
    """`probe`'s document for an MTP head (module docstring); ``run.loaded.drafter`` is
    (H on NEW, H on OLD or None)."""
    (head_new, head_ref), new, ref = run.loaded.drafter, run.loaded.target, run.loaded.reference
    batch, progress, depth = run.batch, run.progress, run.depth
    emit(progress, "probe", 1, STAGES, "stage", doing="acceptance on the target")
    acc_new = head_acceptance(head_new, new, batch, depth)
    sim, fin, acc_ref = [], None, None
    if ref is not None:
        emit(progress, "probe", 2, STAGES, "stage", doing="similarity")
        sim, fin = similarity(new, ref, batch)
        emit(progress, "probe", 3, STAGES, "stage", doing="reference acceptance")
        acc_ref = head_acceptance(head_ref, ref, batch, depth)
    emit(progress, "probe", 4, STAGES, "stage", doing="online decoding")
    online = {"target": _online(head_new, new, run)}
    if ref is not None:
        online["reference"] = _online(head_ref, ref, run)
    chosen = {"reading": "final_norm", "layers": [], "clear": True}
    aux = {"candidates": [], "acceptance": {"final_norm": acc_new}, "chosen": chosen}
    out = result({**doc, "method": METHOD}, aux, Against(sim, fin, acc_ref, online), run)
    out["aux"] = None  # an MTP head reads no aux layers: its input is the final hidden state
    out["final_similarity"], out["fc_similarity"] = out["fc_similarity"], None
    out["reasons"] = [
        r.replace("fc(aux) cosine", "final hidden state cosine") for r in out["reasons"]
    ]
    return out
