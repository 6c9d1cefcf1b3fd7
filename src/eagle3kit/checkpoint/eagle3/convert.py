"""Load drafter weights in any layout, save them in any layout, and convert between layouts.

convert refuses (Eagle3Error, exit 2, nothing written) what it cannot carry faithfully:
- a drafter with an error checker.check_drafter finds (the checks compat makes of a drafter
  alone): tensor shapes vs the config, a required tensor missing, a broken d2t/t2d pair;
- what the destination cannot represent: flags its drafter layer lacks (layouts.unsupported_by),
  and for the original EAGLE code scaled RoPE, heads x head_dim != hidden_size, and a drafter
  whose embedding EAGLE would not load (see `eagle_refusals`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.eagle3.checker import check_drafter
from eagle3kit.checkpoint.eagle3.layouts import (
    LAYOUTS,
    LossyConversion,
    canonical_to_file,
    config_for,
    mla_model_type,
    sglang_ids,
)
from eagle3kit.checkpoint.eagle3.reader import DrafterHeader, read_drafter
from eagle3kit.checkpoint.engines import cpu as engine_cpu
from eagle3kit.checkpoint.engines import rules as E
from eagle3kit.checkpoint.engines.rules import (
    VLLM_DIRECT_SERVE_SOURCE,
    VLLM_MLA_MODEL_TYPE,
    VLLM_MTP_SOURCE,
)
from eagle3kit.checkpoint.engines.windows import sglang_window_flag
from eagle3kit.checkpoint.io.hub_files import open_target
from eagle3kit.checkpoint.io.safetensors_io import (
    _load_json,
    looks_like_repo_id,
)
from eagle3kit.checkpoint.io.safetensors_write import write_safetensors_sparse
from eagle3kit.checkpoint.io.tensor_read import read_tensor
from eagle3kit.core import registry
from eagle3kit.core.artifacts import stamp
from eagle3kit.core.atomic import atomic_dir, atomic_write_json
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.spec import DraftSpec

# Tensors some trainers save that no engine serves; conversion may drop them.
TRAINING_ONLY = ("verifier_norm.weight", "verifier_lm_head.weight")


# ---------------------------------------------------------------- refusals


def eagle_refusals(spec: DraftSpec, has_embedding: bool) -> list[str]:
    """What the original EAGLE code (SafeAILab, cnets.py) cannot load as written.

    Its drafter layer applies plain RoPE and derives head_dim = hidden_size / heads; it loads
    the target's embedding only when the config has no `target_hidden_size` (so a drafter of
    another width must carry its own embed_tokens)."""
    out = []
    if spec.rope_scaling:
        out.append(
            "rope_scaling: expected none (the EAGLE drafter layer applies plain RoPE), found "
            f"{spec.rope_scaling}"
        )
    if spec.num_attention_heads * spec.head_dim != spec.hidden_size:
        out.append(
            f"num_attention_heads x head_dim: expected hidden_size={spec.hidden_size} (EAGLE "
            "derives head_dim = hidden_size / heads), "
            f"found {spec.num_attention_heads} x {spec.head_dim} = "
            f"{spec.num_attention_heads * spec.head_dim}"
        )
    if spec.target_hidden_size != spec.hidden_size and not has_embedding:
        out.append(
            "embed_tokens.weight: expected in the drafter when "
            f"target_hidden_size={spec.target_hidden_size} != "
            f"hidden_size={spec.hidden_size} (EAGLE then skips the target's embedding), found none"
        )
    return out


def layout_config(
    spec: DraftSpec, layout: str, verifier: str | None = None, family: str | None = None
) -> dict[str, Any]:
    """config_for(), refusing lossy targets; the EAGLE layout carries `target_hidden_size` only
    when it differs from `hidden_size` (EAGLE's loader reads its presence as "do not load the
    target's embedding")."""
    try:
        cfg = config_for(spec, layout, verifier=verifier, family=family)
    except LossyConversion as e:
        raise Eagle3Error(f"refusing a lossy conversion to {layout}: {e}") from e
    if layout == "eagle" and cfg.get("target_hidden_size") == spec.hidden_size:
        del cfg["target_hidden_size"]
    return cfg


# ---------------------------------------------------------------- writing


def save_drafter(
    out: str | Path,
    spec: DraftSpec,
    tensors: dict[str, Any],
    layout: str,
    *,
    verifier: str | None = None,
    overwrite: bool = False,
    family: str | None = None,
) -> dict[str, Any]:
    """Write a servable drafter directory in `layout`; returns the config written. For SGLang
    the ids depend on the target's `family`, read from a local `verifier` when not given.

    Built in a temporary sibling directory and renamed into place (core/atomic.atomic_dir),
    so an existing directory is never left half-written; all-zero runs stay holes."""
    if layout not in LAYOUTS:
        raise Eagle3Error(f"--to: expected one of {', '.join(LAYOUTS)}, found {layout!r}")
    if layout == "sglang" and family is None:  # SGLang's ids depend on the target's family
        family = target_family_of(verifier, spec)[0]
    cfg = layout_config(spec, layout, verifier, family)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise bad(str(out), "expected a new or empty output directory, found one that is not empty")
    if out.exists() and not out.is_dir():
        raise bad(str(out), "expected an output directory, found a file")
    stored = {canonical_to_file(n, layout): t for n, t in tensors.items() if n not in TRAINING_ONLY}
    meta = {"format": "pt", "eagle3kit_layout": layout}
    with atomic_dir(out) as tmp:
        write_safetensors_sparse(tmp / "model.safetensors", stored, meta)
        atomic_write_json(tmp / "config.json", cfg)
    return cfg


def launch_command(layout: str, draft: str, target: str | None, steps: int = 3) -> str:
    """The engine command that serves `draft` in `layout` (SGLang counts one more draft token
    than vLLM; core/registry.py's lines), or how the original EAGLE code loads it."""
    tgt = target or "TARGET_MODEL"
    if layout in ("sglang", "vllm"):
        return registry.launch_lines(registry.DEFAULT, steps, tgt, draft)[layout]
    return registry.eagle_code_line(tgt, draft)


@dataclass
class ConvertResult:
    source: str
    from_layout: str
    to_layout: str
    out: str
    launch: str
    notes: list[str] = field(default_factory=list)
    verifier: str | None = None
    embed_from: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {
            "source": self.source,
            "from": self.from_layout,
            "to": self.to_layout,
            "out": self.out,
            "verifier": self.verifier,
            "embed_from": self.embed_from,
            "launch_command": self.launch,
            "notes": self.notes,
        }
        return stamp(doc, "convert")


def target_embedding(target: str, spec: DraftSpec) -> Any:
    """The target's input embedding [V, H] (safetensors only), checked against the drafter."""
    ckpt = open_target(target)  # partial: only the embedding's shard is read
    names = [n for n in ckpt.names() if n.endswith("embed_tokens.weight")]
    if not names:
        raise bad(
            ckpt.source,
            "embed_tokens.weight: expected the target's input embedding, found no such tensor",
        )
    name = min(names, key=len)  # model.embed_tokens.weight over e.g. mtp copies
    info = ckpt.info(name)
    want = (spec.vocab_size, spec.hidden_size)
    if tuple(info.shape) != want:
        raise bad(
            info.file,
            f"{name}: expected shape {list(want)} (the drafter's vocab_size, hidden_size), found "
            f"{list(info.shape)}",
        )
    return read_tensor(ckpt, name)


def _refuse(src: str, head: DrafterHeader, to: str, embed: bool) -> None:
    """Raise at the first error checker.check_drafter finds (naming how many more), then at
    what the destination cannot represent."""
    spec, names = head.spec, head.names
    errors = [f for f in check_drafter(head) if f.severity == "error"]
    if errors:
        more = (
            f" (and {len(errors) - 1} more problem(s): see `eagle3kit inspect {src}`)"
            if len(errors) > 1
            else ""
        )
        raise bad(errors[0].where or head.tensor_file, errors[0].message + more)
    unknown = [n for n in names if n not in spec.expected_shapes() and n not in TRAINING_ONLY]
    if unknown:
        raise bad(
            src,
            f"refusing a lossy conversion: tensors with no place in the {to} layout: "
            f"{', '.join(sorted(unknown))}",
        )
    if to == "eagle":
        eagle = eagle_refusals(spec, embed)
        if eagle:
            raise bad(
                head.ckpt.config_file,
                f"refusing a conversion the EAGLE code cannot load: {eagle[0]}",
            )


def with_identity_maps(tensors: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """A full-vocab drafter's tensors with identity maps (d2t int64 zeros [V], t2d bool ones
    [V]), the buffers SGLang-layout trainers register; SGLang reads d2t when present
    (hot_token_id = d2t + arange), where the identity changes nothing. With it an SGLang ->
    vLLM -> SGLang round trip gives back the same bytes (`without_identity_maps` inverted)."""
    import torch

    out = dict(tensors)
    out["d2t"] = torch.zeros(vocab_size, dtype=torch.int64)
    out["t2d"] = torch.ones(vocab_size, dtype=torch.bool)
    return out


def without_identity_maps(tensors: dict[str, Any]) -> dict[str, Any]:
    """A full-vocab drafter's tensors without d2t/t2d, as speculators saves one (its
    `DraftVocabMixin._init_vocab` registers no maps when draft_vocab_size == vocab_size, so a
    strict load reports ours as unexpected keys; docs/convert.md). A d2t that permutes the
    ids first moves each lm_head row to its target id: row i -> row i + d2t[i]."""
    import torch

    out = {k: v for k, v in tensors.items() if k not in ("d2t", "t2d")}
    d2t = tensors.get("d2t")
    if d2t is not None and bool(d2t.ne(0).any()):
        head = tensors["lm_head.weight"]  # [V, H], row i predicts target id i + d2t[i]
        target = torch.arange(d2t.shape[0], device=d2t.device) + d2t.long()  # [V]
        moved = torch.empty_like(head)
        moved[target] = head
        out["lm_head.weight"] = moved
    return out


def _notes(spec: DraftSpec, tensors: dict[str, Any], to: str, verifier: str | None) -> list[str]:
    notes: list[str] = []
    dropped = [n for n in tensors if n in TRAINING_ONLY]
    if dropped:
        notes.append(f"dropped training-only tensors: {', '.join(dropped)}")
    if to == "eagle" and spec.aux_layers:
        notes.append(
            "original EAGLE code always captures its default aux layers (2, L//2, L-3); this "
            "drafter was "
            f"trained on HF hidden states {list(spec.aux_layers)} (kept in config as "
            "eagle3kit_aux_layers)"
        )
    notes += _window_notes(spec, to)
    if "embed_tokens.weight" not in tensors:
        notes.append(
            "no embed_tokens: the engine uses the target's embedding (normal; --embed-from TARGET "
            "copies it in)"
        )
    if to == "vllm" and spec.is_mla and mla_model_type(spec, to) != (spec.model_type or ""):
        notes.append(
            f"model_type {spec.model_type or 'deepseek_v3'} written as {VLLM_MLA_MODEL_TYPE}: vLLM "
            "turns a draft config of type deepseek_v3 into its DeepSeek MTP model and refuses "
            f"the file ({VLLM_MTP_SOURCE}); {VLLM_MLA_MODEL_TYPE} is read by the same "
            "DeepseekV3Config"
        )
    if to == "vllm" and not spec.is_mla and verifier and os.path.exists(verifier):
        notes.append(
            "the verifier is a local path: `vllm serve DRAFTER` alone is refused by vLLM >= "
            f"{'.'.join(map(str, E.VLLM_DIRECT_SERVE_SINCE))} (it serves the verifier a "
            "speculators file names only when it is a Hub repo id; "
            f"{VLLM_DIRECT_SERVE_SOURCE}; vLLM 0.21 serves the path); serve it with the "
            "command below"
        )
    if to == "vllm" and not verifier:
        notes.append(
            "no verifier name (none given with --verifier, none in the source): vLLM serves it, "
            "but speculators' "
            "own tooling then cannot load the target"
        )
    return notes


def _window_notes(spec: DraftSpec, to: str) -> list[str]:
    """What a sliding-window drafter's file needs besides its keys (layer_types +
    sliding_window, written in every layout): `compat` has each release's rule."""
    w = spec.sliding_window
    if w is None or spec.is_mla:
        return [f"sliding_window {w}: no engine runs an MLA drafter's window"] if w else []
    if to == "sglang":
        return [
            f"sliding_window {w} kept in config; SGLang reads no window key for an EAGLE-3 "
            f"drafter: serve it with {sglang_window_flag(w)} (see `eagle3kit compat`)"
        ]
    if to == "eagle":
        return [f"sliding_window {w} kept in config; the original EAGLE code has no window"]
    return []


def check_verifier(verifier: str | None) -> None:
    """--verifier names a target: an existing local path or a Hub repo id (`org/name`, read
    only as a name here). A path that is not there is a mistake, not a name to record."""
    if verifier is None or os.path.exists(verifier):
        return
    if looks_like_repo_id(verifier) and not os.path.isdir(verifier.split("/")[0]):
        return
    raise bad(
        "--verifier",
        f"expected an existing local path or a Hub repo id (org/name), found {verifier!r} "
        "(no such file or directory)",
    )


def target_family_of(verifier: str | None, spec: DraftSpec) -> tuple[str | None, str | None]:
    """(family, note): the target family (engines.target_family) from a local verifier's
    config.json; for an MLA drafter without one, DeepSeek/Kimi (MLA drafters serve those);
    else None, with a note when SGLang's ids would differ on a DeepSeek/Kimi target."""
    cfg = Path(verifier) / "config.json" if verifier else None
    if cfg is not None and cfg.is_file():
        doc = _load_json(cfg)
        if not isinstance(doc, dict):
            raise bad(str(cfg), f"expected a JSON object (the target's config), found {doc!r:.60}")
        return E.target_family(doc), None
    if spec.is_mla:
        return "deepseek", None
    if spec.aux_layers and sglang_ids(spec, "llama") != sglang_ids(spec, "deepseek"):
        return None, (
            "ids written for a Llama-family target; for a DeepSeek-V3/Kimi target SGLang reads "
            "them otherwise: pass --verifier TARGET_DIR so convert reads its config"
        )
    return None, None


def convert(
    src: str,
    to: str,
    out: str,
    *,
    verifier: str | None = None,
    embed_from: str | None = None,
    overwrite: bool = False,
) -> ConvertResult:
    """Rewrite drafter `src` in layout `to` at `out`; refuses (nothing written) a defective
    drafter or a conversion the destination cannot represent (module docstring)."""
    if to not in LAYOUTS:
        raise Eagle3Error(f"--to: expected one of {', '.join(LAYOUTS)}, found {to!r}")
    check_verifier(verifier)
    spec, tensors, head = read_drafter(src)
    _refuse(src, head, to, "embed_tokens.weight" in tensors or embed_from is not None)
    if embed_from is not None:
        emb = target_embedding(embed_from, spec)  # [V, H]
        ref = tensors.get("fc.weight")
        tensors["embed_tokens.weight"] = emb.to(ref.dtype) if ref is not None else emb
    verifier = verifier or spec.verifier
    notes = _notes(spec, tensors, to, verifier)
    if to == "vllm" and spec.draft_vocab_size == spec.vocab_size and "d2t" in tensors:
        tensors = without_identity_maps(tensors)
        notes.append(
            "full vocabulary: d2t/t2d left out, as speculators saves a full-vocab drafter "
            "(its strict load would report them as unexpected keys)"
        )
    elif to == "sglang" and spec.draft_vocab_size == spec.vocab_size and "d2t" not in tensors:
        tensors = with_identity_maps(tensors, spec.vocab_size)
        notes.append(
            "full vocabulary: identity d2t/t2d written (SGLang serves it with or without them)"
        )
    if to == "vllm":
        notes += engine_cpu.pairing_refusals(spec, engine_cpu.local_config(verifier))
    family, note = target_family_of(verifier, spec) if to == "sglang" else (None, None)
    notes += [note] if note else []
    save_drafter(out, spec, tensors, to, verifier=verifier, overwrite=overwrite, family=family)
    res = ConvertResult(
        src, head.layout, to, str(out), launch_command(to, str(out), verifier), notes
    )
    res.verifier, res.embed_from = verifier, embed_from
    return res
