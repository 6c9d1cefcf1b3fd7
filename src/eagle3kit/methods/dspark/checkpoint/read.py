"""The one reader of DSpark drafters, from config.json and the safetensors headers (the
tensors too for `read_dspark`), in both layouts (docs/dspark.md "Checkpoints"):

- "speculators" (speculators 0.9.0 `DSparkSpeculatorConfig`, `speculators_model_type: "dspark"`):
  the DFlash speculators config (methods/dflash/checkpoint/layout.py reads it) plus top-level
  `markov_rank` (default 256), `markov_head_type` ("vanilla"), `enable_confidence_head` (true),
  `confidence_head_with_markov` (true); `sample_from_anchor` (its class default, true, when
  the file does not state it; vLLM's `update_dspark` reads a missing one as false, so our
  writer always states it).
- "specforge" (SpecForge `DSparkDraftModel`, configs/qwen3-8b-dspark.json): a Qwen3 config with
  `architectures: ["DSparkDraftModel"]`, `block_size`, and `dflash_config.{projector_type:
  "dspark", mask_token_id, target_layer_ids (z-lab's: layer outputs), markov_rank (default 0),
  markov_head_type, enable_confidence_head (default: confidence_head_alpha > 0),
  confidence_head_with_markov (false)}`; SpecForge drafts the block's B - 1 mask slots, SGLang
  reads a top-level `sample_from_anchor` (default true: sglang 0.5.23
  speculative/dspark_components/dspark_config.py), so a file that states it wins, else false.
Canonical tensor names: DFlash's, `markov_head.*`, `confidence_head.*`; SpecForge's older
`logit_head.` container is read as the heads' own (its `normalize_draft_head_checkpoint_keys`).
"""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.io.fields import config_value as _get
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.checkpoint.io.tensor_read import read_tensors
from eagle3kit.checkpoint.methods import MethodHeader, local, opened
from eagle3kit.core.errors import bad
from eagle3kit.methods.dflash.checkpoint.layout import read_dflash_config
from eagle3kit.methods.dspark.checkpoint.spec import HEAD_TYPES, DSparkSpec

METHOD = "dspark"
SPECFORGE_ARCH = "DSparkDraftModel"
# speculators' DSparkSpeculatorConfig defaults; SpecForge's DSparkDraftModel defaults
SPECULATORS_HEADS = dict(
    markov_rank=256,
    markov_head_type="vanilla",
    enable_confidence_head=True,
    confidence_head_with_markov=True,
)


def is_dspark_config(cfg: dict[str, Any]) -> bool:
    dfc = cfg.get("dflash_config") if isinstance(cfg.get("dflash_config"), dict) else {}
    return cfg.get("speculators_model_type") == METHOD or dfc.get("projector_type") == METHOD


def _canonical(name: str) -> str:
    name = name[len("model.") :] if name.startswith("model.") else name
    return name[len("logit_head.") :] if name.startswith("logit_head.") else name


def _heads(cfg: dict[str, Any], where: str, specforge: bool) -> dict[str, Any]:
    src = dict(cfg.get("dflash_config") or {}) if specforge else cfg
    where = f"{where}: dflash_config" if specforge else where
    rank = src.get("markov_rank", 0 if specforge else SPECULATORS_HEADS["markov_rank"])
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        raise bad(where, f"markov_rank: expected an int >= 0, found {rank!r}")
    kind = src.get("markov_head_type", "vanilla")
    if kind not in HEAD_TYPES:
        raise bad(where, f"markov_head_type: expected one of {HEAD_TYPES}, found {kind!r}")
    alpha = _get(src, "confidence_head_alpha", where, (int, float), 0.0)
    conf_default = alpha > 0 if specforge else True
    with_default = not specforge
    return dict(
        markov_rank=rank,
        markov_head_type=kind,
        enable_confidence_head=_get(src, "enable_confidence_head", where, bool, conf_default),
        confidence_head_with_markov=_get(
            src, "confidence_head_with_markov", where, bool, with_default
        ),
    )


def dspark_header(where: str | Checkpoint) -> MethodHeader:
    """Layout, DSparkSpec and canonical names of a DSpark drafter (either layout)."""
    ckpt = opened(where)
    cfg, cwhere = ckpt.config, ckpt.config_file
    if not is_dspark_config(cfg):
        raise bad(
            cwhere,
            "not a DSpark drafter (no speculators_model_type 'dspark' nor "
            "dflash_config.projector_type 'dspark')",
        )
    names = {_canonical(n): n for n in ckpt.tensors}
    backbone = read_dflash_config(cfg, cwhere, set(names))
    if "lm_head.weight" in names and backbone.draft_vocab_size == backbone.vocab_size:
        rows = int(ckpt.tensors[names["lm_head.weight"]].shape[0])
        backbone = backbone.replace(draft_vocab_size=rows)
    specforge = backbone.layout != "speculators"
    key, dfc = "sample_from_anchor", cfg.get("dflash_config") or {}
    # speculators' DSparkSpeculatorConfig: default true; SpecForge's own generate drafts B - 1
    # (SGLang reads it top-level)
    anchor = {key: cfg.get(key, dfc.get(key, False)) if specforge else cfg.get(key, True)}
    backbone = backbone.replace(sample_from_anchor=_get(anchor, key, cwhere, bool))
    heads = _heads(cfg, cwhere, specforge)
    layout = "specforge" if specforge else "speculators"
    spec = DSparkSpec(backbone=backbone.replace(variant=METHOD), layout=layout, **heads)
    return MethodHeader(ckpt, METHOD, layout, spec, names)


def read_dspark(path: str) -> tuple[DSparkSpec, dict[str, Any], MethodHeader]:
    """(spec, canonical name -> torch tensor, header) of a DSpark drafter in either layout."""
    head = dspark_header(local(path))
    return head.spec, read_tensors(head.ckpt, head.names), head
