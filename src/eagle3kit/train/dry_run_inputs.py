"""What `train --dry-run` reads, from headers only (torch-free: a plan for a Kimi-K2-sized pair
loads no model): the target's config and weight sizes, the drafter's shape (a fresh one sized
for the target, or a warm start's header), the draft vocabulary's size, and the samples'
lengths (DATA's data.json and the shards' offsets, or a feature store's manifest and shards).
From them: the split, the steps and the token counts of the run."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.spec import DraftSpec, default_aux_layers, spec_for_target
from eagle3kit.train.config import TrainConfig, run_split, total_steps

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 4}
BATCH_DRAWS = 256  # batches drawn to estimate the padded length of a step


@dataclass
class Inputs:
    """The run as its headers describe it."""

    method: str
    target: str  # as resolved (a dir, or a hub id)
    target_config: dict[str, Any]
    target_params: int  # elements the target's weights hold (its MTP layers left out)
    target_params_from: str  # "weights" (safetensors headers) or "config" (estimated)
    spec: DraftSpec
    init: str  # "fresh" or the warm start's path
    source: str  # "online" or "offline"
    lengths: list[int]  # tokens of each sample (before --max-len)
    ids: list[str]
    loss_fraction: float  # loss tokens / tokens of DATA (or the store)
    teacher_cols: int  # K: the teacher's columns per token (top-K, or the draft vocab)
    train_idx: list[int] = field(default_factory=list)
    held_idx: list[int] = field(default_factory=list)
    steps: int = 0


def read_inputs(cfg: TrainConfig, method: str) -> Inputs:
    """Everything the plan needs, read from headers; refuses what `train` would refuse before
    its first step (the options, the files), in one line."""
    from eagle3kit.checkpoint.io.hub_files import open_target
    from eagle3kit.zoo import resolve_target

    if not cfg.target:
        raise Eagle3Error("--target: expected the target model (dir or hub id), found none")
    if bool(cfg.data) == bool(cfg.features):
        raise Eagle3Error(
            "expected exactly one of --data DATA (online) or --features STORE (offline)"
        )
    target = resolve_target(cfg.target)
    ckpt = open_target(target)
    conf = ckpt.config.get("text_config") or ckpt.config
    params, where = target_params(ckpt, conf)
    lengths, ids, frac, store = _samples(cfg)
    spec, init = drafter_spec(cfg, conf, store)
    cols = store_teacher_cols(store) if store is not None else teacher_cols(cfg, spec)
    inp = Inputs(
        method=method,
        target=target,
        target_config=conf,
        target_params=params,
        target_params_from=where,
        spec=spec,
        init=init,
        source="offline" if store is not None else "online",
        lengths=lengths,
        ids=ids,
        loss_fraction=frac,
        teacher_cols=cols,
    )
    _split(inp, cfg)
    return inp


def target_params(ckpt: Any, conf: dict[str, Any]) -> tuple[int, str]:
    """(elements of the weights a run loads, "weights"), from the safetensors headers; a
    target given by its config alone (no weight files): (the estimate, "config")."""
    layers = int(conf.get("num_hidden_layers") or 0)
    mtp = tuple(f"model.layers.{i}." for i in range(layers, layers + 8))  # not loaded
    if ckpt.tensors and not ckpt.absent:
        n = sum(math.prod(t.shape) for name, t in ckpt.tensors.items() if not name.startswith(mtp))
        return n, "weights"
    try:
        return config_params(conf), "config"
    except (KeyError, TypeError, ValueError) as e:
        raise bad(ckpt.config_file, f"expected {e} in a config without weight files") from None


def config_params(c: dict[str, Any], *, active: bool = False) -> int:
    """Parameters of a decoder-only target from its config: embedding and head, per layer the
    attention (MLA: DeepSeek-V3's low-rank projections; else GQA) and the MLP (dense, or MoE
    after `first_k_dense_replace` layers: routed and shared experts, the router). `active`:
    those one token runs through (`num_experts_per_tok` of the routed experts)."""
    h, v, n = int(c["hidden_size"]), int(c["vocab_size"]), int(c["num_hidden_layers"])
    heads = int(c.get("num_attention_heads") or 1)
    total = v * h * (1 if c.get("tie_word_embeddings") else 2)
    if c.get("kv_lora_rank"):
        qr, kv = c.get("q_lora_rank"), int(c["kv_lora_rank"])
        nope, rope = int(c.get("qk_nope_head_dim") or 128), int(c.get("qk_rope_head_dim") or 64)
        vd = int(c.get("v_head_dim") or 128)
        q = h * heads * (nope + rope) if not qr else h * qr + qr * heads * (nope + rope)
        attn = q + h * (kv + rope) + kv * heads * (nope + vd) + heads * vd * h
    else:
        hd = int(c.get("head_dim") or h // heads)
        kvh = int(c.get("num_key_value_heads") or heads)
        attn = 2 * h * heads * hd + 2 * h * kvh * hd
    inter = int(c.get("intermediate_size") or 4 * h)
    experts = int(c.get("n_routed_experts") or c.get("num_local_experts") or 0)
    dense_layers = int(c.get("first_k_dense_replace", 0 if experts else n))
    moe_i = int(c.get("moe_intermediate_size") or inter)
    used = int(c.get("num_experts_per_tok") or experts) if active else experts
    moe = 3 * h * moe_i * (used + int(c.get("n_shared_experts") or 0)) + h * experts
    mlp = dense_layers * 3 * h * inter + (n - dense_layers) * (moe if experts else 3 * h * inter)
    return total + n * attn + mlp


def drafter_spec(cfg: TrainConfig, conf: dict[str, Any], store: dict | None) -> tuple[Any, str]:
    """(the drafter's DraftSpec, "fresh" or the warm start): a warm start's header (its vocab
    unless --rebuild-vocab), else `spec_for_target` with the run's vocab and aux layers."""
    vd = draft_vocab_size(cfg, conf, store)
    if cfg.init_from:
        from eagle3kit.checkpoint.eagle3.reader import drafter_header

        spec = drafter_header(cfg.init_from).spec
        if cfg.rebuild_vocab and vd is not None:
            spec = spec.replace(draft_vocab_size=vd)
        return spec.replace(dtype="float32"), str(cfg.init_from)
    layers = int(conf.get("num_hidden_layers") or 0)
    aux = (store or {}).get("drafter_layers") or (store or {}).get("aux_layers")
    aux = tuple(aux) if aux else default_aux_layers(layers)
    spec = spec_for_target(conf, attention=cfg.attention, draft_vocab_size=vd, aux_layers=aux)
    return spec.replace(dtype="float32"), "fresh"


def draft_vocab_size(cfg: TrainConfig, conf: dict[str, Any], store: dict | None) -> int | None:
    """--vocab's size (its d2t's header), --draft-vocab-size, the store's, else None (the
    target's whole vocabulary, or a warm start's own)."""
    if cfg.vocab:
        return _vocab_file_size(cfg.vocab)
    if cfg.draft_vocab_size:
        return int(cfg.draft_vocab_size)
    if store is not None and not cfg.init_from:
        v = store.get("vocab") or {}
        return int(v.get("draft_vocab_size") or conf["vocab_size"])
    return None


def _vocab_file_size(path: str) -> int:
    from eagle3kit.checkpoint.io.headers import read_header_file

    p = Path(path)
    f = p / "model.safetensors" if p.is_dir() else p
    if not f.is_file():
        raise bad(path, "--vocab: expected a vocab file or a drafter directory, found none")
    d2t = read_header_file(f).get("d2t")
    if d2t is None:
        raise bad(str(f), "d2t: expected the draft vocabulary's d2t tensor, found none")
    return int(math.prod(d2t.shape))


def teacher_cols(cfg: TrainConfig, spec: DraftSpec) -> int:
    """Online: the teacher's top-K (--topk), else the whole draft vocabulary."""
    return min(cfg.topk, spec.draft_vocab_size) if cfg.topk else spec.draft_vocab_size


def store_teacher_cols(store: dict) -> int:
    q = store.get("quantisation") or {}
    v = store.get("vocab") or {}
    return int(q.get("topk") or v.get("draft_vocab_size") or 0)


def _samples(cfg: TrainConfig) -> tuple[list[int], list[str], float, dict | None]:
    """(lengths, ids, loss fraction, the store's manifest or None), from DATA's data.json or
    a store's manifest.json and each shard's `offsets` (nothing else of a shard is read)."""
    folder = Path(cfg.features or cfg.data)
    name = "manifest.json" if cfg.features else "data.json"
    doc = _json(folder / name)
    lengths: list[int] = []
    ids: list[str] = []
    for entry in doc.get("shards") or []:
        n, i = _offsets(folder / entry["file"])
        lengths += n
        ids += i
    tokens = sum(lengths) or 1
    loss = doc.get("loss_tokens") or (doc.get("data") or {}).get("loss_tokens")
    frac = float(loss) / tokens if loss else 0.5
    return lengths, ids, min(1.0, frac), doc if cfg.features else None


def _json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except OSError:
        raise bad(str(path.parent), f"expected {path.name}, found none") from None
    except ValueError as e:
        raise bad(str(path), f"expected JSON, found a parse error ({e})") from None
    if not isinstance(doc, dict):
        raise bad(str(path), "expected a JSON object")
    return doc


def _offsets(shard: Path) -> tuple[list[int], list[str]]:
    """(each sample's length, its id) from a shard's offsets tensor and ids metadata."""
    from safetensors import safe_open

    with safe_open(str(shard), framework="numpy") as f:
        off = f.get_tensor("offsets").tolist()
        ids = json.loads((f.metadata() or {}).get("ids") or "[]")
    lengths = [b - a for a, b in zip(off, off[1:], strict=False)]
    return lengths, [str(i) for i in ids] or [str(j) for j in range(len(lengths))]


def _split(inp: Inputs, cfg: TrainConfig) -> None:
    """The run's train and held-out samples (the split `train` makes) and its steps."""
    from eagle3kit.data.split import split_ids

    inp.train_idx, inp.held_idx = run_split(cfg, *split_ids(inp.ids, cfg.heldout, 0))
    inp.steps = total_steps(cfg, len(inp.train_idx))
