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

The stages are the drafter's method's (its measure part's `probe`, core/registry.py), given the
run as one object (`Run`: what was loaded, the batch, the depth, the speeds); EAGLE-3's are in
measure/probe_aux.py, which the other methods' follow. A method whose drafter ships inside the
target (an MTP head) loads its own (`probe_head`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eagle3kit.core import registry
from eagle3kit.core.artifacts import few_sequences, stamp
from eagle3kit.core.progress import Progress, emit
from eagle3kit.measure.probe_batches import Batch, builtin_batch, data_batch
from eagle3kit.measure.verdict import break_even, decide, speed_inputs

if TYPE_CHECKING:
    from eagle3kit.data.features import Features
    from eagle3kit.model.protocols import Drafter
    from eagle3kit.model.target import TargetModel

CLEAR_MARGIN = 0.05  # tau difference under which the aux reading is called uncertain
DEFAULT_DEPTH = 3
STAGES = 5  # progress: compat and loading, aux readings, similarity, reference, online


def with_aux(target: TargetModel, layers: Sequence[int]) -> TargetModel:
    """A TargetModel over the same weights that captures ``layers`` instead."""
    from eagle3kit.model.target import TargetModel

    return TargetModel(
        target.model, target.tokenizer, aux_layers=tuple(layers), name_or_path=target.name_or_path
    )


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


def hidden_similarity(
    ref_feats: list[Features],
    new_feats: list[Features],
    drafter: Drafter,
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
    drafter: Drafter,
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
    `eagle3kit.decode`. ``generate``: the decoding function (default: decode's
    speculative_generate, the drafter's method proposing)."""
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


@dataclass
class Request:
    """What `probe` was asked: the drafter, NEW and OLD, the sample, the sizes, the speeds."""

    drafter: str | None
    target: str
    reference: str | None
    data: str | None
    depth: int
    samples: int
    max_len: int
    online_prompts: int
    online_tokens: int
    device: str
    dtype: str
    speeds: tuple[float | None, float | None]
    progress: Progress | None = None


@dataclass
class Loaded:
    """What the in-process probe loads: the drafter (its checkpoint read once) and both targets."""

    layout: str
    spec: Any  # the drafter method's spec
    drafter: Drafter | tuple[Drafter, Drafter | None]  # a target-head method: on NEW and OLD
    target: TargetModel  # NEW
    reference: TargetModel | None  # OLD


@dataclass
class Run:
    """One in-process probe after loading: what each stage reads (a method's measure part is
    given it, `probe(doc, run)`)."""

    loaded: Loaded
    batch: Batch
    depth: int
    own_embed: bool  # the drafter carries its own input embedding (engines then keep it)
    online_prompts: int
    online_tokens: int
    progress: Progress | None
    speeds: tuple[float | None, float | None] = (None, None)
    drafter: str | None = None  # its path (named in a fix)


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


def runs_on(spec: Any, target: TargetModel) -> bool:
    """The drafter reads the target's hidden size and vocabulary."""
    return spec.target_hidden_size == target.hidden_size and spec.vocab_size == target.vocab_size


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
    method: str = registry.DEFAULT,
) -> dict[str, Any]:
    """Run the Phase 0 probe; returns the `probe --json` document (module docstring).
    Stages: compat and loading, then the drafter's method's (its measure part's `probe`).
    A method whose drafter ships inside the target (``method="mtp"``: ``drafter`` is a head
    dir or None, the reference's own head) loads its own (its part's `probe_head`)."""
    speeds = speed_inputs(bench, baseline_tps, cycle_ms)
    emit(progress, "probe", 0, STAGES, "stage", doing="compat")
    req = Request(
        drafter,
        target,
        reference,
        data,
        depth,
        samples,
        max_len,
        online_prompts,
        online_tokens,
        device,
        dtype,
        speeds,
        progress,
    )
    if registry.get(method).target_head:
        return registry.part(method, "measure").probe_head(req)
    doc, loaded = compat_and_load(req)
    new = loaded.target
    if not runs_on(loaded.spec, new):
        return not_runnable(doc)
    batch = batch_of(req, new)
    doc["data"] = data_figures(batch)
    run = Run(
        loaded,
        batch,
        depth,
        bool(loaded.drafter.embed_loaded),
        online_prompts,
        online_tokens,
        progress,
        speeds,
        drafter,
    )
    return registry.part(loaded.drafter.method, "measure").probe(doc, run)


def batch_of(req: Request, new: TargetModel) -> Batch:
    """The token sequences scored: DATA's held-out ones (`--data`), else the built-in ones."""
    if req.data:
        return data_batch(req.data, req.samples, req.max_len, target=new)
    return builtin_batch(new.tokenizer, req.samples, req.max_len)


def result(doc: dict[str, Any], aux: dict[str, Any], against: Against, run: Run) -> dict[str, Any]:
    """Break-even and verdict from the figures; the stamped `probe --json` document."""
    speeds = run.speeds
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


def compat_and_load(req: Request) -> tuple[dict[str, Any], Loaded]:
    """Check the targets' configs, run compat, load everything: (the document's head, what
    was loaded)."""
    drafter, target, reference = req.drafter, req.target, req.reference
    from eagle3kit.checkpoint.compat import compat
    from eagle3kit.measure.similarity import check_targets
    from eagle3kit.model.loading import resolve_target

    check_targets(target, reference)  # from the configs, before any weight is read
    c = compat(drafter, resolve_target(target), "both")
    loaded = _load(drafter, target, reference, req.device, req.dtype)
    if loaded.reference is not None:
        hs = (loaded.target.hidden_size, loaded.reference.hidden_size)
        check_targets(target, reference, *hs)
    doc = {
        "drafter": drafter,
        "target": target,
        "reference": reference,
        "compat": c.to_json(),
        "depth": req.depth,
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


def data_figures(batch: Batch) -> dict[str, Any]:
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
