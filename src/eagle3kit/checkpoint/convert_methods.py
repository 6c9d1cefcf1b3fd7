"""convert for DFlash (z-lab <-> speculators) and P-EAGLE (speculators <-> vLLM native).

Losslessly or refused, nothing written on refusal. Every tensor is copied byte for byte
(raw_tensors.py), so no dtype is changed and a round trip is bit-exact:
- DFlash z-lab -> speculators adds `embed_tokens`/`lm_head` copied from the target
  (`--embed-from TARGET`; refused if its dtype or shape differs from the drafter's), writes
  the ids + 1 (docs/formats.md "DFlash layer ids") and records the two tensors' sha256.
- DFlash speculators -> z-lab drops them only when they are provably the target's (the
  recorded sha256, or `--embed-from TARGET` compared byte for byte); a reduced draft
  vocabulary (d2t) cannot be expressed in z-lab's layout and is refused.
- P-EAGLE: the tensors are the same in both layouts; only the config changes
  (speculators `peagle` <-> the config vLLM's update_peagle builds from it).
The source layout's own keys are stashed under `eagle3kit.converted_from` so converting back
restores the config exactly.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.compat_methods import tensor_findings
from eagle3kit.checkpoint.dflash_layout import (
    speculators_config,
    speculators_layer_from_zlab,
    zlab_config,
    zlab_layer_from_speculators,
)
from eagle3kit.checkpoint.io.hub_files import open_target
from eagle3kit.checkpoint.io.raw_tensors import raw, tensor_sha256, write_raw
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint, TensorInfo
from eagle3kit.checkpoint.methods import MethodHeader
from eagle3kit.core.artifacts import stamp
from eagle3kit.core.atomic import atomic_dir, atomic_write_json
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.method_spec import DFlashSpec, PEagleSpec

METHOD_LAYOUTS = {"dflash": ("zlab", "speculators"), "peagle": ("speculators", "vllm")}
_VOCAB = ("embed_tokens.weight", "lm_head.weight")
# P-EAGLE's drafter fields (vocab, sizes, EAGLE 3.1 norms) that both layouts keep at top level
_DRAFTER_KEYS = (
    "draft_vocab_size",
    "target_hidden_size",
    "norm_before_residual",
    "norm_before_fc",
    "fc_norm",
    "norm_output",
)
# keys of a vLLM-native P-EAGLE config that are not the Llama/Qwen3 layer's
_NATIVE_KEYS = (
    "architectures",
    *_DRAFTER_KEYS,
    "pard_token",
    "ptd_token_id",
    "mask_token_id",
    "eagle_aux_hidden_state_layer_ids",
    "eagle3kit",
)


def launch_commands(method: str, layout: str, draft: str, target: str | None, k: int) -> dict:
    """{engine: command} for the engines that serve this drafter
    (docs/formats.md "Newer methods: engine rules"): vLLM `method: dflash`, or `eagle3`
    with `parallel_drafting`; SGLang `--speculative-algorithm DFLASH` (z-lab layout only;
    num-draft-tokens = block)."""
    tgt = target or "TARGET_MODEL"
    if method == "dflash":
        vllm = f'{{"method": "dflash", "model": "{draft}", "num_speculative_tokens": {k}}}'
        out = {"vllm": f"vllm serve {tgt} --speculative-config '{vllm}'"}
        if layout == "zlab":
            out["sglang"] = (
                f"python -m sglang.launch_server --model-path {tgt} --speculative-algorithm "
                f"DFLASH --speculative-draft-model-path {draft} --speculative-num-draft-tokens "
                f"{k + 1}"
            )
        return out
    cfg = (
        f'{{"method": "eagle3", "model": "{draft}", "num_speculative_tokens": {k}, '
        f'"parallel_drafting": true}}'
    )
    return {"vllm": f"vllm serve {tgt} --speculative-config '{cfg}'"}


@dataclass
class MethodConvertResult:
    source: str
    method: str
    from_layout: str
    to_layout: str
    out: str
    launch: dict[str, str]
    notes: list[str] = field(default_factory=list)
    embed_from: str | None = None

    def to_json(self) -> dict[str, Any]:
        return stamp(
            {
                "source": self.source,
                "method": self.method,
                "from": self.from_layout,
                "to": self.to_layout,
                "out": self.out,
                "embed_from": self.embed_from,
                "launch_commands": self.launch,
                "notes": self.notes,
            },
            "convert",
        )


def _target_vocab(target: str, spec: DFlashSpec, dtype: str) -> dict[str, TensorInfo]:
    """The target's input embedding and lm_head (the embedding when tied), checked."""
    ckpt = open_target(target)
    names = ckpt.names()
    emb = [n for n in names if n.endswith("embed_tokens.weight")]
    if not emb:
        raise bad(ckpt.source, "embed_tokens.weight: expected the target's input embedding")
    head = "lm_head.weight" if "lm_head.weight" in names else min(emb, key=len)
    found = {"embed_tokens.weight": ckpt.info(min(emb, key=len)), "lm_head.weight": ckpt.info(head)}
    want = (spec.vocab_size, spec.hidden_size)
    for info in found.values():
        if tuple(info.shape) != want or info.dtype != dtype:
            raise bad(
                info.file,
                f"{info.name}: expected {dtype} {list(want)} (the drafter's "
                f"dtype, vocab_size, hidden_size), found {info.dtype} {list(info.shape)}",
            )
        if not Path(info.file).is_file():
            raise bad(info.file, f"{info.name}: the target's shard must be a local file")
    return found


def _body(head: MethodHeader) -> dict[str, TensorInfo]:
    return {c: head.ckpt.tensors[s] for c, s in head.names.items()}


def _stash(cfg: dict[str, Any], layout: str, src_cfg: dict[str, Any], **extra: Any) -> None:
    """Record the source config (minus an older stash) so converting back restores it."""
    src = copy.deepcopy(src_cfg)
    ours = src.get("eagle3kit") if isinstance(src.get("eagle3kit"), dict) else {}
    ours.pop("converted_from", None)
    if not ours:
        src.pop("eagle3kit", None)
    keep = {k: v for k, v in ours.items() if k != "vocab_from_target"}
    cfg["eagle3kit"] = {**keep, **extra, "converted_from": {"layout": layout, "config": src}}


def _restored(cfg: dict[str, Any], to: str) -> dict[str, Any] | None:
    """The config this file was converted from, when it was in layout `to`."""
    stash = (cfg.get("eagle3kit") or {}).get("converted_from") or {}
    return copy.deepcopy(stash["config"]) if stash.get("layout") == to else None


def _zlab_to_speculators(head: MethodHeader, embed_from: str | None, verifier: str | None):
    spec = head.spec
    assert isinstance(spec, DFlashSpec)
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
    body = _body(head)
    dtype = body["fc.weight"].dtype
    vocab = _target_vocab(embed_from, spec, dtype)
    cfg = speculators_config(
        spec, verifier or embed_from, speculators_layer_from_zlab(head.ckpt.config)
    )
    sums = {c: tensor_sha256(i) for c, i in vocab.items()}
    _stash(cfg, "zlab", head.ckpt.config, vocab_from_target={"target": embed_from, **sums})
    tensors = [raw(i, c) for c, i in body.items()] + [raw(i, c) for c, i in vocab.items()]
    notes = [
        f"embed_tokens and lm_head copied from {embed_from} ({dtype})",
        f"aux_hidden_state_layer_ids {list(spec.speculators_ids)} = z-lab ids "
        f"{list(spec.target_layer_ids)} + 1",
    ]
    return cfg, tensors, notes


def _vocab_is_targets(head: MethodHeader, embed_from: str | None) -> str:
    """Why dropping embed_tokens/lm_head loses nothing, or raise."""
    spec = head.spec
    assert isinstance(spec, DFlashSpec)
    body = _body(head)
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
    spec = head.spec
    assert isinstance(spec, DFlashSpec)
    if spec.draft_vocab_size != spec.vocab_size or "d2t" in head.names:
        raise bad(
            head.ckpt.config_file,
            f"draft_vocab_size: {spec.draft_vocab_size} of "
            f"{spec.vocab_size} (a vocab map); z-lab's layout has only the target's head",
        )
    why = _vocab_is_targets(head, embed_from)
    base = _restored(head.ckpt.config, "zlab")
    cfg = base or zlab_config(spec, zlab_layer_from_speculators(head.ckpt.config))
    if base is None:
        _stash(cfg, "speculators", head.ckpt.config)
    drop = (*_VOCAB, "t2d")
    tensors = [raw(i, c) for c, i in _body(head).items() if c not in drop]
    return cfg, tensors, [f"embed_tokens and lm_head dropped: {why}"]


def _native_config(head: MethodHeader) -> dict[str, Any]:
    """The config vLLM's update_peagle builds from a speculators `peagle` one."""
    spec, src = head.spec, head.ckpt.config
    assert isinstance(spec, PEagleSpec)
    layer = copy.deepcopy(src.get("transformer_layer_config") or {})
    qwen = layer.get("model_type") == "qwen3"
    cfg = {
        **layer,
        "architectures": ["PeagleQwen3ForCausalLM" if qwen else "PeagleLlamaForCausalLM"],
    }
    for k in _DRAFTER_KEYS:
        if src.get(k) is not None:
            cfg[k] = src[k]
    cfg["pard_token"] = spec.mask_token_id
    if src.get("eagle_aux_hidden_state_layer_ids"):
        cfg["eagle_aux_hidden_state_layer_ids"] = src["eagle_aux_hidden_state_layer_ids"]
    return cfg


def _speculators_peagle_config(head: MethodHeader, verifier: str | None) -> dict[str, Any]:
    spec, src = head.spec, head.ckpt.config
    assert isinstance(spec, PEagleSpec)
    layer = {k: copy.deepcopy(v) for k, v in src.items() if k not in _NATIVE_KEYS}
    k = spec.num_speculative_tokens or 3
    return {
        "architectures": ["PEagleSpeculator"],
        "speculators_model_type": "peagle",
        "transformer_layer_config": layer,
        **{f: src[f] for f in _DRAFTER_KEYS if f in src},
        "eagle_aux_hidden_state_layer_ids": list(spec.draft.aux_layers or []) or None,
        "mask_token_id": spec.mask_token_id,
        "embed_requires_grad": True,
        "speculators_config": {
            "algorithm": "peagle",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": k}],
            "verifier": {"name_or_path": verifier or spec.draft.verifier, "architectures": []},
        },
    }


def _peagle(head: MethodHeader, to: str, verifier: str | None):
    base = _restored(head.ckpt.config, to)
    if base is None:
        cfg = _native_config(head) if to == "vllm" else _speculators_peagle_config(head, verifier)
        _stash(cfg, head.layout, head.ckpt.config)
    else:
        cfg = base
    # mask_hidden's values as they are; its shape as each layout writes it: speculators
    # [1, 1, n x H_target] (a Parameter), vLLM-native [1, n x H_target] (NeMo AutoModel PR
    # #2376 writes that; vLLM loads either with view(1, -1))
    shape = {"vllm": (1, -1), "speculators": (1, 1, -1)}[to]
    tensors = []
    for name, info in head.ckpt.tensors.items():
        view = tuple(info.numel if d == -1 else d for d in shape) if name == "mask_hidden" else None
        tensors.append(raw(info, shape=view))
    return cfg, tensors, [f"tensors unchanged ({len(tensors)}); config rewritten for {to}"]


def convert_method(
    head: MethodHeader,
    to: str,
    out: str,
    *,
    embed_from: str | None = None,
    verifier: str | None = None,
) -> MethodConvertResult:
    """Rewrite a DFlash or P-EAGLE drafter (`head`, from methods.py) in layout `to` at `out`."""
    layouts = METHOD_LAYOUTS[head.method]
    if to not in layouts:
        raise Eagle3Error(
            f"--to: a {head.method} drafter converts to {' or '.join(layouts)}, found {to!r}"
        )
    if to == head.layout:
        raise Eagle3Error(f"--to {to}: {head.source} is already in that layout")
    _local(head.ckpt)
    defects = [f for f in tensor_findings(head) if f.severity == "error"]
    if defects:
        more = (
            f" (and {len(defects) - 1} more: run `eagle3kit inspect`)" if len(defects) > 1 else ""
        )
        raise bad(head.ckpt.config_file, defects[0].message + more)
    if head.method == "dflash":
        fn = _zlab_to_speculators if to == "speculators" else _speculators_to_zlab
        cfg, tensors, notes = (
            fn(head, embed_from, verifier) if to == "speculators" else fn(head, embed_from)
        )
        spec = head.spec
        assert isinstance(spec, DFlashSpec)
        k = spec.num_proposals
    else:
        cfg, tensors, notes = _peagle(head, to, verifier)
        k = head.spec.num_speculative_tokens or 3  # type: ignore[union-attr]
    _write(Path(out), cfg, tensors, head.method, to)
    spec = head.spec
    known = spec.verifier if isinstance(spec, DFlashSpec) else spec.draft.verifier
    launch = launch_commands(head.method, to, str(out), verifier or embed_from or known, k)
    return MethodConvertResult(
        head.source, head.method, head.layout, to, str(out), launch, notes, embed_from
    )


def _local(ckpt: Checkpoint) -> None:
    if ckpt.repo_id is not None:
        raise bad(ckpt.source, "convert reads a local drafter directory (download it first)")


def _write(out: Path, cfg: dict[str, Any], tensors: list, method: str, layout: str) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise bad(str(out), "expected a new or empty output directory, found one that is not empty")
    meta = {"format": "pt", "eagle3kit_method": method, "eagle3kit_layout": layout}
    with atomic_dir(out) as tmp:
        write_raw(tmp / "model.safetensors", tensors, meta)
        atomic_write_json(tmp / "config.json", cfg)
