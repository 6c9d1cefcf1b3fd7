"""The one reader of P-EAGLE drafters (speculators `peagle`, vLLM's native config with
`pard_token` / `ptd_token_id`), from config.json and the safetensors headers; the tensors too
for `read_peagle`.

    peagle_header(path or Checkpoint) -> MethodHeader
    read_peagle(path) -> (PEagleSpec, {canonical name: torch tensor}, MethodHeader)

Canonical tensor names (docs/formats.md "P-EAGLE drafters"): EAGLE-3's for layer 0 and the
shared tensors (`midlayer.*`, `fc`, `norm`, `lm_head`, `embed_tokens`, `d2t`, `t2d`,
`fc_norm.{j}`, `input_norm`), `layers.{i}.*` for the layers i >= 1, and `mask_hidden`, viewed
as [1, 1, n_aux * H_target] whatever its stored shape (vLLM loads it with `view(1, -1)`).
Layer 0 and the shared tensors are read by EAGLE-3's one reader (checkpoint/eagle3/reader.py).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from eagle3kit.checkpoint.eagle3.layouts import file_to_canonical
from eagle3kit.checkpoint.eagle3.reader import drafter_header
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.checkpoint.io.tensor_read import read_tensors
from eagle3kit.checkpoint.methods import MethodHeader, local, opened
from eagle3kit.core.errors import bad
from eagle3kit.methods.peagle.checkpoint.spec import MASK_HIDDEN, PEagleSpec

METHOD = "peagle"
TOKEN_KEYS = ("mask_token_id", "pard_token", "ptd_token_id")  # speculators, vLLM's (its order)
_EXTRA_LAYER = re.compile(r"^(?:model\.)?layers\.([1-9]\d*)\.(.+)$")


def is_peagle_config(cfg: dict[str, Any]) -> bool:
    """A config that declares P-EAGLE: speculators' `peagle`, or vLLM's native token keys."""
    return cfg.get("speculators_model_type") == METHOD or any(k in cfg for k in TOKEN_KEYS[1:])


def mask_token(cfg: dict[str, Any], where: str) -> tuple[int, str]:
    """(the mask token, the key that held it), the keys tried in vLLM's order; refused when
    the first one present is not a token id, or none is."""
    for key in TOKEN_KEYS:
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
    keep = {n: t for n, t in ckpt.tensors.items() if not _EXTRA_LAYER.match(n) and n != MASK_HIDDEN}
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
    ckpt = opened(where)
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
    if MASK_HIDDEN in ckpt.tensors:
        names[MASK_HIDDEN] = MASK_HIDDEN
    token, key = mask_token(cfg, cwhere)
    k = _speculative_tokens(cfg)
    mh = ckpt.tensors.get(MASK_HIDDEN)
    spec = PEagleSpec(
        draft=draft.replace(tensors=tuple(sorted(names))),
        num_hidden_layers=n_layers,
        mask_token_id=token,
        layout=layout,
        token_key=key,
        num_speculative_tokens=k,
        mask_hidden_shape=tuple(mh.shape) if mh else None,
    )
    return MethodHeader(ckpt, METHOD, layout, spec, names)


def _speculative_tokens(cfg: dict[str, Any]) -> int | None:
    methods = (cfg.get("speculators_config") or {}).get("proposal_methods") or []
    k = methods[0].get("speculative_tokens") if methods and isinstance(methods[0], dict) else None
    return k if isinstance(k, int) and not isinstance(k, bool) else None


def read_peagle(path: str) -> tuple[PEagleSpec, dict[str, Any], MethodHeader]:
    """(spec, canonical name -> torch tensor, header) of a P-EAGLE drafter in either layout;
    `mask_hidden` comes back as [1, 1, n_aux * H_target]."""
    head = peagle_header(local(path))
    spec: PEagleSpec = head.spec
    tensors = read_tensors(head.ckpt, head.names)
    if MASK_HIDDEN in tensors:
        tensors[MASK_HIDDEN] = tensors[MASK_HIDDEN].reshape(1, 1, -1)
    return spec, tensors, head
