"""Trainer state on disk (RUN/state/): enough to continue a run exactly after kill -9.

    RUN/state/state.json        {"format": "eagle3kit-train-state/1", "step", "data_position",
                                 "best_step", "best_tau_walk", "best_tau_every_position",
                                 "param_groups", "config"}
    RUN/state/model.safetensors the drafter's canonical tensors (trainable + d2t/t2d), fp32
    RUN/state/optim.safetensors AdamW moments and step per parameter: "<name>::exp_avg", ...
    RUN/state/anchor.safetensors the starting weights (L2-SP pulls toward them), when used
    RUN/state/rng.safetensors   torch's CPU generator state (uint8)

The folder is written whole into a temp sibling and renamed into place
(`eagle3kit.core.atomic.atomic_dir`), so a reader finds the previous complete state or the new one.
Optimizer state is keyed by parameter name, not position, so a run can resume under another
process count (torchrun) as well.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from eagle3kit.core.atomic import atomic_dir, atomic_write_json, save_safetensors
from eagle3kit.core.errors import bad

FORMAT = "eagle3kit-train-state/1"
SEP = "::"


def flatten_optim(state: dict[str, dict[str, Any]]) -> dict[str, torch.Tensor]:
    """{param name: {"exp_avg": T, "step": T|float}} -> {"name::exp_avg": T, ...}."""
    flat = {}
    for name, st in state.items():
        for key, v in st.items():
            flat[f"{name}{SEP}{key}"] = torch.as_tensor(v).detach().cpu().clone()
    return flat


def unflatten_optim(flat: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    state: dict[str, dict[str, torch.Tensor]] = {}
    for k, v in flat.items():
        name, key = k.rsplit(SEP, 1)
        state.setdefault(name, {})[key] = v
    return state


def save_state(
    folder: str | Path,
    *,
    meta: dict[str, Any],
    model: dict[str, torch.Tensor],
    optim: dict[str, dict[str, Any]],
    anchor: dict[str, torch.Tensor] | None = None,
) -> None:
    """Write RUN/state atomically (the whole folder at once)."""
    with atomic_dir(folder) as tmp:
        save_safetensors(tmp / "model.safetensors", {k: v.detach().cpu() for k, v in model.items()})
        save_safetensors(tmp / "optim.safetensors", flatten_optim(optim))
        if anchor is not None:
            save_safetensors(tmp / "anchor.safetensors", {k: v.cpu() for k, v in anchor.items()})
        save_safetensors(tmp / "rng.safetensors", {"torch_cpu": torch.get_rng_state()})
        doc = {"kind": "eagle3kit.train_state", "schema": 1, "format": FORMAT, **meta}
        atomic_write_json(tmp / "state.json", doc)


def load_state(folder: str | Path) -> dict[str, Any]:
    """{"meta", "model", "optim", "anchor" (or None), "rng"} from RUN/state."""
    from safetensors.torch import load_file

    folder = Path(folder)
    meta_path = folder / "state.json"
    if not meta_path.is_file():
        raise bad(str(folder), "--resume: expected a trainer state (state.json), found none")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as e:
        raise bad(str(meta_path), f"not valid JSON ({e})") from None
    if meta.get("format") != FORMAT:
        raise bad(str(meta_path), f"format: expected {FORMAT!r}, found {meta.get('format')!r}")
    out: dict[str, Any] = {"meta": meta}
    for part in ("model", "optim", "anchor", "rng"):
        p = folder / f"{part}.safetensors"
        if part == "anchor" and not p.is_file():
            out[part] = None
            continue
        try:
            out[part] = load_file(str(p))
        except Exception as e:  # missing or corrupt file: one line, named
            raise bad(str(p), f"cannot read the trainer state ({e})") from None
    out["optim"] = unflatten_optim(out["optim"])
    return out
