"""How good is a drafter on a target? Offline (teacher-forced) and online (real decoding).

Offline, on DATA's held-out samples: the training-time-test metrics of `eagle3kit.train.ttt`
on features from `eagle3kit.data.features.compute_features` (the same code training uses):
the cycles greedy chain decoding of depth k goes through on each held-out answer (`ttt.walk`:
a cycle starts where the previous one ended), their accept length tau_walk = mean(a + 1),
per-position acceptance P(a >= i) and conditional acceptance P(a >= i | a >= i-1); on answers
the target wrote itself with greedy decoding this replays online chain decoding exactly.
`all_positions` has training's metric beside it: every position as a cycle start,

    tau_every_position = 1 + sum_{i=1..k} prod_{j<=i} cond_acc_j,

which reads higher, since real cycles often start right after a token the drafter missed.

Online, on DATA's prompts (each conversation up to its first assistant turn, chat-templated):
real greedy chain decoding against plain greedy decoding of the same prompts, `repeats` times
in alternating order. tau_online (the decoder's own count) = mean tokens emitted per cycle;
tok/s = new tokens / wall time (prefill included) over all prompts of one repeat;
median/min/max over repeats. decode_ms is the median plain decode step, cycle_ms the mean
speculative cycle (draft + verify + bookkeeping), so `eagle3kit plan --from` can predict
tau / cycle_ms and compare. The offline-online gap is
tau_walk / tau_online - 1, with tau_walk taken on the answers decoding covered: the same samples,
each cut at the end of its first assistant turn or after max_new_tokens answer tokens.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle3kit.core import registry
from eagle3kit.core.artifacts import few_sequences, stamp
from eagle3kit.core.diversity import cross_prompt, distinct_ngram_ratio
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.progress import Progress, emit

if TYPE_CHECKING:
    import torch

    from eagle3kit.train.acceptance import Acceptance


@dataclass
class EvalData:
    """Held-out samples (ids, loss mask) for offline eval and chat prompts for online eval."""

    source: str
    samples: list[tuple[torch.Tensor, torch.Tensor]]  # (input_ids [T], loss_mask [T])
    prompts: list[list[int]]
    skipped: list[str] = field(default_factory=list)  # "file:line: reason" of unusable records


def _prompt_of(ids: torch.Tensor, mask: torch.Tensor) -> list[int] | None:
    """The sample up to its first assistant token (the chat template's generation prompt)."""
    hits = mask.nonzero()
    return ids[: int(hits[0])].tolist() if len(hits) and int(hits[0]) > 0 else None


def load_eval_data(
    path: str | Path,
    tokenizer: Any = None,
    *,
    heldout: float | int = 0.05,
    vocab_size: int | None = None,
) -> EvalData:
    """A DATA dir (`data prepare`; its held-out split, the one training leaves out, or
    ``heldout``: a fraction, 1.0 = all, or a count) or a JSONL of conversations (all of them;
    encoded with the target's chat template). A DATA dir is
    first checked against the target's tokenizer (and vocab_size, when given)."""
    p = Path(path)
    if p.is_dir():
        from eagle3kit.data.prepared import META, check_data_matches_target, load_prepared

        data = load_prepared(p)
        check_data_matches_target(
            data.meta, str(p / META), vocab_size=vocab_size, tokenizer=tokenizer
        )
        whole = (
            len(data) <= 1
            or (isinstance(heldout, float) and heldout == 1.0)
            or (type(heldout) is int and heldout == len(data))
        )
        _, held = ([], list(range(len(data)))) if whole else data.split(heldout)
        samples, skipped = [(data[i].input_ids, data[i].loss_mask) for i in held], []
    elif p.is_file():
        samples, skipped = _encode_jsonl(p, tokenizer)
    else:
        raise Eagle3Error(f"{p}: no such DATA directory or JSONL file")
    prompts = [pr for ids, m in samples if (pr := _prompt_of(ids, m)) is not None]
    if not samples:
        why = f" ({len(skipped)} unusable, first: {skipped[0]})" if skipped else ""
        raise bad(str(p), f"expected at least one sample with an assistant turn, found none{why}")
    return EvalData(str(p), samples, prompts, skipped)


def _encode_jsonl(
    p: Path, tokenizer: Any
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[str]]:
    """(samples, skipped): malformed records are skipped and named, as `data prepare` does."""
    import torch

    from eagle3kit.data.conversations import Problem, read_conversations
    from eagle3kit.data.templates import ChatEncoder

    if tokenizer is None:
        raise bad(str(p), "a JSONL of conversations needs the target's tokenizer, found none")
    enc = ChatEncoder(tokenizer)
    out, skipped = [], []
    for _file, _line, conv in read_conversations([p]):
        if isinstance(conv, Problem):
            skipped.append(str(conv))
            continue
        ids, mask = enc.encode(conv.turns)
        if any(mask):
            out.append((torch.tensor(ids), torch.tensor(mask, dtype=torch.bool)))
    return out, skipped


def evaluate_offline(
    target,
    drafter,
    data: EvalData,
    depth: int = 3,
    *,
    batch_size: int = 8,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Teacher-forced acceptance on the held-out samples (module docstring), as the drafter's
    method measures it (its measure part's `evaluate_offline`; EAGLE-3's is the aggregation of
    `eagle3kit.train.acceptance`, the one training and probe use)."""
    part = registry.part(drafter.method, "measure")
    return part.evaluate_offline(
        target, drafter, data, depth, batch_size=batch_size, progress=progress
    )


def offline_doc(
    a: Acceptance, method: str, samples: int, skipped: int, source: str | None = None, **extra: Any
) -> dict[str, Any]:
    """The `eval` document of an offline run (walked and every-position acceptance); a store's
    run adds its `source` and `extra` fields (aux layers, held-out split)."""
    from eagle3kit.plan.forecast import conditional

    doc = {
        "mode": "offline",
        "method": method,  # eagle3 | eagle3.1 | peagle
        **({} if source is None else {"source": source}),
        "depth": a.depth,
        "tau_walk": a.tau_walk,
        "tau_every_position": a.tau_every_position,
        "per_position_acceptance": a.walk_acc,
        "conditional_acceptance": conditional(a.walk_acc),
        "cycles": a.cycles,
        "all_positions": {  # every position as a cycle start
            "tau_every_position": a.tau_every_position,
            "per_position_acceptance": a.acc,
            "conditional_acceptance": a.cond_acc,
            "counted": a.counted,
        },
        "samples": samples,
        "skipped": skipped,
        **extra,
        "warnings": few_sequences(samples, "offline acceptance"),
    }
    return stamp(doc, "eval")


def offline_batches(target, drafter, data: EvalData, batch_size: int, progress):
    """Features of the held-out samples, batch by batch, on the drafter's device and dtype."""
    from eagle3kit.data.features import compute_features
    from eagle3kit.data.prepared import Sample, collate

    n = len(data.samples)
    for start in range(0, n, batch_size):
        chunk = data.samples[start : start + batch_size]
        ids, am, lm = collate([Sample(str(i), s, m) for i, (s, m) in enumerate(chunk)])
        feats = compute_features(target, ids, am, lm, drafter.d2t)
        yield feats.to(drafter.fc.weight.device, drafter.fc.weight.dtype)
        emit(progress, "offline eval", min(start + batch_size, n), n, "samples")


def evaluate_online(
    target,
    drafter,
    prompts: list[list[int]],
    depth: int = 3,
    *,
    max_new_tokens: int = 128,
    repeats: int = 3,
    tree=None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Real decoding of `prompts`: speculative (chain, or tree) against plain greedy, timed by
    the shared harness (measure/timing.py: alternating order)."""
    from eagle3kit.measure import timing as T

    if not prompts:
        raise Eagle3Error("online eval: expected at least one prompt, found none")
    eos = getattr(target.tokenizer, "eos_token_id", None)
    methods = {
        "base": T.plain_runner(target, max_new_tokens, eos),
        "spec": T.spec_runner(target, drafter, max_new_tokens, eos, depth, tree),
    }
    runs = T.time_methods(methods, prompts, repeats, progress=progress, label="online eval")
    return stamp(online_summary(runs, drafter.method, depth, len(prompts), repeats), "eval")


def online_summary(runs, method: str, depth: int, prompts: int, repeats: int) -> dict[str, Any]:
    """The online figures of the "spec" and "base" runs of a timing harness (any subset of
    its prompts: `measure/by_length.py` summarises each context bucket so)."""
    from eagle3kit.measure import timing as T

    spec_tps, base_tps = T.tokens_per_s(runs, "spec"), T.tokens_per_s(runs, "base")
    steps = T.step_times(runs, "base")
    stats = [x.stats for x in T.of(runs, "spec")]
    pooled = T.pooled(runs, "spec", depth)
    answers = [x.tokens for x in T.of(runs, "base") if x.repeat == 0]
    return {
        "mode": "online",
        "method": method,
        "decoding": pooled.method,  # chain | tree
        "depth": depth,
        "tau_online": pooled.tau_online,
        "per_position_acceptance": pooled.per_position_acceptance(),
        "conditional_acceptance": pooled.conditional_acceptance(),
        "cycles": len(pooled.cycles),
        "tokens_per_s": statistics.median(spec_tps),
        "baseline_tokens_per_s": statistics.median(base_tps),
        "tokens_per_s_spread": T.spread(spec_tps),
        "baseline_tokens_per_s_spread": T.spread(base_tps),
        "speedup": statistics.median(spec_tps) / statistics.median(base_tps),
        "decode_ms": 1e3 * statistics.median(steps) if steps else None,
        "cycle_ms": pooled.mean_ms("cycle_s"),
        "draft_ms": pooled.mean_ms("draft_s"),
        "verify_ms": pooled.mean_ms("verify_s"),
        "prefill_ms": 1e3 * statistics.fmean(s.prefill_s for s in stats),
        "baseline_prefill_ms": 1e3
        * statistics.fmean(x.stats.prefill_s for x in T.of(runs, "base")),
        "new_tokens": statistics.fmean(s.new_tokens for s in stats),
        "lossless": T.same_tokens(runs, "spec", "base"),
        "prompts": prompts,
        "repeats": repeats,
        # the canned-output check beside tau: do the target's answers depend on the prompt?
        "target_distinct4": statistics.fmean(distinct_ngram_ratio(a, 4) for a in answers),
        "target_diversity": cross_prompt(answers),
    }


def evaluate(
    target,
    drafter,
    data: EvalData,
    depth: int = 3,
    *,
    online: bool = False,
    max_new_tokens: int = 128,
    repeats: int = 3,
    limit: int | None = 20,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Offline always; with `online`, also real decoding, and the offline-online gap, taken
    against offline on the very answers decoding covered (`_as_decoded`)."""
    off = evaluate_offline(target, drafter, data, depth, progress=progress)
    if not online:
        return off
    same = _as_decoded(data, limit, max_new_tokens)
    on = evaluate_online(
        target,
        drafter,
        same.prompts,
        depth,
        max_new_tokens=max_new_tokens,
        repeats=repeats,
        progress=progress,
    )
    keys = (
        "per_position_acceptance",
        "conditional_acceptance",
        "cycles",
        "tau_walk",
        "tau_every_position",
        "all_positions",
        "samples",
    )
    on["offline"] = {k: off[k] for k in keys}
    off_same = evaluate_offline(target, drafter, same, depth)
    on["offline_same_answers"] = {k: off_same[k] for k in keys}
    on["offline_online_gap"] = off_same["tau_walk"] / on["tau_online"] - 1.0
    on["warnings"] = off["warnings"]
    return on


def _as_decoded(data: EvalData, limit: int | None, max_new_tokens: int) -> EvalData:
    """The first `limit` samples with a prompt, each cut where online decoding stops: the end
    of its first assistant turn or `max_new_tokens` answer tokens, whichever comes first."""
    samples, prompts = [], []
    for ids, mask in data.samples:
        pr = _prompt_of(ids, mask)
        if pr is None:
            continue
        p = len(pr)
        rest = (~mask[p:]).nonzero()
        end = min(p + (int(rest[0]) if len(rest) else len(mask) - p), p + max_new_tokens)
        samples.append((ids[:end], mask[:end]))
        prompts.append(pr)
        if limit and len(prompts) == limit:
            break
    return EvalData(data.source, samples, prompts, data.skipped)


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
    """`eval --features STORE`: offline acceptance from a feature store, no target loaded.

    The same metrics as `evaluate_offline`; the target's hidden states and argmax come from the
    store (aux dequantised from fp8), the drafter's layers picked by h-index. The samples:
    ``heldout`` (a fraction or a count of the store, by sample id) or by default the whole
    store when it was captured from held-out data, else DATA's held-out split (5%, the one
    training leaves out); the document's ``heldout`` says which. The drafter's method (read
    from its config) measures it: its measure part's `evaluate_store`."""
    from eagle3kit.model.loading import drafter_method

    part = registry.part(drafter_method(drafter) or registry.DEFAULT, "measure")
    return part.evaluate_store(
        drafter,
        str(features),
        depth,
        target=target,
        heldout=heldout,
        batch_size=batch_size,
        device=device,
        progress=progress,
    )
