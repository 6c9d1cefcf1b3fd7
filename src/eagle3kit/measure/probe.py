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
5. A verdict, plug-in / fine-tune / from-scratch, with its reasons in numbers (see `decide`),
   and the break-even comparison from `plan`'s cycle model when the speeds are known.

Token sequences come from a prepared data dir (`--data`, its held-out split) or, by default,
built-in conversations (measure/probe_batches.py); only assistant tokens are scored.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from eagle3kit.core.artifacts import few_sequences, kind_of, stamp
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.progress import Progress, emit
from eagle3kit.measure.probe_batches import Batch, builtin_batch, data_batch

# Verdict thresholds (see `decide`).
PLUG_IN_RETENTION = 0.9  # NEW keeps >= 90% of D's gain on OLD (tau - 1): plug in as is
WARM_START_RETENTION = 0.25  # keeps >= 25% of the gain: D still knows something: fine-tune it
WARM_START_FC_COSINE = 0.5  # or fc(aux) still points the same way on average
CLEAR_MARGIN = 0.05  # tau difference under which the aux reading is called uncertain
DEFAULT_DEPTH = 3


def _with_aux(target: Any, layers: Sequence[int]) -> Any:
    """A TargetModel over the same weights that captures ``layers`` instead."""
    from eagle3kit.model.target import TargetModel

    return TargetModel(
        target.model, target.tokenizer, aux_layers=tuple(layers), name_or_path=target.name_or_path
    )


def target_features(target: Any, batch: Batch, drafter: Any, chunk: int = 8) -> list[Any]:
    from eagle3kit.data.features import compute_features

    out = []
    for s in range(0, batch.input_ids.shape[0], chunk):
        sl = slice(s, s + chunk)
        f = compute_features(
            target, batch.input_ids[sl], batch.attention_mask[sl], batch.loss_mask[sl], drafter.d2t
        )
        out.append(f.to(drafter.fc.weight.device, drafter.fc.weight.dtype))
    return out


def offline_acceptance(drafter: Any, feats: list[Any], depth: int) -> dict[str, Any]:
    """Teacher-forced acceptance over feature batches (`train.acceptance`); ``accept_len`` is
    the every-position value probe has always reported (its verdict and aux reading use it)."""
    from eagle3kit.train.acceptance import acceptance

    d = acceptance(drafter, feats, depth).rounded(6)
    out = {k: d[k] for k in ("acc", "cond_acc", "counted", "loss")}  # loss: CE to the target
    taus = {k: d[k] for k in ("tau_every_position", "tau_walk")}
    return {**out, "accept_len": taus["tau_every_position"], **taus}


def aux_candidates(spec: Any, num_layers: int) -> list[dict[str, Any]]:
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
    order = sorted(acc, key=lambda r: (acc[r]["accept_len"], acc[r]["acc"][0]), reverse=True)
    margin = acc[order[0]]["accept_len"] - acc[order[1]]["accept_len"] if len(order) > 1 else None
    clear = margin is None or margin >= CLEAR_MARGIN
    declared = [c["reading"] for c in cands if c["declared"] and c["reading"] in acc]
    chosen = order[0] if clear or not declared else declared[0]
    return {
        "reading": chosen,
        "layers": next(c["layers"] for c in cands if c["reading"] == chosen),
        "best_by_data": order[0],
        "margin_accept_len": None if margin is None else round(margin, 6),
        "clear": clear,
    }


def detect_aux(drafter: Any, target: Any, batch: Batch, spec: Any, depth: int) -> dict[str, Any]:
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
    from eagle3kit.checkpoint import engines as E

    where = "nested" if engine == "sglang" else "top"
    cands = [[i - 1 for i in chosen], chosen] if engine == "sglang" else [chosen]
    cands = [c for c in cands if min(c) >= 0]

    def ok(ids: list[int]) -> list[str]:
        return E.releases_capturing(engine, family, {where: tuple(ids)}, num_layers, chosen)

    n_bands = len(E.bands(engine))
    best = max(cands, key=lambda c: (len(ok(c)) == n_bands, bool(ok(c))))
    return best


def engine_capture(
    spec: Any, layout: str, target: Any, chosen: Sequence[int], src: str
) -> dict[str, Any]:
    """What each engine captures for D as written, whether that is ``chosen``, and the fix."""
    from eagle3kit.checkpoint import engines as E
    from eagle3kit.checkpoint.compat import captured_layers

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
    ref_feats: list[Any], new_feats: list[Any], drafter: Any, layers: Sequence[int]
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


def online_accept_len(
    drafter: Any, target: Any, batch: Batch, depth: int, n_prompts: int, max_new: int
) -> dict[str, Any] | None:
    """Real chain decoding on the first ``n_prompts`` prompts (the tokens before the first
    assistant token): tau = emitted tokens / target verifies. None without `eagle3kit.decode`."""
    if n_prompts <= 0:
        return None
    try:
        from eagle3kit.decode import speculative_generate
    except ImportError:
        return None
    accepted = cycles = tokens = 0
    for b in range(min(n_prompts, batch.input_ids.shape[0])):
        lm = batch.loss_mask[b]
        start = int(lm.nonzero()[0]) if lm.any() else int(batch.attention_mask[b].sum())
        r = speculative_generate(
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
    return {"accept_len": round(tau, 6), "tokens": tokens, "cycles": cycles}


# ---------------------------------------------------------------- verdict


def speed_inputs(
    bench: str | None, baseline_tps: float | None, cycle_ms: float | None
) -> tuple[float | None, float | None]:
    """(baseline tok/s, cycle ms) from --bench or from both --baseline-tps and --cycle-ms."""
    if bench is not None and (baseline_tps is not None or cycle_ms is not None):
        raise Eagle3Error("probe: give --bench or --baseline-tps/--cycle-ms, not both")
    if (baseline_tps is None) != (cycle_ms is None):
        raise Eagle3Error("probe: --baseline-tps and --cycle-ms go together")
    return read_bench(bench) if bench is not None else (baseline_tps, cycle_ms)


def read_bench(path: str) -> tuple[float, float]:
    """(baseline tok/s, cycle ms) from a bench JSON: `bench --json` or `bench --url --json`
    (by its kind: plain decoding's step and the speculative cycle it measured), or a
    hand-written document with top-level ``baseline_tps`` and ``cycle_ms``."""
    from eagle3kit.plan.from_file import measured, read_doc

    doc = read_doc(path)
    if isinstance(doc, dict) and kind_of(doc) in ("bench", "bench-live"):
        f = measured(path, doc).figures
        if not f.get("decode_ms") or not f.get("cycle_ms"):
            raise bad(path, "decode_ms, cycle_ms: expected both measured, found "
                      f"{f.get('decode_ms')!r}, {f.get('cycle_ms')!r}")  # fmt: skip
        return 1000.0 / f["decode_ms"], f["cycle_ms"]
    vals = []
    for key in ("baseline_tps", "cycle_ms"):
        v = doc.get(key) if isinstance(doc, dict) else None
        if not isinstance(v, int | float) or isinstance(v, bool) or v <= 0:
            raise bad(path, f"{key}: expected a positive number, found {v!r}")
        vals.append(float(v))
    return vals[0], vals[1]


def break_even(
    baseline_tps: float, cycle_ms: float, taus: dict[str, float | None], depth: int
) -> dict[str, Any]:
    """plan's cycle model at each measured tau: throughput tau / cycle_s, speedup, break-even."""
    from eagle3kit.plan import plan

    out: dict[str, Any] = {"baseline_tps": baseline_tps, "cycle_ms": cycle_ms, "depth": depth}
    for name, tau in taus.items():
        if tau is None:
            continue
        r = plan(
            baseline_tps=baseline_tps,
            cycle_ms=cycle_ms,
            accept_len=min(tau, depth + 1),
            depth=depth,
        )
        out["break_even_accept_len"] = round(r.break_even_accept_len, 6)
        out[name] = {
            "accept_len": tau,
            "tps": round(r.throughput_tps, 3),
            "speedup": round(r.speedup, 4),
            "pays": r.pays,
        }
    return out


def decide(
    compatible: bool,
    tau: float | None,
    tau_ref: float | None,
    fc_cosine: float | None,
    be: dict[str, Any] | None,
) -> tuple[str, list[str]]:
    """plug-in | fine-tune | from-scratch, with the numbers that decided it.

    retention = (tau_NEW - 1) / (tau_OLD - 1), the share of D's gain that survives the move.
    - from-scratch: D cannot run on NEW (compat errors in shapes or vocab), or it keeps
      < WARM_START_RETENTION of its gain and fc(aux) cosine < WARM_START_FC_COSINE;
    - plug-in: retention >= PLUG_IN_RETENTION (or no reference) and, when the speeds are
      known, tau_NEW is at or above plan's break-even;
    - fine-tune: otherwise (D is a better start than nothing).
    """
    reasons: list[str] = []
    if not compatible or tau is None:
        return "from-scratch", [
            "compat: the drafter cannot run on the new target (see compat findings)"
        ]
    retention = None
    if tau_ref is not None and tau_ref > 1:
        retention = (tau - 1) / (tau_ref - 1)
        reasons.append(
            f"offline accept length {tau:.3f} on the new target vs {tau_ref:.3f} on the "
            f"reference: keeps {retention:.0%} of the gain (plug-in needs >= "
            f"{PLUG_IN_RETENTION:.0%})"
        )
    else:
        reasons.append(
            f"offline accept length {tau:.3f} on the new target (no reference to compare)"
        )
    if fc_cosine is not None:
        reasons.append(
            f"fc(aux) cosine old vs new {fc_cosine:.3f} (warm start needs >= "
            f"{WARM_START_FC_COSINE})"
        )
    pays = None
    if be is not None and "target" in be:
        pays = be["target"]["pays"]
        reasons.append(
            f"plan: break-even accept length {be['break_even_accept_len']:.2f} "
            f"({be['baseline_tps']:g} tok/s x {be['cycle_ms']:g} ms); at {tau:.2f}: "
            f"{be['target']['tps']:.1f} tok/s, {be['target']['speedup']:.2f}x"
        )
    lost = retention is not None and retention < WARM_START_RETENTION
    if lost and (fc_cosine is None or fc_cosine < WARM_START_FC_COSINE):
        return "from-scratch", reasons
    if (retention is None or retention >= PLUG_IN_RETENTION) and pays is not False:
        return "plug-in", reasons
    return "fine-tune", reasons


# ---------------------------------------------------------------- the probe


def _load(drafter: str, target: str, reference: str | None, device: str, dtype: str):
    from eagle3kit.model.loading import load_drafter, load_target

    ld = load_drafter(drafter, device=device, dtype=dtype)  # the checkpoint is read once
    new = load_target(target, device=device, dtype=dtype)
    ref = load_target(reference, device=device, dtype=dtype) if reference else None
    return ld.layout, ld.spec, ld.drafter, new, ref


def _runs_on(spec: Any, target: Any) -> bool:
    return spec.target_hidden_size == target.hidden_size and spec.vocab_size == target.vocab_size


def _on(drafter: Any, target: Any, own_embed: bool) -> Any:
    """Engines feed the drafter the serving target's embedding unless it carries its own."""
    if not own_embed:
        drafter.set_embedding(target.embed_tokens.weight)
    return drafter


def _on_block(drafter: Any, target: Any) -> Any:
    """A DFlash drafter without its own embedding/lm_head borrows the serving target's."""
    if not hasattr(drafter, "embed_tokens"):
        drafter.attach_target(target)
    return drafter


def _online(
    d: Any,
    target: Any,
    layers: Sequence[int],
    own_embed: bool,
    batch: Batch,
    depth: int,
    n: int,
    max_new: int,
) -> dict[str, Any] | None:
    t = _with_aux(target, layers)
    try:
        return online_accept_len(_on(d, t, own_embed), t, batch, depth, n, max_new)
    finally:
        t.close()


def _against_reference(
    d: Any,
    new: Any,
    ref: Any,
    batch: Batch,
    layers: Sequence[int],
    own_embed: bool,
    depth: int,
    online_args: tuple[int, int],
    progress: Progress | None,
    new_feats: list[Any],
):
    """Similarity OLD vs NEW, D's offline acceptance on OLD, and online decoding on both.
    ``new_feats``: NEW's features of the batch at ``layers`` (from detect_aux)."""
    stages = 5
    emit(progress, "probe", 2, stages, "stage", doing="similarity")
    sim, fc_sim, acc_ref = [], None, None
    if ref is not None:
        tref = _with_aux(ref, layers)
        try:
            ref_feats = target_features(tref, batch, d)
        finally:
            tref.close()
        sim, fc_sim = hidden_similarity(ref_feats, new_feats, d, layers)
        emit(progress, "probe", 3, stages, "stage", doing="reference acceptance")
        acc_ref = offline_acceptance(_on(d, ref, own_embed), ref_feats, depth)
    emit(progress, "probe", 4, stages, "stage", doing="online decoding")
    online = {"target": _online(d, new, layers, own_embed, batch, depth, *online_args)}
    if ref is not None:
        online["reference"] = _online(d, ref, layers, own_embed, batch, depth, *online_args)
    return sim, fc_sim, acc_ref, online


def probe(
    drafter: str,
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
) -> dict[str, Any]:
    """Run the Phase 0 probe; returns the `probe --json` document (module docstring).
    Stages: compat and loading, aux readings, similarity and acceptance against the
    reference, verdict."""
    baseline_tps, cycle_ms = speed_inputs(bench, baseline_tps, cycle_ms)
    emit(progress, "probe", 0, _STAGES, "stage", doing="compat")
    doc, (layout, spec, d, new, ref) = _compat_and_load(
        drafter, target, reference, depth, device, dtype
    )
    if not _runs_on(spec, new):
        return not_runnable(doc)
    batch = (
        data_batch(data, samples, max_len, target=new)
        if data
        else builtin_batch(new.tokenizer, samples, max_len)
    )
    doc["data"] = _data_figures(batch)
    emit(progress, "probe", 1, _STAGES, "stage", doing="aux readings")
    if getattr(d, "method", None) == "dflash":  # block drafters: measure/probe_block.py
        from eagle3kit.measure.probe_block import probe_block

        online_args, speeds = (online_prompts, online_tokens), (baseline_tps, cycle_ms)
        this = sys.modules[__name__]  # its helpers, without probe_block importing probe
        return probe_block(this, doc, d, new, ref, batch, depth, online_args, speeds, progress)
    own_embed = bool(d.embed_loaded)
    aux, new_feats = _aux_reading(d, new, batch, spec, layout, depth, drafter, own_embed)
    layers = aux["chosen"]["layers"]
    acc_new = aux["acceptance"][aux["chosen"]["reading"]]
    sim, fc_sim, acc_ref, online = _against_reference(
        d,
        new,
        ref,
        batch,
        layers,
        own_embed,
        depth,
        (online_prompts, online_tokens),
        progress,
        new_feats,
    )
    acc = {"target": acc_new, "reference": acc_ref}
    return _result(doc, aux, sim, fc_sim, acc, online, (baseline_tps, cycle_ms), depth, progress)


_STAGES = 5


def _aux_reading(d, new, batch: Batch, spec, layout, depth: int, drafter: str, own_embed: bool):
    """The aux readings tried on NEW, the engines' capture of the chosen one, and its features."""
    aux = detect_aux(_on(d, new, own_embed), new, batch, spec, depth)
    aux["engines"] = engine_capture(spec, layout, new, aux["chosen"]["layers"], drafter)
    new_feats = aux.pop("target_features")  # the chosen reading's features, for the similarity
    return aux, new_feats


def _result(doc, aux, sim, fc_sim, acc, online, speeds, depth: int, progress) -> dict[str, Any]:
    """Break-even and verdict from the figures; the stamped `probe --json` document."""
    acc_new, acc_ref = acc["target"], acc["reference"]  # D's offline acceptance on NEW, OLD
    tau, tau_ref = acc_new["accept_len"], acc_ref["accept_len"] if acc_ref else None
    be = None
    if speeds[0] is not None:
        be = break_even(speeds[0], speeds[1], {"target": tau, "reference": tau_ref}, depth)
    verdict, reasons = _verdict(aux, tau, tau_ref, fc_sim, be)
    emit(progress, "probe", _STAGES, _STAGES, "stage", doing="done")
    doc = {
        **doc,
        "aux": aux,
        "similarity": sim,
        "fc_similarity": fc_sim,
        "acceptance": acc,
        "accept_len": {"target": tau, "reference": tau_ref, "online": online},
        "break_even": be,
        "verdict": verdict,
        "reasons": reasons,
        "warnings": few_sequences(doc["data"]["sequences"], "the verdict"),
    }
    return stamp(doc, "probe")


def _compat_and_load(drafter, target, reference, depth: int, device: str, dtype: str):
    """Check the targets' configs, run compat, load everything: (the document's head,
    (layout, spec, drafter, target, reference))."""
    from eagle3kit.checkpoint.compat import compat
    from eagle3kit.measure.similarity import check_targets
    from eagle3kit.model.loading import resolve_target

    check_targets(target, reference)  # from the configs, before any weight is read
    c = compat(drafter, resolve_target(target), "both")
    loaded = _load(drafter, target, reference, device, dtype)
    new, ref = loaded[3], loaded[4]
    if ref is not None:
        check_targets(target, reference, new.hidden_size, ref.hidden_size)
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
        "accept_len": {"target": None, "reference": None},
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
            f"aux reading uncertain: margin {aux['chosen']['margin_accept_len']} < {CLEAR_MARGIN} "
            "in accept length; kept the config's reading"
        )
    return verdict, reasons
