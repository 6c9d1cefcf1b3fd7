"""The probe's stages for an EAGLE-3 drafter (the measure part of EAGLE-3, EAGLE 3.1 and
P-EAGLE asks for `probe_aux`; measure/probe.py loads and hands over the `Run`):

2. Which hidden states D was trained on, settled from data. A config's aux ids X mean h[X] to
   some writers and h[X+1] to others (docs/formats.md "Aux layer ids"); D's offline
   acceptance on NEW under each reading tells: the reading D was trained on is the one it
   predicts from. Reported with the margin and what each engine captures today.
3. Hidden-state similarity of OLD vs NEW at those layers on the same tokens, and on fc(aux).
4. D's zero-shot acceptance on NEW beside OLD: offline, teacher-forced, and online.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eagle3kit.core.errors import Eagle3Error
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
from eagle3kit.measure.probe_batches import Batch

if TYPE_CHECKING:
    from eagle3kit.core.spec import DraftSpec
    from eagle3kit.data.features import Features
    from eagle3kit.model.drafter import Eagle3Drafter
    from eagle3kit.model.protocols import Target
    from eagle3kit.model.target import TargetModel


def probe_aux(doc: dict[str, Any], run: Run) -> dict[str, Any]:
    """`probe`'s document for an EAGLE-3 drafter: the aux readings tried on NEW, then the
    figures against OLD, break-even and the verdict."""
    emit(run.progress, "probe", 1, STAGES, "stage", doing="aux readings")
    aux, new_feats = _aux_reading(run, run.drafter)
    against = _against_reference(run, aux["chosen"]["layers"], new_feats)
    return result(doc, aux, against, run)


def target_features(
    target: TargetModel, batch: Batch, drafter: Eagle3Drafter, chunk: int = 8
) -> list[Features]:
    from eagle3kit.data.features import compute_features

    out = []
    for s in range(0, batch.input_ids.shape[0], chunk):
        sl = slice(s, s + chunk)
        f = compute_features(
            target, batch.input_ids[sl], batch.attention_mask[sl], batch.loss_mask[sl], drafter.d2t
        )
        out.append(f.to(drafter.fc.weight.device, drafter.fc.weight.dtype))
    return out


def offline_acceptance(drafter: Eagle3Drafter, feats: list[Features], depth: int) -> dict[str, Any]:
    """Teacher-forced acceptance over feature batches (`train.acceptance`); probe's verdict
    and aux reading use its ``tau_every_position``."""
    from eagle3kit.train.acceptance import acceptance

    d = acceptance(drafter, feats, depth).rounded(6)
    out = {k: d[k] for k in ("acc", "cond_acc", "counted", "loss")}  # loss: CE to the target
    taus = {k: d[k] for k in ("tau_every_position", "tau_walk")}
    return {**out, **taus}


@dataclass(frozen=True)
class AuxIds:
    """A drafter's aux ids as `aux_candidates` reads them, without its spec (a `DraftSpec`
    offers the same two fields)."""

    aux_layers_raw: tuple[int, ...] | None  # as the file wrote them
    aux_layers: tuple[int, ...] | None  # h-indices, when the file says which reading


def aux_candidates(spec: DraftSpec | AuxIds, num_layers: int) -> list[dict[str, Any]]:
    """The readings of D's aux ids: h[X] (HF index) and h[X+1] (layer output), valid ones only.

    X are the ids as the file wrote them (``aux_layers_raw``); with none written, the engines'
    default (2, L//2, L-3) under both readings."""
    from eagle3kit.core.spec import default_aux_layers

    raw = spec.aux_layers_raw or spec.aux_layers or default_aux_layers(num_layers)
    out, seen = [], set()
    for name, shift, who in (
        ("h[X]", 0, "ids are HF hidden-state indices (speculators, original EAGLE, vLLM)"),
        ("h[X+1]", 1, "ids name decoder-layer outputs (SpecForge, ModelOpt, SGLang)"),
    ):
        layers = tuple(int(i) + shift for i in raw)
        if layers in seen or not all(0 <= i < num_layers for i in layers):
            continue
        seen.add(layers)
        out.append(
            {
                "reading": name,
                "layers": list(layers),
                "writers": who,
                "declared": spec.aux_layers is not None and tuple(spec.aux_layers) == layers,
            }
        )
    if not out:
        raise Eagle3Error(
            f"probe: aux ids {list(raw)} fit neither reading on a {num_layers}-layer target"
        )
    return out


def detect_aux(
    drafter: Eagle3Drafter, target: TargetModel, batch: Batch, spec: DraftSpec, depth: int
) -> dict[str, Any]:
    """D's offline acceptance on ``target`` under each reading; the winner and its margin."""
    cands = aux_candidates(spec, target.num_layers)
    acc, feats = {}, {}
    for c in cands:
        t = with_aux(target, c["layers"])
        try:
            feats[c["reading"]] = target_features(t, batch, drafter)
        finally:
            t.close()
        acc[c["reading"]] = offline_acceptance(drafter, feats[c["reading"]], depth)
    chosen = choose_reading(cands, acc)
    return {
        "candidates": cands,
        "acceptance": acc,
        "chosen": chosen,
        "target_features": feats[chosen["reading"]],
    }


def _fix_ids(engine: str, family: str, chosen: list[int], num_layers: int) -> list[int]:
    """File ids that make `engine` capture h[chosen]: every release when possible, else latest."""
    from eagle3kit.checkpoint.engines import rules as E

    where = "nested" if engine == "sglang" else "top"
    cands = [[i - 1 for i in chosen], chosen] if engine == "sglang" else [chosen]
    cands = [c for c in cands if min(c) >= 0]

    def ok(ids: list[int]) -> list[str]:
        return E.releases_capturing(engine, family, {where: tuple(ids)}, num_layers, chosen)

    n_bands = len(E.bands(engine))
    best = max(cands, key=lambda c: (len(ok(c)) == n_bands, bool(ok(c))))
    return best


def engine_capture(
    spec: DraftSpec, layout: str, target: Target, chosen: Sequence[int], src: str
) -> dict[str, Any]:
    """What each engine captures for D as written, whether that is ``chosen``, and the fix."""
    from eagle3kit.checkpoint.compat import captured_layers
    from eagle3kit.checkpoint.engines import rules as E

    chosen = list(chosen)
    family = E.target_family(target.config.to_dict())
    declared_ok = spec.aux_layers is not None and list(spec.aux_layers) == chosen
    out: dict[str, Any] = {}
    for eng, key in (
        ("sglang", "eagle_config.eagle_aux_hidden_state_layer_ids"),
        ("vllm", "eagle_aux_hidden_state_layer_ids (top level)"),
    ):
        cap, why = captured_layers(eng, spec, layout, target.num_layers, family=family)
        fix = None
        if cap != chosen:
            ids = _fix_ids(eng, family, chosen, target.num_layers)
            where = "nested" if eng == "sglang" else "top"
            serves = E.releases_capturing(
                eng, family, {where: tuple(ids)}, target.num_layers, chosen
            )
            fix = f"set {key} to {ids} in config.json (captured right by {', '.join(serves)})"
            if declared_ok:
                fix = f"eagle3kit convert {src} --to {eng} -o OUT  (or {fix})"
        out[eng] = {"captures": cap, "why": why, "ok": cap == chosen, "fix": fix}
    if family == "deepseek":
        out["sglang"]["versions"] = (
            "DeepSeek/Kimi targets: SGLang < 0.5.13 captures h[id + 1]; >= 0.5.13 (PR #25454) "
            "h[id + 1] only when the first id is 1, else h[id]"
        )
    return out


def on_target(drafter: Eagle3Drafter, target: TargetModel, own_embed: bool) -> Eagle3Drafter:
    """Engines feed the drafter the serving target's embedding unless it carries its own."""
    if not own_embed:
        drafter.set_embedding(target.embed_tokens.weight)
    return drafter


def _online(run: Run, target: TargetModel, layers: Sequence[int]) -> dict[str, Any] | None:
    """Real chain decoding on ``target`` capturing ``layers`` (`online_tau`)."""
    t = with_aux(target, layers)
    d = on_target(run.loaded.drafter, t, run.own_embed)
    try:
        return online_tau(d, t, run.batch, run.depth, run.online_prompts, run.online_tokens)
    finally:
        t.close()


def _against_reference(run: Run, layers: Sequence[int], new_feats: list[Features]) -> Against:
    """Similarity OLD vs NEW, D's offline acceptance on OLD, and online decoding on both.
    ``new_feats``: NEW's features of the batch at ``layers`` (from detect_aux)."""
    d, new, ref = run.loaded.drafter, run.loaded.target, run.loaded.reference
    emit(run.progress, "probe", 2, STAGES, "stage", doing="similarity")
    out = Against([], None, None, {})
    if ref is not None:
        tref = with_aux(ref, layers)
        try:
            ref_feats = target_features(tref, run.batch, d)
        finally:
            tref.close()
        out.similarity, out.fc_similarity = hidden_similarity(ref_feats, new_feats, d, layers)
        emit(run.progress, "probe", 3, STAGES, "stage", doing="reference acceptance")
        out.acceptance = offline_acceptance(on_target(d, ref, run.own_embed), ref_feats, run.depth)
    emit(run.progress, "probe", 4, STAGES, "stage", doing="online decoding")
    out.online = {"target": _online(run, new, layers)}
    if ref is not None:
        out.online["reference"] = _online(run, ref, layers)
    return out


def _aux_reading(run: Run, drafter: str) -> tuple[dict[str, Any], list[Features]]:
    """The aux readings tried on NEW, the engines' capture of the chosen one, and its features."""
    ld, new = run.loaded, run.loaded.target
    aux = detect_aux(on_target(ld.drafter, new, run.own_embed), new, run.batch, ld.spec, run.depth)
    aux["engines"] = engine_capture(ld.spec, ld.layout, new, aux["chosen"]["layers"], drafter)
    new_feats = aux.pop("target_features")  # the chosen reading's features, for the similarity
    return aux, new_feats
