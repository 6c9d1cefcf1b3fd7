"""Writers of DFlash and P-EAGLE drafters and of extracted MTP heads from torch tensors under
their canonical names (the modules' state dicts): what training and warm starts save.

    save_dflash(out, spec, tensors, verifier=None)     layout = spec.layout (zlab|speculators)
    save_peagle(out, spec, tensors, verifier=None)     layout = spec.layout (speculators|vllm)
    save_mtp_head(out, like, tensors)                  like = the folder extract_mtp wrote

Each is written to a temporary sibling and renamed into place (core/atomic.atomic_dir); an
existing non-empty `out` is refused. torch is imported on call only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.dflash_layout import speculators_config, zlab_config
from eagle3kit.checkpoint.eagle3.layouts import canonical_to_file, config_for
from eagle3kit.checkpoint.mtp_layout import head_record
from eagle3kit.core.atomic import atomic_dir, atomic_write_json, save_safetensors
from eagle3kit.core.errors import bad
from eagle3kit.core.method_spec import DFlashSpec, PEagleSpec


def peagle_config(spec: PEagleSpec, verifier: str | None = None) -> dict[str, Any]:
    """A P-EAGLE config in `spec.layout`: speculators `peagle`, or vLLM's native form (the
    config vLLM's own update_peagle builds: a flat Llama config with pard_token)."""
    d = spec.draft
    if spec.layout == "speculators":
        cfg = config_for(
            d, "vllm", verifier=verifier, speculative_tokens=spec.num_speculative_tokens or 3
        )
        cfg["architectures"] = ["PEagleSpeculator"]
        cfg["speculators_model_type"] = "peagle"
        cfg["speculators_config"]["algorithm"] = "peagle"
        cfg["transformer_layer_config"]["num_hidden_layers"] = spec.num_hidden_layers
        cfg["mask_token_id"] = spec.mask_token_id
        cfg["embed_requires_grad"] = True
        return cfg
    cfg = config_for(d, "sglang")
    cfg.pop("eagle_config", None)
    cfg["architectures"] = ["PeagleQwen3ForCausalLM" if d.qk_norm else "PeagleLlamaForCausalLM"]
    cfg["num_hidden_layers"] = spec.num_hidden_layers
    cfg["eagle_aux_hidden_state_layer_ids"] = list(d.aux_layers or ())
    cfg[spec.token_key if spec.token_key != "mask_token_id" else "pard_token"] = spec.mask_token_id
    return cfg


def _check(out: Path, spec_names: dict[str, Any], tensors: dict[str, Any], what: str) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise bad(str(out), "expected a new or empty output directory, found one that is not empty")
    for name, t in tensors.items():
        want = spec_names.get(name)
        if want is None:
            raise bad(what, f"tensor {name!r}: not a canonical name of this drafter")
        if name != "mask_hidden" and tuple(t.shape) != tuple(want):
            raise bad(what, f"tensor {name!r}: expected shape {list(want)}, found {list(t.shape)}")


def _write(out: Path, cfg: dict[str, Any], stored: dict[str, Any], meta: dict[str, str]) -> None:
    with atomic_dir(out) as tmp:
        save_safetensors(tmp / "model.safetensors", stored, {"format": "pt", **meta})
        atomic_write_json(tmp / "config.json", cfg)


def save_dflash(
    out: str | Path, spec: DFlashSpec, tensors: dict[str, Any], verifier: str | None = None
) -> Path:
    """A DFlash drafter in `spec.layout`: z-lab (no embedding/lm_head: dropped if given) or
    speculators (they are required)."""
    out = Path(out)
    _check(out, spec.expected_shapes(), tensors, "save_dflash")
    if spec.layout == "zlab":
        stored = {
            n: t
            for n, t in tensors.items()
            if n not in ("embed_tokens.weight", "lm_head.weight", "t2d")
        }
        cfg = zlab_config(spec)
    else:
        missing = [n for n in ("embed_tokens.weight", "lm_head.weight") if n not in tensors]
        if missing:
            raise bad(
                "save_dflash",
                f"{', '.join(missing)}: missing (speculators' layout "
                "carries the target's embedding and head)",
            )
        stored, cfg = dict(tensors), speculators_config(spec, verifier)
    _write(out, cfg, stored, {"eagle3kit_method": "dflash", "eagle3kit_layout": spec.layout})
    return out


def save_peagle(
    out: str | Path, spec: PEagleSpec, tensors: dict[str, Any], verifier: str | None = None
) -> Path:
    """A P-EAGLE drafter in `spec.layout`; names as vLLM and speculators store them
    (`layers.{i}.*`), mask_hidden [1, 1, N] (speculators) or [1, N] (vLLM-native)."""
    out = Path(out)
    _check(out, spec.expected_shapes(), tensors, "save_peagle")
    if "mask_hidden" not in tensors:
        raise bad("save_peagle", "mask_hidden: missing (vLLM refuses a P-EAGLE drafter without it)")
    stored = {canonical_to_file(n, "vllm"): t for n, t in tensors.items()}
    view = (1, 1, -1) if spec.layout == "speculators" else (1, -1)
    stored["mask_hidden"] = stored["mask_hidden"].reshape(view)
    _write(
        out,
        peagle_config(spec, verifier),
        stored,
        {"eagle3kit_method": "peagle", "eagle3kit_layout": spec.layout},
    )
    return out


def save_mtp_head(out: str | Path, like: str | Path, tensors: dict[str, Any]) -> Path:
    """A (fine-tuned) MTP head in the standalone form extract_mtp writes, its config copied
    from `like` (the extracted folder), so stitch_mtp can put it back."""
    out, like = Path(out), Path(like)
    cfg = json.loads((like / "config.json").read_text())
    rec = head_record(cfg)
    if rec is None:
        raise bad(str(like / "config.json"), "eagle3kit_mtp.names: missing (not an extracted head)")
    names = rec["names"]
    extra, missing = sorted(set(tensors) - set(names)), sorted(set(names) - set(tensors))
    if extra or missing:
        raise bad(
            "save_mtp_head",
            f"tensors: expected the head's {len(names)}; extra {extra[:5]}, missing {missing[:5]}",
        )
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise bad(str(out), "expected a new or empty output directory, found one that is not empty")
    _write(out, cfg, dict(tensors), {"eagle3kit_method": "mtp"})
    return out
