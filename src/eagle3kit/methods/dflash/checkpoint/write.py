"""The writer of DFlash drafters from torch tensors under their canonical names (the module's
state dict), in `spec.layout`: what training and warm starts save. torch is imported on call
only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.method_write import check_tensors, write_dir
from eagle3kit.core.errors import bad
from eagle3kit.methods.dflash.checkpoint.layout import speculators_config, zlab_config
from eagle3kit.methods.dflash.checkpoint.read import METHOD
from eagle3kit.methods.dflash.checkpoint.spec import DFlashSpec


def save_dflash(
    out: str | Path, spec: DFlashSpec, tensors: dict[str, Any], verifier: str | None = None
) -> Path:
    """A DFlash drafter in `spec.layout`: z-lab (no embedding/lm_head: dropped if given) or
    speculators (they are required)."""
    out = Path(out)
    check_tensors(out, spec, tensors, "save_dflash")
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
    write_dir(out, cfg, stored, {"eagle3kit_method": METHOD, "eagle3kit_layout": spec.layout})
    return out
