"""The writer of a (fine-tuned) MTP head in the standalone form extract_mtp writes, its config
copied from the extracted folder, so stitch_mtp can put it back. torch is imported on call
only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.method_write import write_dir
from eagle3kit.core.errors import bad
from eagle3kit.methods.mtp.checkpoint.layout import METHOD, head_record


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
    write_dir(out, cfg, dict(tensors), {"eagle3kit_method": METHOD})
    return out
