"""Everything a run needs before its first step: target, data source, vocab, drafter, splits.

Order matters on warm start: the checkpoint says which target layers it reads (aux layers),
so it is opened before the target, and the target captures exactly those layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core import registry
from eagle3kit.core.artifacts import few_sequences
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.progress import Progress, emit
from eagle3kit.model.protocols import Embedding, JsonConfig
from eagle3kit.train import flags as F
from eagle3kit.train import warmstart
from eagle3kit.train.acceptance import acceptance
from eagle3kit.train.config import check_method, run_split
from eagle3kit.train.sources import OfflineSource, OnlineSource, store_vocab

if TYPE_CHECKING:
    from eagle3kit.model.drafter import Eagle3Drafter
    from eagle3kit.model.target import TargetModel


@dataclass(frozen=True)
class FeaturesTarget:
    """What offline training (--features) reads of the target without loading it: its
    config.json and input embedding, read by header (engine capture's targets never fit in one
    process). An `EmbeddedTarget` (model/protocols.py), as `TargetModel` is."""

    config: JsonConfig
    embed_tokens: Embedding  # weight [V, H]
    vocab_size: int
    num_layers: int
    aux_layers: tuple[int, ...]


@dataclass
class Context:
    drafter: Eagle3Drafter
    spec: Any
    source: Any
    train_idx: list[int]
    heldout_n: int
    eval_batches: list[Any]
    init_info: dict[str, Any] | None
    reference: dict[str, Any] | None = None  # --reference-target: old target's eval batches
    vocab_coverage: dict[str, Any] | None = None  # DATA's loss tokens inside the draft vocab
    warnings: list[str] = field(default_factory=list)  # e.g. a best chosen on few sequences


def _chunks(xs: list[int], n: int) -> list[list[int]]:
    return [xs[i : i + n] for i in range(0, len(xs), n)]


def _open_source(
    cfg: Any, target: TargetModel | FeaturesTarget, data: Any, d2t: torch.Tensor, aux_layers: Any
):
    if cfg.features:
        store = open_store(cfg.features, d2t)
        return OfflineSource(store, max_len=cfg.max_len, layers=aux_layers)
    assert not isinstance(target, FeaturesTarget)  # online: the target runs here
    return OnlineSource(data, target, d2t, max_len=cfg.max_len, topk=cfg.topk)


def open_store(path: str, d2t: torch.Tensor) -> Any:
    """A feature store whose teacher columns are over the drafter's draft vocab (d2t)."""
    from eagle3kit.data.store import FeatureStore

    store = FeatureStore(path)
    have, _ = store_vocab(store, path)
    if not torch.equal(have, d2t.cpu()):
        raise bad(
            path,
            f"vocab: the store's teacher columns were taken with another draft vocab "
            f"({have.numel()} ids) than the drafter's ({d2t.numel()} ids); capture the "
            "store with `data capture ... --vocab DRAFTER` (a drafter checkpoint serves as "
            "--vocab: its own d2t/t2d), or add --rebuild-vocab to train over the store's",
        )
    return store


def store_drafter_layers(path: str) -> list[int]:
    """The h-indices a store was captured for as a drafter's aux layers (its first layers;
    the rest are extras such as the probe's other reading); all of them in older stores."""
    from eagle3kit.data.store import FeatureStore

    man = FeatureStore(path).manifest
    return [int(i) for i in man.get("drafter_layers") or man.get("aux_layers") or []]


def open_data(cfg: Any, target: TargetModel | FeaturesTarget) -> Any:
    """DATA (PreparedData) or None for a store; either checked against the target first
    (`data.prepared.check_data_matches_target`, the check `data capture` runs)."""
    from eagle3kit.data.prepared import META, check_data_matches_target, load_prepared

    if cfg.features:
        from eagle3kit.data.store import MANIFEST, FeatureStore

        man = FeatureStore(cfg.features).manifest
        where = str(Path(cfg.features) / MANIFEST)
        check_data_matches_target(man, where, vocab_size=target.vocab_size)
        return None
    data = load_prepared(cfg.data)
    where = str(Path(cfg.data) / META)
    check_data_matches_target(
        data.meta, where, vocab_size=target.vocab_size, tokenizer=target.tokenizer
    )
    return data


def _vocab(
    cfg: Any, init: Any, target: TargetModel | FeaturesTarget, data: Any
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(d2t, t2d) for the run, or None to keep the warm-start checkpoint's."""
    from eagle3kit.core.vocab import build_vocab, load_vocab, validate_vocab

    v = target.vocab_size
    if init is not None and not cfg.rebuild_vocab:
        if cfg.vocab or cfg.draft_vocab_size:
            raise Eagle3Error(
                "--vocab/--draft-vocab-size: a warm start keeps its checkpoint's d2t/t2d; "
                "add --rebuild-vocab to replace it"
            )
        return None
    if cfg.vocab:
        d2t, t2d = load_vocab(cfg.vocab)
        validate_vocab(d2t, t2d, v, cfg.vocab)
        return d2t.long(), t2d.bool()
    if cfg.features and not cfg.data:
        from eagle3kit.data.store import FeatureStore

        d2t, t2d = store_vocab(FeatureStore(cfg.features), cfg.features)
        if t2d.numel() != v:
            raise bad(
                cfg.features, f"vocab: t2d covers {t2d.numel()} ids, expected the target's {v}"
            )
        return d2t, t2d
    n = cfg.draft_vocab_size or (init.spec.draft_vocab_size if init is not None else v)
    if n == v and not cfg.rebuild_vocab:
        return torch.zeros(v, dtype=torch.long), torch.ones(v, dtype=torch.bool)
    from eagle3kit.data.vocab_counts import loss_token_counts

    return build_vocab(loss_token_counts(data, v), n)


def _target(cfg: Any, name: str, aux: Any, device: str):
    """The target (or --reference-target): a zoo name, a local dir or a hub id."""
    from eagle3kit.model.loading import resolve_target
    from eagle3kit.model.target import TargetModel

    return TargetModel.from_pretrained(
        resolve_target(name),
        device=device,
        dtype=cfg.target_dtype,
        aux_layers=aux,
        trust_remote_code=cfg.trust_remote_code,
    )


def features_target(path: str, aux_layers: Any, dtype: str = "float32") -> FeaturesTarget:
    """The target of `--features` training, read by header (`FeaturesTarget`)."""
    from eagle3kit.checkpoint.io.hub_files import open_target
    from eagle3kit.checkpoint.io.tensor_read import read_tensor
    from eagle3kit.core.spec import default_aux_layers
    from eagle3kit.model.target import parse_dtype

    ckpt = open_target(path)  # partial: only the embedding's shard is read
    conf = ckpt.config
    text = conf.get("text_config") if isinstance(conf.get("text_config"), dict) else conf
    names = sorted((n for n in ckpt.names() if n.endswith("embed_tokens.weight")), key=len)
    if not names:
        raise bad(ckpt.source, "embed_tokens.weight: expected the target's input embedding")
    dt = parse_dtype(dtype)  # the one dtype-name table (core/dtypes.py); "auto": float32
    emb = read_tensor(ckpt, names[0]).to(dt if isinstance(dt, torch.dtype) else torch.float32)
    layers = int(text.get("num_hidden_layers") or 0)
    return FeaturesTarget(
        config=JsonConfig(dict(conf)),
        embed_tokens=Embedding(emb),
        vocab_size=int(emb.shape[0]),
        num_layers=layers,
        aux_layers=tuple(aux_layers) if aux_layers else default_aux_layers(layers),
    )


def _check_options(cfg: Any, d: Any) -> None:
    if not cfg.target:
        raise Eagle3Error("--target: expected the target model (dir or hub id), found none")
    if bool(cfg.data) == bool(cfg.features):
        raise Eagle3Error(
            "expected exactly one of --data DATA (online) or --features STORE (offline)"
        )
    if cfg.features and cfg.reference_target:  # refused before any target is loaded
        raise Eagle3Error(
            "--reference-target runs the old target here, which --features avoids: give the "
            "old target's feature store of the same DATA as --reference-features STORE"
        )
    if cfg.reference_features and not cfg.features:
        raise Eagle3Error("--reference-features goes with --features (online: --reference-target)")
    check_method(cfg.method)
    if cfg.attention not in ("mha", "mla"):
        raise Eagle3Error(f"--attention: expected 'mha' or 'mla', found {cfg.attention!r}")
    if cfg.batch_size < d.world:
        raise Eagle3Error(
            f"--batch-size: expected at least one sample per rank ({d.world}), "
            f"found {cfg.batch_size}"
        )


def prepare(cfg: Any, d: Any, progress: Progress | None = None) -> Context:
    """Target, DATA (checked against it), drafter, vocab coverage, splits, held-out batches."""
    _check_options(cfg, d)
    init = warmstart.warm_drafter(cfg.init_from, device="cpu") if cfg.init_from else None
    aux0 = init.spec.aux_layers if init is not None else None
    if cfg.features:  # offline: the target never runs
        aux0 = aux0 or store_drafter_layers(cfg.features)
        from eagle3kit.zoo import resolve_target

        target = features_target(resolve_target(cfg.target), aux0, cfg.target_dtype)
    else:
        target = _target(cfg, cfg.target, aux0, d.device)
    check_max_len(cfg.max_len, target.config)
    data = open_data(cfg, target)
    m, info = _drafter(cfg, init, target, data)
    m = m.to(d.device)
    coverage = vocab_coverage(cfg, m, data, progress)
    src = _open_source(cfg, target, data, m.d2t.cpu(), m.spec.aux_layers)
    train_idx, held_idx = run_split(cfg, *src.split(cfg.heldout, 0))
    held = held_idx[: cfg.eval_samples]
    eval_batches = []
    for j, ch in enumerate(_chunks(held, cfg.eval_batch)):
        eval_batches.append(src.batch(ch).to(d.device))
        emit(progress, "held-out features", j + 1, -(-len(held) // cfg.eval_batch), "batches")
    ctx = Context(m, m.spec, src, train_idx, len(held), eval_batches, info)
    ctx.vocab_coverage = coverage
    ctx.warnings = _warnings(cfg, src, len(held), progress, _method_warnings(cfg, info))
    if cfg.reference_target or cfg.reference_features:
        ctx.reference = _reference_before(cfg, ctx, data, held, d.device)
    return ctx


def check_max_len(max_len: int, config: Any) -> None:
    """--max-len within the target's positions (its max_position_embeddings, when it has one):
    a longer window would train the drafter at positions the target never serves."""
    cfg = config.to_dict() if hasattr(config, "to_dict") else dict(config or {})
    cfg = cfg.get("text_config") or cfg
    n = cfg.get("max_position_embeddings")
    if isinstance(n, int) and max_len > n:
        raise Eagle3Error(
            f"--max-len: expected at most the target's max_position_embeddings ({n}), "
            f"found {max_len}"
        )


def _warnings(
    cfg: Any, src: Any, n_held: int, progress: Progress | None, first: list[str]
) -> list[str]:
    """What the summary's ``warnings`` say (each also a "warning" progress event): `first`
    (a fine-tune that changes its checkpoint's flags), a best chosen on few sequences, a
    store of held-out data trained on."""
    out = list(first) + few_sequences(n_held, "choosing RUN/best (held-out accept length)")
    if cfg.features and src.store.heldout_data:
        out.append(
            f"{cfg.features} was captured from held-out data (--heldout-data): training on "
            "it leaves no held-out figure for `eval`"
        )
    for w in out:
        emit(progress, "warning", 0, None, "", message=w)
    return out


def _drafter(
    cfg: Any, init: Any, target: TargetModel | FeaturesTarget, data: Any
) -> tuple[Eagle3Drafter, dict | None]:
    """The drafter to train (fresh, warm, or warm with a rebuilt vocab) with the target's
    embedding, its flags (train/flags.py, the method's preset), made the run's method's by its
    train part (`prepare`), and what the summary says about its start."""
    emb = target.embed_tokens.weight  # [V, H]
    info = None
    method = cfg.method or (init.method if init is not None else registry.DEFAULT)
    part = registry.part(method, "train")
    start = F.spec_flags(init.spec) if init is not None else None
    preset = getattr(part, "preset", None)
    flags = F.wanted_flags(cfg, start, preset(cfg.method) if preset else None)
    if init is not None:
        warmstart.check_against_target(
            init.spec, target.vocab_size, emb.shape[1], str(cfg.init_from)
        )
        info = warmstart.describe(cfg.init_from, init)
    vocab = _vocab(cfg, init, target, data)
    if init is None:
        m = warmstart.fresh_drafter(
            target.config.to_dict(),
            target.aux_layers,
            *vocab,
            attention=cfg.attention,
            flags=flags,
            seed=cfg.seed,
        )
    elif vocab is not None:
        m = warmstart.rebuild_vocab(init, *vocab)
        info["rebuilt_vocab"] = {
            "draft_vocab_size": int(vocab[0].numel()),
            "rows_kept": m.rows_kept,
        }
    else:
        m = init
    if init is not None and F.flag_changes(start, flags):
        info["flags_changed"] = F.flag_changes(start, flags)
        m = F.with_flags(m, flags)
    m = with_window(m, getattr(cfg, "sliding_window", None))
    m.set_embedding(emb.detach().cpu())
    return part.prepare(m, cfg, target, info), info


def with_window(m: Any, window: int | None) -> Any:
    """`m` with sliding window `window` (None: as it is), its weights kept (a window has no
    tensor of its own)."""
    if window is None or m.spec.sliding_window == window:
        return m
    out = m.blank(m.spec.replace(sliding_window=window))
    out.load_canonical(m.canonical_state(with_embedding=True))
    out.embed_loaded = m.embed_loaded
    return out


def _method_warnings(cfg: Any, info: dict | None) -> list[str]:
    """A fine-tune that changes the flags its checkpoint declared ships a drafter the engine
    runs differently from the one it started from: say so."""
    if not info or not info.get("flags_changed"):
        return []
    return [
        f"{cfg.init_from}: the fine-tune changes the checkpoint's flags "
        f"({'; '.join(info['flags_changed'])}); RUN/best declares the new ones and engines "
        "run it with them"
    ]


COVERAGE_WARN = 0.5  # below this share of DATA's loss tokens in the draft vocab: warn


def vocab_coverage(cfg: Any, m: Any, data: Any, progress: Progress | None) -> dict | None:
    """The share of DATA's loss tokens inside the drafter's draft vocabulary (t2d): the most
    a drafter can learn to predict. Below COVERAGE_WARN a "warning" progress event; at 0 a
    refusal (nothing could be learnt). None for a feature store (no DATA)."""
    if data is None:
        return None
    from eagle3kit.data.vocab_counts import loss_token_counts

    counts = loss_token_counts(data, m.spec.vocab_size)  # int64 [V]
    total, inside = int(counts.sum()), int(counts[m.t2d.cpu()].sum())
    if total == 0:
        return None
    frac = inside / total
    cov = {"loss_tokens": total, "in_draft_vocab": inside, "fraction": frac}
    fix = "--rebuild-vocab" if cfg.init_from else "--draft-vocab-size N (built from DATA)"
    vd = m.spec.draft_vocab_size
    if inside == 0:
        raise bad(
            cfg.data,
            f"loss tokens: expected some inside the drafter's draft vocab ({vd} ids), found "
            f"none of {total}; nothing could be learnt: use {fix}",
        )
    if frac < COVERAGE_WARN:
        msg = (
            f"only {frac:.0%} of {cfg.data}'s loss tokens are in the drafter's draft vocab "
            f"({vd} ids): it cannot learn the rest; consider {fix}"
        )
        emit(progress, "warning", 0, None, "", message=msg)
    return cov


def _reference_before(cfg: Any, ctx: Context, data: Any, held: list[int], device: str) -> dict:
    """Accept length of the starting drafter on the old target (--reference-target, run here,
    or --reference-features, its store) and on the new one."""
    if cfg.reference_features:
        old_batches = _reference_store_batches(cfg, ctx, held)
        name = _store_target(cfg.reference_features)
    else:
        if data is None:  # pragma: no cover - _check_options refuses --features with it
            raise Eagle3Error("--reference-target needs --data (the old target runs online)")
        old = _target(cfg, cfg.reference_target, ctx.spec.aux_layers, device)
        src = OnlineSource(data, old, ctx.drafter.d2t.cpu(), max_len=cfg.max_len, topk=cfg.topk)
        old_batches = [src.batch(ch).to(device) for ch in _chunks(held, cfg.eval_batch)]
        name = cfg.reference_target
    k = cfg.ttt_steps
    return {
        "old_batches": old_batches,
        "before": {
            "old": acceptance(ctx.drafter, old_batches, k),
            "new": acceptance(ctx.drafter, ctx.eval_batches, k),
        },
        "target": name,
        "features": cfg.reference_features,
        "k": k,
    }


def _store_target(path: str) -> str | None:
    from eagle3kit.data.store import FeatureStore

    return (FeatureStore(path).manifest.get("target") or {}).get("name_or_path")


def _reference_store_batches(cfg: Any, ctx: Context, held: list[int]) -> list[Any]:
    """The old target's store, the same held-out samples (by id, the same tokens) at the
    drafter's layers, batched as the new store's held-out batches."""
    old = open_store(cfg.reference_features, ctx.drafter.d2t)
    src = OfflineSource(old, max_len=cfg.max_len, layers=ctx.spec.aux_layers)
    new_ids = ctx.source.store.ids
    where = {sid: j for j, sid in enumerate(old.ids)}
    missing = [new_ids[i] for i in held if new_ids[i] not in where]
    if missing:
        raise bad(
            cfg.reference_features,
            f"sample {missing[0]}: expected the held-out samples of --features {cfg.features} "
            f"({len(missing)} missing); capture both stores from one DATA",
        )
    dev = ctx.eval_batches[0].input_ids.device
    out = []
    for ch, new_b in zip(_chunks(held, cfg.eval_batch), ctx.eval_batches, strict=True):
        b = src.batch([where[new_ids[i]] for i in ch]).to(dev)
        if not torch.equal(b.input_ids, new_b.input_ids):
            raise bad(
                cfg.reference_features,
                f"samples {[new_ids[i] for i in ch]}: other tokens than in --features "
                f"{cfg.features}; capture both stores from one DATA",
            )
        out.append(b)
    return out


def reference_after(ctx: Context, best_dir: Path) -> dict[str, Any]:
    """{"target", "before": {"old", "new"}, "after": {"old", "new"}, "tau_walk": {...}}."""
    from eagle3kit.model.loading import load_drafter

    ref = ctx.reference
    dev = ctx.eval_batches[0].input_ids.device
    best = load_drafter(str(best_dir), device=dev).drafter
    best.set_embedding(ctx.drafter.embed_tokens.weight.detach())
    k = ref["k"]
    after = {
        "old": acceptance(best, ref["old_batches"], k),
        "new": acceptance(best, ctx.eval_batches, k),
    }
    before = ref["before"]

    def taus(a: dict[str, Any], name: str) -> dict[str, float]:
        return {x: getattr(a[x], name) for x in ("old", "new")}

    return {  # before/after: every position (the fields runs carried first); also walked
        "target": ref["target"],
        "features": ref.get("features"),
        "before": taus(before, "tau_every_position"),
        "after": taus(after, "tau_every_position"),
        "tau_walk": {"before": taus(before, "tau_walk"), "after": taus(after, "tau_walk")},
    }
