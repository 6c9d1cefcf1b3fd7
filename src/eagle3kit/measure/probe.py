"""`eagle3kit probe`: can a drafter trained for one target (OLD) serve a sibling (NEW)?

The user's "Phase 0": plug the K2 drafter into K2.5 and measure, before training anything.

1. compat of the drafter D with NEW (headers only, `eagle3kit.checkpoint.compat`).
2. Which hidden states D was trained on, settled from data. A config's aux ids X mean h[X] to
   some writers and h[X+1] to others (docs/formats.md "Aux layer ids"); D's offline
   acceptance on NEW under each reading tells: the reading D was trained on is the one it predicts
   from. Reported with the
   margin and what each engine captures today.
3. Hidden-state similarity of OLD vs NEW at those layers on the same tokens (per layer cosine
   mean and p10, linear CKA, norm ratio: `eagle3kit.measure.similarity`), and the same on
   fc(aux), the drafter's own view of them.
4. D's zero-shot acceptance on NEW beside OLD: offline, teacher-forced (`ttt_metrics` over
   `compute_features`: per-position acc_i, conditional acceptance p_i and
   tau = 1 + sum_{i=1..k} prod_{j<=i} p_j), and online when `eagle3kit.decode` is available.
5. A verdict, plug-in / fine-tune / from-scratch, with its reasons in numbers
   (measure/verdict.py `decide`), and the break-even comparison from `plan`'s cycle model
   when the speeds are known.

Token sequences come from a prepared data dir (`--data`, its held-out split) or, by default,
built-in conversations (measure/probe_batches.py); only assistant tokens are scored.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eagle3kit.core.artifacts import few_sequences, stamp
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.progress import Progress, emit
from eagle3kit.measure.probe_batches import Batch, builtin_batch, data_batch
from eagle3kit.measure.verdict import break_even, decide, speed_inputs

if TYPE_CHECKING:
    from eagle3kit.core.spec import DraftSpec
    from eagle3kit.data.features import Features
    from eagle3kit.model.dflash import DFlashDrafter
    from eagle3kit.model.drafter import Eagle3Drafter
    from eagle3kit.model.protocols import Target
    from eagle3kit.model.target import TargetModel

CLEAR_MARGIN = 0.05  # tau difference under which the aux reading is called uncertain
DEFAULT_DEPTH = 3
STAGES = 5  # progress: compat and loading, aux readings, similarity, reference, online


def _with_aux(target: TargetModel, layers: Sequence[int]) -> TargetModel:
    """A TargetModel over the same weights that captures ``layers`` instead."""
    from eagle3kit.model.target import TargetModel

    return TargetModel(
        target.model, target.tokenizer, aux_layers=tuple(layers), name_or_path=target.name_or_path
    )


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


def choose_reading(cands: list[dict[str, Any]], acc: dict[str, dict]) -> dict[str, Any]:
    """The reading D was trained on, from its acceptance under each measured one (``acc``):
    the data overrides the config's reading only by a clear margin (CLEAR_MARGIN in accept
    length); otherwise the declared reading stands, and with none declared the best by data."""
    tau = {r: a["tau_every_position"] for r, a in acc.items()}
    order = sorted(acc, key=lambda r: (tau[r], acc[r]["acc"][0]), reverse=True)
    margin = tau[order[0]] - tau[order[1]] if len(order) > 1 else None
    clear = margin is None or margin >= CLEAR_MARGIN
    declared = [c["reading"] for c in cands if c["declared"] and c["reading"] in acc]
    chosen = order[0] if clear or not declared else declared[0]
    return {
        "reading": chosen,
        "layers": next(c["layers"] for c in cands if c["reading"] == chosen),
        "best_by_data": order[0],
        "margin_tau_every_position": None if margin is None else round(margin, 6),
        "clear": clear,
    }


def detect_aux(
    drafter: Eagle3Drafter, target: TargetModel, batch: Batch, spec: DraftSpec, depth: int
) -> dict[str, Any]:
    """D's offline acceptance on ``target`` under each reading; the winner and its margin."""
    cands = aux_candidates(spec, target.num_layers)
    acc, feats = {}, {}
    for c in cands:
        t = _with_aux(target, c["layers"])
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


def hidden_similarity(
    ref_feats: list[Features],
    new_feats: list[Features],
    drafter: Eagle3Drafter,
    layers: Sequence[int],
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """OLD vs NEW at ``layers`` on the batch's real tokens, from each target's features of the
    same batch; and on fc(aux), D's view of them."""
    import torch

    from eagle3kit.measure.similarity import aux_similarity, compare

    def real(feats: list[Any]) -> torch.Tensor:  # [N, 3H]: the real tokens' aux rows
        return torch.cat([f.aux[f.attention_mask].float().cpu() for f in feats])

    a, b = real(ref_feats), real(new_feats)
    rows = aux_similarity(a, b, layers)
    dev, dt = drafter.fc.weight.device, drafter.fc.weight.dtype
    with torch.no_grad():
        fa = drafter.project_aux(a.to(dev, dt)).float().cpu()  # [N, H]
        fb = drafter.project_aux(b.to(dev, dt)).float().cpu()  # [N, H]
    return rows, compare(fa, fb)


def online_tau(
    drafter: Eagle3Drafter,
    target: TargetModel,
    batch: Batch,
    depth: int,
    n_prompts: int,
    max_new: int,
    *,
    generate: Any = None,
) -> dict[str, Any] | None:
    """Real chain decoding on the first ``n_prompts`` prompts (the tokens before the first
    assistant token): tau_online = emitted tokens / target verifies. None without
    `eagle3kit.decode`. ``generate``: the decoding function (default speculative_generate;
    probe_mtp.py passes mtp_generate)."""
    if n_prompts <= 0:
        return None
    try:
        from eagle3kit.decode import speculative_generate
    except ImportError:
        return None
    generate = generate or speculative_generate
    accepted = cycles = tokens = 0
    for b in range(min(n_prompts, batch.input_ids.shape[0])):
        lm = batch.loss_mask[b]
        start = int(lm.nonzero()[0]) if lm.any() else int(batch.attention_mask[b].sum())
        r = generate(
            target,
            drafter,
            batch.input_ids[b, :start].tolist(),
            max_new_tokens=max_new,
            depth=depth,
        )
        accepted += sum(c.accepted + 1 for c in r.stats.cycles)
        cycles += len(r.stats.cycles)
        tokens += r.stats.new_tokens
    tau = accepted / cycles if cycles else 1.0  # tokens emitted per target verify
    return {"tau_online": round(tau, 6), "tokens": tokens, "cycles": cycles}


# ---------------------------------------------------------------- the probe


@dataclass
class Loaded:
    """What the in-process probe loads: the drafter (its checkpoint read once) and both targets."""

    layout: str
    spec: DraftSpec
    drafter: Eagle3Drafter
    target: TargetModel  # NEW
    reference: TargetModel | None  # OLD


@dataclass
class Run:
    """One in-process probe after loading: what each stage reads."""

    loaded: Loaded
    batch: Batch
    depth: int
    own_embed: bool  # the drafter carries its own input embedding (engines then keep it)
    online_prompts: int
    online_tokens: int
    progress: Progress | None


@dataclass
class Against:
    """The figures against OLD: similarity to NEW, D's offline acceptance, online decoding."""

    similarity: list[dict[str, Any]]
    fc_similarity: dict[str, float] | None
    acceptance: dict[str, Any] | None  # D on OLD (None without a reference)
    online: dict[str, Any]  # {"target": ..., "reference": ...}


def _load(drafter: str, target: str, reference: str | None, device: str, dtype: str) -> Loaded:
    from eagle3kit.model.loading import load_drafter, load_target

    ld = load_drafter(drafter, device=device, dtype=dtype)  # the checkpoint is read once
    new = load_target(target, device=device, dtype=dtype)
    ref = load_target(reference, device=device, dtype=dtype) if reference else None
    return Loaded(ld.layout, ld.spec, ld.drafter, new, ref)


def _runs_on(spec: DraftSpec, target: TargetModel) -> bool:
    return spec.target_hidden_size == target.hidden_size and spec.vocab_size == target.vocab_size


def _on(drafter: Eagle3Drafter, target: TargetModel, own_embed: bool) -> Eagle3Drafter:
    """Engines feed the drafter the serving target's embedding unless it carries its own."""
    if not own_embed:
        drafter.set_embedding(target.embed_tokens.weight)
    return drafter


def _on_block(drafter: DFlashDrafter, target: TargetModel) -> DFlashDrafter:
    """A DFlash drafter without its own embedding/lm_head borrows the serving target's."""
    if not hasattr(drafter, "embed_tokens"):
        drafter.attach_target(target)
    return drafter


def _online(run: Run, target: TargetModel, layers: Sequence[int]) -> dict[str, Any] | None:
    """Real chain decoding on ``target`` capturing ``layers`` (`online_tau`)."""
    t = _with_aux(target, layers)
    d = _on(run.loaded.drafter, t, run.own_embed)
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
        tref = _with_aux(ref, layers)
        try:
            ref_feats = target_features(tref, run.batch, d)
        finally:
            tref.close()
        out.similarity, out.fc_similarity = hidden_similarity(ref_feats, new_feats, d, layers)
        emit(run.progress, "probe", 3, STAGES, "stage", doing="reference acceptance")
        out.acceptance = offline_acceptance(_on(d, ref, run.own_embed), ref_feats, run.depth)
    emit(run.progress, "probe", 4, STAGES, "stage", doing="online decoding")
    out.online = {"target": _online(run, new, layers)}
    if ref is not None:
        out.online["reference"] = _online(run, ref, layers)
    return out


def probe(
    drafter: str | None,
    target: str,
    reference: str | None = None,
    data: str | None = None,
    *,
    baseline_tps: float | None = None,
    cycle_ms: float | None = None,
    bench: str | None = None,
    depth: int = DEFAULT_DEPTH,
    samples: int = 16,
    max_len: int = 256,
    online_prompts: int = 4,
    online_tokens: int = 48,
    device: str = "cpu",
    dtype: str = "float32",
    progress: Progress | None = None,
    method: str = "eagle3",
) -> dict[str, Any]:
    """Run the Phase 0 probe; returns the `probe --json` document (module docstring).
    Stages: compat and loading, aux readings, similarity and acceptance against the
    reference, verdict. ``method="mtp"``: ``drafter`` is an MTP head dir or None (the
    reference's own head), measure/probe_mtp.py."""
    speeds = speed_inputs(bench, baseline_tps, cycle_ms)
    emit(progress, "probe", 0, STAGES, "stage", doing="compat")
    if method == "mtp":
        loads = (drafter, target, reference, depth, device, dtype)
        return _probe_mtp(loads, (data, samples, max_len), online_prompts, online_tokens,
                          speeds, progress)  # fmt: skip
    doc, loaded = _compat_and_load(drafter, target, reference, depth, device, dtype)
    new = loaded.target
    if not _runs_on(loaded.spec, new):
        return not_runnable(doc)
    batch = (
        data_batch(data, samples, max_len, target=new)
        if data
        else builtin_batch(new.tokenizer, samples, max_len)
    )
    doc["data"] = _data_figures(batch)
    if getattr(loaded.drafter, "method", None) == "dflash":  # measure/probe_block.py
        from eagle3kit.measure.probe_block import probe_block

        run = Run(loaded, batch, depth, False, online_prompts, online_tokens, progress)
        this = sys.modules[__name__]  # its helpers, without probe_block importing probe
        return probe_block(this, doc, run, speeds)
    own_embed = bool(loaded.drafter.embed_loaded)
    run = Run(loaded, batch, depth, own_embed, online_prompts, online_tokens, progress)
    emit(progress, "probe", 1, STAGES, "stage", doing="aux readings")
    aux, new_feats = _aux_reading(run, drafter)
    against = _against_reference(run, aux["chosen"]["layers"], new_feats)
    return _result(doc, aux, against, speeds, run)


def _probe_mtp(loads, sample, online_prompts, online_tokens, speeds, progress) -> dict:
    """Load NEW, OLD and the MTP head on each, then measure/probe_mtp.py's stages."""
    from eagle3kit.measure import probe_mtp as M
    from eagle3kit.measure.similarity import check_targets
    from eagle3kit.model.loading import load_target

    drafter, target, reference, depth, device, dtype = loads
    check_targets(target, reference)
    ref = load_target(reference, device=device, dtype=dtype) if reference else None
    new, *heads = M.load_heads(
        lambda: load_target(target, device=device, dtype=dtype), ref, target, drafter
    )
    doc = {"drafter": drafter, "target": target, "reference": reference,
           "compat": M.compat_doc(new, drafter, target, depth), "depth": depth}  # fmt: skip
    data, samples, max_len = sample
    batch = (
        data_batch(data, samples, max_len, target=new)
        if data
        else builtin_batch(new.tokenizer, samples, max_len)
    )
    doc["data"] = _data_figures(batch)
    loaded = Loaded("mtp", None, tuple(heads), new, ref)
    run = Run(loaded, batch, depth, True, online_prompts, online_tokens, progress)
    return M.probe_mtp(sys.modules[__name__], doc, run, speeds)


def _aux_reading(run: Run, drafter: str) -> tuple[dict[str, Any], list[Features]]:
    """The aux readings tried on NEW, the engines' capture of the chosen one, and its features."""
    ld, new = run.loaded, run.loaded.target
    aux = detect_aux(_on(ld.drafter, new, run.own_embed), new, run.batch, ld.spec, run.depth)
    aux["engines"] = engine_capture(ld.spec, ld.layout, new, aux["chosen"]["layers"], drafter)
    new_feats = aux.pop("target_features")  # the chosen reading's features, for the similarity
    return aux, new_feats


def _result(
    doc: dict[str, Any],
    aux: dict[str, Any],
    against: Against,
    speeds: tuple[float | None, float | None],
    run: Run,
) -> dict[str, Any]:
    """Break-even and verdict from the figures; the stamped `probe --json` document."""
    acc_new = aux["acceptance"][aux["chosen"]["reading"]]  # D on NEW, the chosen reading
    acc_ref = against.acceptance  # D on OLD
    tau, tau_ref = acc_new["tau_every_position"], acc_ref["tau_every_position"] if acc_ref else None
    be = None
    if speeds[0] is not None and speeds[1] is not None:
        be = break_even(speeds[0], speeds[1], {"target": tau, "reference": tau_ref}, run.depth)
    verdict, reasons = _verdict(aux, tau, tau_ref, against.fc_similarity, be)
    emit(run.progress, "probe", STAGES, STAGES, "stage", doing="done")
    doc = {
        **doc,
        "aux": aux,
        "similarity": against.similarity,
        "fc_similarity": against.fc_similarity,
        "acceptance": {"target": acc_new, "reference": acc_ref},
        "tau_every_position": {"target": tau, "reference": tau_ref},
        "tau_online": against.online,
        "break_even": be,
        "verdict": verdict,
        "reasons": reasons,
        "warnings": few_sequences(doc["data"]["sequences"], "the verdict"),
    }
    return stamp(doc, "probe")


def _compat_and_load(
    drafter: str, target: str, reference: str | None, depth: int, device: str, dtype: str
) -> tuple[dict[str, Any], Loaded]:
    """Check the targets' configs, run compat, load everything: (the document's head, what
    was loaded)."""
    from eagle3kit.checkpoint.compat import compat
    from eagle3kit.measure.similarity import check_targets
    from eagle3kit.model.loading import resolve_target

    check_targets(target, reference)  # from the configs, before any weight is read
    c = compat(drafter, resolve_target(target), "both")
    loaded = _load(drafter, target, reference, device, dtype)
    if loaded.reference is not None:
        hs = (loaded.target.hidden_size, loaded.reference.hidden_size)
        check_targets(target, reference, *hs)
    doc = {
        "drafter": drafter,
        "target": target,
        "reference": reference,
        "compat": c.to_json(),
        "depth": depth,
    }
    return doc, loaded


def not_runnable(doc: dict[str, Any]) -> dict[str, Any]:
    """The document of a drafter that cannot run on the target (shapes, or NEW's store):
    compat only."""
    v, why = decide(False, None, None, None, None)
    return {
        **doc,
        "aux": None,
        "similarity": [],
        "fc_similarity": None,
        "data": None,
        "acceptance": None,
        "tau_every_position": {"target": None, "reference": None},
        "tau_online": None,
        "break_even": None,
        "verdict": v,
        "reasons": why,
    }


def _data_figures(batch: Batch) -> dict[str, Any]:
    return {
        "source": batch.source,
        "sequences": int(batch.input_ids.shape[0]),
        "tokens": int(batch.attention_mask.sum()),
        "scored": int(batch.loss_mask.sum()),
    }


def _verdict(aux, tau, tau_ref, fc_sim, be) -> tuple[str, list[str]]:
    """``decide``'s verdict and reasons, plus a reason when the aux reading was uncertain."""
    verdict, reasons = decide(True, tau, tau_ref, fc_sim["cosine_mean"] if fc_sim else None, be)
    if not aux["chosen"]["clear"]:
        reasons.append(
            f"aux reading uncertain: margin {aux['chosen']['margin_tau_every_position']} < "
            f"{CLEAR_MARGIN} "
            "in tau_every_position; kept the config's reading"
        )
    return verdict, reasons
