"""DSpark configs in both layouts, and the writer from torch tensors under canonical names
(training, warm starts, hand-made fixtures). torch is imported on call only."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.method_write import check_tensors, write_dir
from eagle3kit.core.errors import bad
from eagle3kit.methods.dflash.checkpoint.layout import (
    speculators_config as dflash_speculators_config,
)
from eagle3kit.methods.dflash.checkpoint.layout import speculators_layer_from_zlab, zlab_config
from eagle3kit.methods.dspark.checkpoint.read import METHOD, SPECFORGE_ARCH
from eagle3kit.methods.dspark.checkpoint.spec import DSparkSpec

HEAD_KEYS = (
    "markov_rank",
    "markov_head_type",
    "enable_confidence_head",
    "confidence_head_with_markov",
)
SPECULATORS_ARCH = "DSparkDraftModel"  # what speculators' save_pretrained writes


def heads_of(spec: DSparkSpec) -> dict[str, Any]:
    return {k: getattr(spec, k) for k in HEAD_KEYS}


def speculators_config(
    spec: DSparkSpec, verifier: str | None, layer: dict[str, Any] | None = None
) -> dict[str, Any]:
    """speculators 0.9.0's DSparkSpeculatorConfig for `spec` (sample_from_anchor stated:
    vLLM reads a missing one as false)."""
    cfg = dflash_speculators_config(spec.backbone, verifier, layer)
    cfg["architectures"] = [SPECULATORS_ARCH]
    cfg["speculators_model_type"] = METHOD
    cfg["sample_from_anchor"] = spec.sample_from_anchor
    cfg.update(heads_of(spec))
    cfg["speculators_config"]["algorithm"] = METHOD
    return cfg


def specforge_config(spec: DSparkSpec, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """SpecForge's DSparkDraftModel config for `spec` (configs/qwen3-8b-dspark.json's keys):
    the heads in `dflash_config` beside `projector_type`, `sample_from_anchor` stated at the
    top (SGLang reads it there, default true)."""
    cfg = zlab_config(spec.backbone, copy.deepcopy(base) if base is not None else None)
    cfg["architectures"] = [SPECFORGE_ARCH]
    cfg["model_type"] = cfg.get("model_type", "qwen3")
    cfg["dflash_config"] = {**cfg["dflash_config"], "projector_type": METHOD, **heads_of(spec)}
    cfg["dflash_config"].pop("sample_from_anchor", None)
    cfg["sample_from_anchor"] = spec.sample_from_anchor
    return cfg


def dspark_config(spec: DSparkSpec, verifier: str | None = None) -> dict[str, Any]:
    if spec.layout == "speculators":
        return speculators_config(spec, verifier)
    return specforge_config(spec)


def save_dspark(
    out: str | Path, spec: DSparkSpec, tensors: dict[str, Any], verifier: str | None = None
) -> Path:
    """A DSpark drafter in `spec.layout`: the body and the heads; `lm_head` and d2t/t2d only
    with a reduced vocabulary (a full one borrows the target's, as speculators saves it), never
    `embed_tokens`; SpecForge's layout serves the target's vocabulary only."""
    out = Path(out)
    check_tensors(out, spec, tensors, "save_dspark")
    if spec.layout == "specforge" and spec.has_vocab_map:
        raise bad("save_dspark", "draft_vocab_size: SpecForge's layout has the target's only")
    drop = {"embed_tokens.weight"} | ({"lm_head.weight", "d2t", "t2d"} - _reduced(spec))
    stored = {n: t for n, t in tensors.items() if n not in drop}
    meta = {"eagle3kit_method": METHOD, "eagle3kit_layout": spec.layout}
    write_dir(out, dspark_config(spec, verifier), stored, meta)
    return out


def _reduced(spec: DSparkSpec) -> set[str]:
    return {"lm_head.weight", "d2t", "t2d"} if spec.has_vocab_map else set()


def layer_of_specforge(config: dict[str, Any]) -> dict[str, Any]:
    """The Qwen3 layer keys of a SpecForge config (speculators' converter's rule, DFlash's)."""
    layer = speculators_layer_from_zlab(config)
    for key in ("sample_from_anchor", "model_type"):
        layer.pop(key, None)
    layer["model_type"] = "qwen3"
    return layer
