"""Offline acceptance of a DFlash block drafter on held-out answers (`eval` without --online).

For each held-out sample (tokens x_t, answer mask m_t) the drafter runs once with a block at
every answer position a (one pass, block mask: block a sees the target's states of t < a and
itself, so each block's drafts are exactly what decoding at a would propose). Its run r_a is
the number of leading drafts d_k (slot k guesses x_{a+k}) equal to the target's greedy token
there (the target's argmax at a+k-1); a draft past the sample's end is a miss.

    walked cycles   a_0 = the first answer position, a_{c+1} = a_c + r_{a_c} + 1, while a_c is
                    an answer position before the last: on an answer the target wrote
                    itself by greedy decoding, the cycles online block decoding goes through
                    tau_walk = mean(r + 1), per-position acceptance P(r ≥ i)
    every position  every answer position as a cycle start (`all_positions`):
                    tau_every_position = 1 + Σ_i P(r ≥ i)

The JSON carries the names `eval` uses for EAGLE-3 drafters, with "method": "dflash".
`eval --features STORE` (`evaluate_store_dflash`) reads the same features from a store that
holds the drafter's target layers: no target is run, only its embedding/lm_head read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.artifacts import few_sequences, stamp
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.progress import Progress, emit
from eagle3kit.methods.dflash.train.step import block_logits, blocks_at
from eagle3kit.plan.forecast import conditional

if TYPE_CHECKING:
    from eagle3kit.methods.dflash.model import DFlashDrafter
    from eagle3kit.model.target import TargetModel

CHUNK = 64  # anchors per pass (bounds the block mask's size)


def _runs(
    target: TargetModel, drafter: DFlashDrafter, ids: torch.Tensor, lm: torch.Tensor, runs_from
) -> torch.Tensor:
    """r_a for every position a of one sample ([T], -1 where a is no answer position)."""
    from eagle3kit.data.features import compute_features

    t = ids.shape[0]
    d2t = torch.zeros(target.vocab_size, dtype=torch.long)
    am = torch.ones(1, t, dtype=torch.bool)
    feats = compute_features(target, ids[None], am, lm[None].bool(), d2t)
    return runs_from(drafter, feats, lm)


def _runs_from(drafter: DFlashDrafter, feats: Any, lm: torch.Tensor) -> torch.Tensor:
    """r_a from one sample's features (the target's states at the drafter's layers and its
    greedy tokens), computed online or read from a feature store."""
    b, t = drafter.spec.block_size, lm.shape[0]
    dev = next(drafter.parameters()).device
    feats = feats.to(dev)
    feats.loss_mask = torch.ones_like(feats.loss_mask)  # count slots up to the sample's end
    runs = torch.full((t,), -1, dtype=torch.long)
    pos = lm.nonzero().view(-1)
    for i in range(0, pos.numel(), CHUNK):
        anchors = pos[i : i + CHUNK][None].to(dev)
        real = torch.ones_like(anchors, dtype=torch.bool)
        blocks = blocks_at(feats, anchors, real, b, drafter.spec.mask_token_id)
        logits = block_logits(drafter, feats, blocks)
        hit_ok = blocks.valid[:, :, 1:]  # slots inside the sample
        prev = (blocks.src - 1).clamp(min=0)
        want = feats.target_argmax.gather(1, prev.view(1, -1)).view_as(prev)
        hit = (logits.argmax(-1) == want)[:, :, 1:] & hit_ok
        runs[anchors[0].cpu()] = hit.long().cumprod(-1).sum(-1)[0].cpu()
    return runs


def _walk(runs: torch.Tensor) -> list[int]:
    """The cycles' runs r along the walk a_{c+1} = a_c + r + 1 over answer positions."""
    pos = (runs >= 0).nonzero().view(-1)
    out, a = [], int(pos[0]) if pos.numel() else runs.numel()
    while a < runs.numel() - 1 and runs[a] >= 0:  # a cycle emits at least x_{a+1}
        out.append(int(runs[a]))
        a += int(runs[a]) + 1
    return out


def _depth(drafter: DFlashDrafter, depth: int | None) -> int:
    k = drafter.spec.num_proposals if depth is None else min(depth, drafter.spec.num_proposals)
    if k < 1:
        raise Eagle3Error(f"depth: expected draft steps >= 1, found {k}")
    return k


def evaluate_offline_dflash(
    target: TargetModel,
    drafter: DFlashDrafter,
    data: Any,
    depth: int | None = None,
    *,
    progress: Progress | None = None,
    runs_from: Callable[[Any, Any, torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, Any]:
    """`eval`'s offline document for a DFlash drafter (module docstring); `runs_from(drafter,
    feats, answer_mask)`: a block-drafter variant's own r_a of one sample, drafted its way
    (default DFlash's: its blocks' argmax)."""
    k = _depth(drafter, depth)
    walked, every = [], []
    with torch.no_grad():
        for j, (ids, lm) in enumerate(data.samples):
            runs = _runs(target, drafter, ids, lm, runs_from or _runs_from).clamp(max=k)
            walked += _walk(runs)
            every += [int(r) for r in runs[runs >= 0]]
            emit(progress, "offline eval", j + 1, len(data.samples), "samples")
    if not walked:
        raise Eagle3Error(f"{data.source}: no answer tokens to evaluate on")
    return stamp(_doc(drafter, k, walked, every, len(data.samples), len(data.skipped)), "eval")


def _doc(drafter: DFlashDrafter, k: int, walked: list[int], every: list[int], n: int, skipped: int):
    w, e = torch.tensor(walked), torch.tensor(every)
    acc_w = [float((w >= i).float().mean()) for i in range(1, k + 1)]
    acc_e = [float((e >= i).float().mean()) for i in range(1, k + 1)]
    tau_walk, tau_every = float((w + 1).float().mean()), 1.0 + sum(acc_e)
    return {
        "mode": "offline",
        "method": drafter.method,
        "depth": k,
        "block_size": drafter.spec.block_size,
        "tau_walk": tau_walk,
        "tau_every_position": tau_every,
        "per_position_acceptance": acc_w,
        "conditional_acceptance": conditional(acc_w),
        "cycles": len(walked),
        "all_positions": {
            "tau_every_position": tau_every,
            "per_position_acceptance": acc_e,
            "conditional_acceptance": conditional(acc_e),
            "counted": len(every),
        },
        "samples": n,
        "skipped": skipped,
        "warnings": few_sequences(n, "offline acceptance"),
    }


# ---------------------------------------------------------------- from a feature store


def is_dflash_checkpoint(path: str) -> bool:
    """Whether `path` (a local folder or hub id) holds a DFlash drafter (config only)."""
    from eagle3kit.checkpoint.io.safetensors_io import load_checkpoint
    from eagle3kit.methods.dflash.checkpoint.layout import is_dflash_config

    return is_dflash_config(load_checkpoint(path).config)


def target_io(src: str, spec: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's input embedding and lm_head (the embedding when tied), read by header
    from `src` and checked against the drafter: what a z-lab drafter borrows."""
    from eagle3kit.checkpoint.io.hub_files import open_target
    from eagle3kit.checkpoint.io.tensor_read import read_tensor

    ckpt = open_target(src)
    names = ckpt.names()
    emb = [n for n in names if n.endswith("embed_tokens.weight")]
    if not emb:
        raise bad(ckpt.source, "embed_tokens.weight: expected the target's input embedding")
    heads = [n for n in names if n.endswith("lm_head.weight")]
    out = []
    for name in (min(emb, key=len), min(heads or emb, key=len)):
        info = ckpt.info(name)
        if tuple(info.shape) != (spec.vocab_size, spec.hidden_size):
            raise bad(
                info.file,
                f"{name}: expected shape {[spec.vocab_size, spec.hidden_size]} (the drafter's "
                f"vocab_size, hidden_size), found {list(info.shape)}",
            )
        out.append(read_tensor(ckpt, name))
    return out[0], out[1]


def evaluate_store_dflash(
    drafter: str,
    features: str,
    depth: int | None = None,
    *,
    target: str | None = None,
    heldout: float | int | None = None,
    device: str = "cpu",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """`eval --features STORE` for a DFlash drafter: the store must hold the drafter's target
    layers (h-indices = z-lab ids + 1) and the target's greedy tokens; a z-lab drafter gets
    the target's embedding and lm_head by header (`target`, default the store's)."""
    from eagle3kit.measure import store_features as S
    from eagle3kit.methods.dflash.model import DFlashDrafter

    store = S.open_store(features)
    d = DFlashDrafter.from_pretrained(drafter, device=device, dtype=torch.float32)
    if not d.embed_loaded:
        src = target or (store.manifest.get("target") or {}).get("name_or_path")
        if not src:
            raise bad("--target", "a z-lab DFlash drafter borrows the target's embedding/head")
        emb, head = target_io(str(src), d.spec)
        d.target_io = (emb.to(device, torch.float32), head.to(device, torch.float32))
    d = d.eval().requires_grad_(False)
    rows, how = S.held_rows(store, heldout)
    layers, k = list(d.spec.aux_layers), _depth(d, depth)
    walked, every = [], []
    with torch.no_grad():
        for j, row in enumerate(rows):
            f = S.features(store, [row], layers, d, str(features), chunk=1)[0]
            n = int(f.attention_mask.sum())
            f = replace(f, **{x.name: getattr(f, x.name)[:, :n] for x in fields(f)})
            runs = _runs_from(d, f, f.loss_mask[0].cpu()).clamp(max=k)
            walked += _walk(runs)
            every += [int(r) for r in runs[runs >= 0]]
            emit(progress, "offline eval", j + 1, len(rows), "samples")
    if not walked:
        raise Eagle3Error(f"{features}: no answer tokens to evaluate on")
    doc = _doc(d, k, walked, every, len(rows), 0)
    doc.update(source=str(features), aux_layers=layers, heldout=how)
    return stamp(doc, "eval")
