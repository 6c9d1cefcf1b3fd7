"""convert of a DFlash drafter between z-lab's and speculators' layouts (the steps every
method shares are checkpoint/method_convert.py's):
- z-lab -> speculators adds `embed_tokens`/`lm_head` copied from the target (`--embed-from
  TARGET`; refused if its dtype or shape differs from the drafter's), writes the ids + 1
  (docs/formats.md "DFlash layer ids") and records the two tensors' sha256.
- speculators -> z-lab drops them only when they are provably the target's (the recorded
  sha256, or `--embed-from TARGET` compared byte for byte); a reduced draft vocabulary (d2t)
  cannot be expressed in z-lab's layout and is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.io.hub_files import open_target
from eagle3kit.checkpoint.io.raw_tensors import (
    RawTensor,
    cast_raw,
    raw,
    tensor_sha256,
    tensor_sha256_span,
)
from eagle3kit.checkpoint.io.safetensors_io import TensorInfo
from eagle3kit.checkpoint.method_convert import body as body_of
from eagle3kit.checkpoint.method_convert import restored, stash
from eagle3kit.checkpoint.methods import MethodHeader
from eagle3kit.core import registry
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.methods.dflash.checkpoint.layout import (
    DFLASH_LAYOUTS,
    speculators_config,
    speculators_layer_from_zlab,
    zlab_config,
    zlab_layer_from_speculators,
)
from eagle3kit.methods.dflash.checkpoint.spec import DFlashSpec

LAYOUTS = DFLASH_LAYOUTS
_VOCAB = ("embed_tokens.weight", "lm_head.weight")


def convert_to(
    head: MethodHeader,
    to: str,
    *,
    embed_from: str | None,
    verifier: str | None,
    dtype: str | None = None,
) -> tuple[dict[str, Any], list[Any], list[str]]:
    """(config, raw tensors, notes) of the drafter in layout `to`; `dtype`: the drafter's
    dtype, when a target stored in another may be cast to it (`convert --dtype`)."""
    if to == "speculators":
        return _zlab_to_speculators(head, embed_from, verifier, dtype)
    return _speculators_to_zlab(head, embed_from)


def launch_commands(spec: DFlashSpec, layout: str, draft: str, target: str | None) -> dict:
    """{engine: command} for the engines that serve this layout
    (docs/formats.md "Newer methods: engine rules"): vLLM either; SGLang z-lab's only; K = the
    block's proposals."""
    lines = registry.launch_lines("dflash", spec.num_proposals, target or "TARGET_MODEL", draft)
    served = ("vllm", "sglang") if layout == "zlab" else ("vllm",)
    return {e: lines[e] for e in served if lines[e]}


def _target_vocab(
    target: str, spec: DFlashSpec, dtype: str, cast: bool = False
) -> dict[str, TensorInfo]:
    """The target's input embedding and lm_head (the embedding when tied), checked; another
    dtype than the drafter's only when `cast` (`convert --dtype`)."""
    ckpt = open_target(target)
    names = ckpt.names()
    emb = [n for n in names if n.endswith("embed_tokens.weight")]
    if not emb:
        raise bad(ckpt.source, "embed_tokens.weight: expected the target's input embedding")
    head = "lm_head.weight" if "lm_head.weight" in names else min(emb, key=len)
    found = {"embed_tokens.weight": ckpt.info(min(emb, key=len)), "lm_head.weight": ckpt.info(head)}
    want = (spec.vocab_size, spec.hidden_size)
    for info in found.values():
        if tuple(info.shape) != want or (info.dtype != dtype and not cast):
            hint = " (pass --dtype auto to cast it)" if tuple(info.shape) == want else ""
            raise bad(
                info.file,
                f"{info.name}: expected {dtype} {list(want)} (the drafter's "
                f"dtype, vocab_size, hidden_size), found {info.dtype} {list(info.shape)}{hint}",
            )
        if not Path(info.file).is_file():
            raise bad(info.file, f"{info.name}: the target's shard must be a local file")
    return found


def _borrowed(vocab: dict[str, TensorInfo], dtype: str) -> tuple[list, list[str]]:
    """The target's tensors as the drafter's file holds them: their bytes, or cast to the
    drafter's dtype (said in a note)."""
    out, notes = [], []
    for c, i in vocab.items():
        if i.dtype == dtype:
            out.append(raw(i, c))
        else:
            out.append(cast_raw(i, dtype, c))
            notes.append(f"{c} cast from the target's {i.dtype} to the drafter's {dtype}")
    return out, notes


def _zlab_to_speculators(
    head: MethodHeader, embed_from: str | None, verifier: str | None, cast: str | None
):
    spec: DFlashSpec = head.spec
    if embed_from is None:
        raise Eagle3Error(
            "--embed-from TARGET: needed (speculators' layout carries the "
            "target's embed_tokens and lm_head; z-lab's borrows them)"
        )
    if spec.input_embedding_scale != 1.0:
        raise bad(
            head.ckpt.config_file,
            f"dflash_config.input_embedding_scale: {spec.input_embedding_scale} (speculators' "
            "DFlash config has no such field; converting would drop it), expected 1.0",
        )
    body = body_of(head)
    dtype = body["fc.weight"].dtype
    vocab = _target_vocab(embed_from, spec, dtype, cast is not None)
    cfg = speculators_config(
        spec, verifier or embed_from, speculators_layer_from_zlab(head.ckpt.config)
    )
    borrowed, casts = _borrowed(vocab, dtype)
    sums = {t.name: _sha256_of(t) for t in borrowed}
    stash(cfg, "zlab", head.ckpt.config, vocab_from_target={"target": embed_from, **sums})
    tensors = [raw(i, c) for c, i in body.items()] + borrowed
    notes = [
        f"embed_tokens and lm_head copied from {embed_from} ({dtype})",
        *casts,
        f"aux_hidden_state_layer_ids {list(spec.speculators_ids)} = z-lab ids "
        f"{list(spec.target_layer_ids)} + 1",
    ]
    return cfg, tensors, notes


def _sha256_of(t: RawTensor) -> str:
    """sha256 of an output tensor's bytes (a cast's made in memory, else the span's)."""
    import hashlib

    if t.data is not None:
        return hashlib.sha256(t.data).hexdigest()
    return tensor_sha256_span(t.file, t.start, t.end)


def _vocab_is_targets(head: MethodHeader, embed_from: str | None) -> str:
    """Why dropping embed_tokens/lm_head loses nothing, or raise."""
    spec: DFlashSpec = head.spec
    body = body_of(head)
    have = {c: tensor_sha256(body[c]) for c in _VOCAB if c in body}
    if embed_from is not None:
        want = {
            c: tensor_sha256(i)
            for c, i in _target_vocab(embed_from, spec, body["fc.weight"].dtype).items()
        }
        why = f"they equal {embed_from}'s byte for byte"
    else:
        rec = (head.ckpt.config.get("eagle3kit") or {}).get("vocab_from_target") or {}
        want = {c: rec.get(c) for c in _VOCAB}
        why = f"they are {rec.get('target')}'s (sha256 recorded when converted)"
    diff = [c for c in have if have[c] != want.get(c)]
    if diff:
        src = embed_from or "the sha256 recorded at conversion (none: pass --embed-from TARGET)"
        raise bad(
            head.ckpt.config_file,
            f"{', '.join(diff)}: differ from {src}; z-lab's layout "
            "uses the target's, so dropping them would change the drafter",
        )
    return why


def _speculators_to_zlab(head: MethodHeader, embed_from: str | None):
    spec: DFlashSpec = head.spec
    if spec.draft_vocab_size != spec.vocab_size or "d2t" in head.names:
        raise bad(
            head.ckpt.config_file,
            f"draft_vocab_size: {spec.draft_vocab_size} of "
            f"{spec.vocab_size} (a vocab map); z-lab's layout has only the target's head",
        )
    why = _vocab_is_targets(head, embed_from)
    base = restored(head.ckpt.config, "zlab")
    cfg = base or zlab_config(spec, zlab_layer_from_speculators(head.ckpt.config))
    if base is None:
        stash(cfg, "speculators", head.ckpt.config)
    drop = (*_VOCAB, "t2d")
    tensors = [raw(i, c) for c, i in body_of(head).items() if c not in drop]
    return cfg, tensors, [f"embed_tokens and lm_head dropped: {why}"]
