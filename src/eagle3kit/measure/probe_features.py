"""`probe --features-new STORE --features-old STORE`: the Phase 0 probe without either target.

The same questions and the same rules as `eagle3kit.measure.probe` (module doc there), with
every target forward replaced by a feature store of the same DATA (`eagle3kit.data.store`,
written in-process or by `data capture --engine vllm` for targets no process of ours loads):

- the samples are DATA's held-out split, the first ``samples`` of them cut at ``max_len``, as
  `probe_batches.data_batch` picks them (sequences under 4 tokens dropped);
- the aux reading is settled from data among the readings whose layers the NEW store holds
  (capture both, h[X] and h[X+1], with ``data capture --extra-layers``); a reading the store
  lacks is reported as not tested;
- similarity OLD vs NEW compares the two stores' states at the chosen layers, token by token
  (both stores must hold the same tokens);
- offline tau comes from each store's target argmax; there is no online decoding (no target);
- the drafter gets each target's input embedding, read by header, when it carries none.

Figures differ from the in-process probe only by the stores' rounding (fp8 aux, fp16 teacher).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle3kit.core.artifacts import few_sequences, stamp
from eagle3kit.core.errors import bad
from eagle3kit.core.progress import Progress, emit
from eagle3kit.measure import probe as P
from eagle3kit.measure import probe_aux as A
from eagle3kit.measure import store_features as S
from eagle3kit.measure import verdict as V
from eagle3kit.model.protocols import JsonConfig

if TYPE_CHECKING:
    from eagle3kit.model.drafter import Eagle3Drafter


def _rows(store: Any, n: int, max_len: int) -> tuple[list[int], dict[str, Any]]:
    """probe_batches.data_batch's choice: the first n held-out samples (the whole store when it
    holds held-out data, `store_features.held_rows`), those of >= 4 tokens once cut."""
    rows, how = S.held_rows(store, None, n)
    rows = [i for i in rows if min(store.length(i), max_len) >= 4]
    return rows, {**how, "samples": len(rows)}


def detect_aux_store(d: Any, spec: Any, store: Any, rows: list[int], depth: int, max_len: int):
    """D's offline acceptance under each reading the store holds; the winner, its features."""
    held = set(S.store_layers(store))
    cands = A.aux_candidates(spec, S.target_num_layers(store))
    acc, feats, untested = {}, {}, []
    for c in cands:
        if not set(c["layers"]) <= held:
            untested.append(c["reading"])
            continue
        f = S.features(store, rows, c["layers"], d, "--features-new", max_len=max_len)
        feats[c["reading"]] = f
        acc[c["reading"]] = A.offline_acceptance(d, f, depth)
    if not acc:
        raise bad(
            "--features-new",
            f"aux_layers: the store holds h{sorted(held)}, none of the readings "
            f"{[c['layers'] for c in cands]} of the drafter's ids",
        )
    chosen = P.choose_reading(cands, acc)
    aux = {"candidates": cands, "acceptance": acc, "chosen": chosen, "not_in_store": untested}
    return aux, feats[chosen["reading"]]


@dataclass(frozen=True)
class StoreTarget:
    """A store's record of its target (a `Target`, model/protocols.py): what
    `probe.engine_capture` reads of it, with no weight loaded."""

    config: JsonConfig
    vocab_size: int
    num_layers: int
    aux_layers: tuple[int, ...]


def store_target(store: Any, path: str | None) -> StoreTarget:
    """The target of ``store`` from its manifest, its config.json read from ``path`` (the
    target's directory) when there is one, else its model type alone."""
    tgt = store.manifest.get("target") or {}
    cfg: dict[str, Any] = {"model_type": tgt.get("model_type")}
    if path and (Path(path) / "config.json").is_file():
        cfg = json.loads((Path(path) / "config.json").read_text())
    return StoreTarget(
        JsonConfig(cfg),
        vocab_size=int(tgt.get("vocab_size") or 0),
        num_layers=int(tgt.get("num_layers") or 0),
        aux_layers=tuple(int(i) for i in store.layers),
    )


def _same_tokens(new: Any, old: Any, rows: list[int]) -> None:
    for i in rows:
        if new.ids[i] != old.ids[i] or not bool(
            (new.get([i]).input_ids == old.get([i]).input_ids).all()
        ):
            raise bad(
                "--features-old",
                f"sample {new.ids[i]}: expected the same tokens as --features-new (capture "
                "both stores from one DATA)",
            )


@dataclass
class StoreRun:
    """One probe from stores after opening them: what its last stages read."""

    drafter: Eagle3Drafter  # D, on NEW's embedding unless it carries its own
    spec: Any
    own: bool  # D carries its own input embedding
    new: Any  # NEW's store
    old: Any  # OLD's store, or None
    rows: list[int]
    depth: int
    max_len: int
    reference: str | None  # OLD's path (its embedding, read by header)
    speeds: tuple[float | None, float | None]
    progress: Progress | None


def _reference(run: StoreRun, layers: list[int]) -> tuple[list[Any], dict[str, Any]]:
    """OLD's features at ``layers`` and D's offline acceptance on OLD (OLD's embedding)."""
    d, old = run.drafter, run.old
    ref_feats = S.features(old, run.rows, layers, d, "--features-old", max_len=run.max_len)
    if not run.own:
        S.set_target_embedding(d, run.spec, run.reference, old)
    return ref_feats, A.offline_acceptance(d, ref_feats, run.depth)


def _target_path(store: Any, given: str | None) -> str | None:
    return given or (store.manifest.get("target") or {}).get("name_or_path")


def _compat(drafter: str, target: str | None) -> dict[str, Any] | None:
    """compat of D with NEW (headers only) when NEW's directory is at hand."""
    from eagle3kit.checkpoint.compat import compat

    if not target or not Path(target).exists():
        return {"verdict": "not checked (the target's directory is not at hand)"}
    return compat(drafter, target, "both").to_json()


def probe_features(
    drafter: str,
    features_new: str,
    features_old: str | None = None,
    *,
    target: str | None = None,
    reference: str | None = None,
    baseline_tps: float | None = None,
    cycle_ms: float | None = None,
    bench: str | None = None,
    depth: int = P.DEFAULT_DEPTH,
    samples: int = 16,
    max_len: int = 256,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The probe from feature stores (module doc); the `probe --json` document."""
    baseline_tps, cycle_ms = V.speed_inputs(bench, baseline_tps, cycle_ms)
    emit(progress, "probe", 0, 4, "stage", doing="compat")
    new = S.open_store(features_new)
    old = S.open_store(features_old) if features_old else None
    tpath, rpath = _target_path(new, target), old and _target_path(old, reference)
    d, spec, layout, own = S.drafter_for(drafter, tpath, new)
    S.check_vocab(new, d, features_new)
    doc: dict[str, Any] = {
        "drafter": drafter,
        "target": tpath,
        "reference": rpath,
        "features": {"new": features_new, "old": features_old},
        "compat": _compat(drafter, tpath),
        "depth": depth,
    }
    tgt = new.manifest.get("target") or {}
    if spec.target_hidden_size != tgt.get("hidden_size") or spec.vocab_size != tgt.get(
        "vocab_size"
    ):
        return P.not_runnable(doc)
    rows, how = _rows(new, samples, max_len)
    emit(progress, "probe", 1, 4, "stage", doing="aux readings")
    aux, new_feats = detect_aux_store(d, spec, new, rows, depth, max_len)
    layers = aux["chosen"]["layers"]
    aux["engines"] = A.engine_capture(spec, layout, store_target(new, tpath), layers, drafter)
    doc["data"] = {**_data_figures(features_new, rows, new_feats), "heldout": how}
    run = StoreRun(
        d, spec, own, new, old, rows, depth, max_len, rpath, (baseline_tps, cycle_ms), progress
    )
    return _finish(doc, run, aux, new_feats)


def _data_figures(features_new: str, rows: list[int], new_feats: list[Any]) -> dict[str, Any]:
    """The document's "data": NEW's held-out rows probed, their tokens and scored tokens."""
    return {
        "source": f"{features_new} (held-out samples)",
        "sequences": len(rows),
        "tokens": int(sum(int(f.attention_mask.sum()) for f in new_feats)),
        "scored": int(sum(int(f.loss_mask.sum()) for f in new_feats)),
    }


def _finish(doc: dict[str, Any], run: StoreRun, aux: dict[str, Any], new_feats: list[Any]):
    """Similarity and acceptance against OLD, break-even, verdict (as `probe.probe`)."""
    d, rows, depth, speeds, progress = run.drafter, run.rows, run.depth, run.speeds, run.progress
    layers = aux["chosen"]["layers"]
    acc_new = aux["acceptance"][aux["chosen"]["reading"]]
    sim, fc_sim, acc_ref = [], None, None
    if run.old is not None:
        emit(progress, "probe", 2, 4, "stage", doing="similarity")
        _same_tokens(run.new, run.old, rows)
        ref_feats, acc_ref = _reference(run, layers)
        sim, fc_sim = P.hidden_similarity(ref_feats, new_feats, d, layers)
    tau, tau_ref = acc_new["tau_every_position"], acc_ref["tau_every_position"] if acc_ref else None
    be = None
    if speeds[0] is not None:
        be = V.break_even(speeds[0], speeds[1], {"target": tau, "reference": tau_ref}, depth)
    verdict, reasons = V.decide(True, tau, tau_ref, fc_sim["cosine_mean"] if fc_sim else None, be)
    if not aux["chosen"]["clear"]:
        reasons.append(
            f"aux reading uncertain: margin {aux['chosen']['margin_tau_every_position']} < "
            f"{P.CLEAR_MARGIN} in tau_every_position; kept the config's reading"
        )
    if aux["not_in_store"]:
        reasons.append(f"readings not in the store, not tested: {aux['not_in_store']}")
    emit(progress, "probe", 4, 4, "stage", doing="done")
    doc = {
        **doc,
        "aux": aux,
        "similarity": sim,
        "fc_similarity": fc_sim,
        "acceptance": {"target": acc_new, "reference": acc_ref},
        "tau_every_position": {"target": tau, "reference": tau_ref},
        "tau_online": None,
        "break_even": be,
        "verdict": verdict,
        "reasons": reasons,
        "warnings": few_sequences(len(rows), "the verdict"),
    }
    return stamp(doc, "probe")
