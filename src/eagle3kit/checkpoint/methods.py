"""Which method a checkpoint belongs to, and the readers of DFlash and P-EAGLE drafters.

    detect_method(config, names) -> "eagle3" | "eagle3.1" | "peagle" | "dflash" | "mtp" |
                                    "dflash2" | "dspark" | "domino" | None
    dflash_header(path or Checkpoint) -> MethodHeader     headers only (inspect, compat)
    read_dflash(path) -> (DFlashSpec, {canonical name: torch tensor}, MethodHeader)
    peagle_header(path or Checkpoint) -> MethodHeader
    read_peagle(path) -> (PEagleSpec, {canonical name: torch tensor}, MethodHeader)

Canonical tensor names (docs/formats.md "DFlash drafters", "P-EAGLE drafters"), which the
torch modules use as parameter names:
- DFlash: z-lab's names (`fc.weight`, `hidden_norm.weight`, `norm.weight`, `layers.{i}.*`,
  optional `embed_tokens.weight`, `lm_head.weight`, `d2t`, `t2d`); a leading `model.` dropped.
- P-EAGLE: EAGLE-3's canonical names for layer 0 and the shared tensors (`midlayer.*`, `fc`,
  `norm`, `lm_head`, `embed_tokens`, `d2t`, `t2d`, `fc_norm.{j}`, `input_norm`), `layers.{i}.*`
  for the layers i >= 1, and `mask_hidden`, viewed as [1, 1, n_aux * H_target] whatever
  its stored shape (vLLM loads it with `view(1, -1)`).
Only safetensors and JSON are read; `read_*` import torch on call (through reader.read_tensors).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from eagle3kit.checkpoint.dflash_layout import is_dflash_config, read_dflash_config
from eagle3kit.checkpoint.eagle3.layouts import file_to_canonical, is_drafter_config
from eagle3kit.checkpoint.eagle3.reader import _local_dir, drafter_header, read_tensors
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint, load_checkpoint
from eagle3kit.checkpoint.mtp_layout import mtp_count
from eagle3kit.core.errors import bad
from eagle3kit.core.method_spec import DFlashSpec, PEagleSpec

DFLASH_FAMILY = ("dflash", "dflash2", "dspark", "domino")  # one backbone, read by dflash_header
PEAGLE_TOKEN_KEYS = ("mask_token_id", "pard_token", "ptd_token_id")  # in vLLM's lookup order
_EXTRA_LAYER = re.compile(r"^(?:model\.)?layers\.([1-9]\d*)\.(.+)$")


def detect_method(config: dict[str, Any], names: Any = ()) -> str | None:
    """The method of a checkpoint from its config (and tensor names): a drafter's method, "mtp"
    for a target that ships MTP layers, None for a plain target. Variants of DFlash that
    eagle3kit does not build are named ("dflash2", "dspark", "domino")."""
    names = set(names)
    smt = config.get("speculators_model_type")
    if is_dflash_config(config):
        dfc = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
        proj = dfc.get("projector_type") or config.get("projector_type")
        if proj in ("dspark", "domino"):
            return str(proj)
        archs = " ".join(str(a) for a in config.get("architectures") or [])
        if smt in ("dflash2", "dspark"):
            return str(smt)
        return "dflash2" if "DFlash2" in archs else "dspark" if "DSpark" in archs else "dflash"
    if smt == "peagle" or any(k in config for k in ("pard_token", "ptd_token_id")):
        return "peagle"
    if "mask_hidden" in names and is_drafter_config(config, names):
        return "peagle"
    if smt == "mtp":
        return "mtp"
    if is_drafter_config(config, names):
        return "eagle3.1" if config.get("fc_norm") or config.get("norm_output") else "eagle3"
    if mtp_count(config) > 0:
        return "mtp"
    return None


@dataclass
class MethodHeader:
    """A DFlash or P-EAGLE drafter read from config and headers (no tensor bytes)."""

    ckpt: Checkpoint
    method: str  # dflash | peagle
    layout: str  # dflash: zlab | speculators; peagle: speculators | vllm
    spec: DFlashSpec | PEagleSpec
    names: dict[str, str]  # canonical name -> stored name
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def source(self) -> str:
        return self.ckpt.source


def _open(where: str | Checkpoint) -> Checkpoint:
    ckpt = where if isinstance(where, Checkpoint) else load_checkpoint(where)
    ckpt.require_complete()
    return ckpt


def _dflash_canonical(name: str) -> str:
    return name[len("model.") :] if name.startswith("model.") else name


def dflash_header(where: str | Checkpoint) -> MethodHeader:
    """Layout, DFlashSpec and canonical names of a DFlash drafter (z-lab or speculators)."""
    ckpt = _open(where)
    if not is_dflash_config(ckpt.config):
        raise bad(
            ckpt.config_file,
            "not a DFlash drafter (no dflash_config, DFlash architecture "
            "or speculators_model_type 'dflash')",
        )
    names = {_dflash_canonical(n): n for n in ckpt.tensors}
    spec = read_dflash_config(ckpt.config, ckpt.config_file, set(names))
    if "lm_head.weight" in names and spec.draft_vocab_size == spec.vocab_size:
        rows = ckpt.tensors[names["lm_head.weight"]].shape[0]
        spec = spec.replace(draft_vocab_size=int(rows))
    notes = []
    dfc = ckpt.config.get("dflash_config") or {}
    if spec.layout == "zlab" and "target_layer_ids" not in dfc:
        notes.append(f"no target_layer_ids: z-lab's default {list(spec.target_layer_ids)} used")
    return MethodHeader(ckpt, "dflash", spec.layout, spec, names, notes)


def _peagle_token(cfg: dict[str, Any], where: str) -> tuple[int, str]:
    for key in PEAGLE_TOKEN_KEYS:
        v = cfg.get(key)
        if v is not None:
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise bad(where, f"{key}: expected a token id (int >= 0), found {v!r}")
            return v, key
    raise bad(
        where,
        "mask_token_id: missing (a P-EAGLE drafter needs mask_token_id, "
        "pard_token or ptd_token_id)",
    )


def _one_layer_view(ckpt: Checkpoint, layer_cfg_key: str | None) -> tuple[Checkpoint, dict]:
    """The checkpoint as the one-layer EAGLE-3 drafter read_spec reads: layers >= 1 and
    mask_hidden hidden from it, num_hidden_layers set to 1; a native (flat) config is read as
    SGLang's flat layout, its `layers.0.*` shown as `midlayer.*`. Returns (view, view name ->
    stored name)."""
    cfg = dict(ckpt.config)
    keep = {
        n: t for n, t in ckpt.tensors.items() if not _EXTRA_LAYER.match(n) and n != "mask_hidden"
    }
    back = {n: n for n in keep}
    if layer_cfg_key:
        cfg[layer_cfg_key] = {**cfg[layer_cfg_key], "num_hidden_layers": 1}
    else:
        cfg["num_hidden_layers"] = 1
        cfg["architectures"] = ["LlamaForCausalLMEagle3"]
        back = {file_to_canonical(n, "sglang"): n for n in keep}
        keep = {v: keep[n] for v, n in back.items()}
    return dataclasses.replace(ckpt, config=cfg, tensors=keep), back


def peagle_header(where: str | Checkpoint) -> MethodHeader:
    """Layout, PEagleSpec and canonical names of a P-EAGLE drafter (speculators `peagle` or
    vLLM's native config with `pard_token`/`ptd_token_id`)."""
    ckpt = _open(where)
    cfg, cwhere = ckpt.config, ckpt.config_file
    layout = "speculators" if cfg.get("speculators_model_type") else "vllm"
    layer_key = "transformer_layer_config" if layout == "speculators" else None
    layer = cfg.get(layer_key) if layer_key else cfg
    if not isinstance(layer, dict):
        raise bad(cwhere, f"transformer_layer_config: expected an object, found {layer!r}")
    n_layers = layer.get("num_hidden_layers", 1)
    if not isinstance(n_layers, int) or isinstance(n_layers, bool) or n_layers < 1:
        raise bad(cwhere, f"num_hidden_layers: expected an int >= 1, found {n_layers!r}")
    view, back = _one_layer_view(ckpt, layer_key)
    one = drafter_header(view)  # the one reader of EAGLE-3 drafters reads layer 0
    draft, names = one.spec, dict(one.names)
    names = {c: back.get(v, v) for c, v in names.items()}
    if layout == "vllm" and cfg.get("eagle_aux_hidden_state_layer_ids"):
        ids = tuple(cfg["eagle_aux_hidden_state_layer_ids"])  # vLLM reads top-level h-indices
        if not (isinstance(cfg.get("eagle3kit"), dict) and cfg["eagle3kit"].get("aux_layers_hf")):
            draft = draft.replace(aux_layers=ids, aux_layers_raw=ids, aux_convention="hf")
    for n in ckpt.tensors:
        m = _EXTRA_LAYER.match(n)
        if m:
            names[f"layers.{m.group(1)}.{m.group(2)}"] = n
    if "mask_hidden" in ckpt.tensors:
        names["mask_hidden"] = "mask_hidden"
    token, key = _peagle_token(cfg, cwhere)
    k = _speculative_tokens(cfg)
    mh = ckpt.tensors.get("mask_hidden")
    spec = PEagleSpec(
        draft=draft.replace(tensors=tuple(sorted(names))),
        num_hidden_layers=n_layers,
        mask_token_id=token,
        layout=layout,
        token_key=key,
        num_speculative_tokens=k,
        mask_hidden_shape=tuple(mh.shape) if mh else None,
    )
    return MethodHeader(ckpt, "peagle", layout, spec, names)


def _speculative_tokens(cfg: dict[str, Any]) -> int | None:
    methods = (cfg.get("speculators_config") or {}).get("proposal_methods") or []
    k = methods[0].get("speculative_tokens") if methods and isinstance(methods[0], dict) else None
    return k if isinstance(k, int) and not isinstance(k, bool) else None


def _local(path: str) -> Checkpoint:
    ckpt = load_checkpoint(path)
    return _local_dir(ckpt) if ckpt.repo_id is not None else ckpt


def read_dflash(path: str) -> tuple[DFlashSpec, dict[str, Any], MethodHeader]:
    """(spec, canonical name -> torch tensor, header) of a DFlash drafter in either layout."""
    head = dflash_header(_local(path))
    spec = head.spec
    assert isinstance(spec, DFlashSpec)
    return spec, read_tensors(head.ckpt, head.names), head


def read_peagle(path: str) -> tuple[PEagleSpec, dict[str, Any], MethodHeader]:
    """(spec, canonical name -> torch tensor, header) of a P-EAGLE drafter in either layout;
    `mask_hidden` comes back as [1, 1, n_aux * H_target]."""
    head = peagle_header(_local(path))
    spec = head.spec
    assert isinstance(spec, PEagleSpec)
    tensors = read_tensors(head.ckpt, head.names)
    if "mask_hidden" in tensors:
        tensors["mask_hidden"] = tensors["mask_hidden"].reshape(1, 1, -1)
    return spec, tensors, head


def method_header_of(ckpt: Checkpoint) -> MethodHeader | None:
    """The DFlash/P-EAGLE header of a drafter of those methods, else None (EAGLE-3 drafters
    keep their reader, reader.drafter_header; targets are never read whole here)."""
    method = detect_method(ckpt.config, ckpt.tensors)
    if method in DFLASH_FAMILY:
        return dflash_header(ckpt)
    if method == "peagle":
        return peagle_header(ckpt)
    return None


__all__ = [
    "MethodHeader",
    "detect_method",
    "dflash_header",
    "method_header_of",
    "peagle_header",
    "read_dflash",
    "read_peagle",
]
