"""MTP heads at the checkpoint layer (torch-free): the part core/registry.py's generic verbs
ask for. An MTP head ships inside its target (the target's own MTP layers), so this part
describes targets rather than drafter files.

    layout.py     where a target's heads are, their config rules, canonical names
    heads.py      find, extract to a standalone head dir, stitch back
    write.py      the writer of a (fine-tuned) head dir
    synthetic.py  tiny targets with MTP layers
"""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.methods.mtp.checkpoint.heads import extract_mtp, find_mtp_heads, stitch_mtp
from eagle3kit.methods.mtp.checkpoint.layout import METHOD, head_record, mtp_count, mtp_prefixes

__all__ = [
    "detect",
    "extract_mtp",
    "stitch_mtp",
    "target_fields",
    "target_lines",
    "target_prefixes",
]


def detect(config: dict[str, Any], names: set[str]) -> tuple[str, int] | None:
    """speculators' `mtp` type or a standalone head dir (strength 3); a target that declares
    MTP layers (strength 1: a drafter config of another method wins)."""
    if config.get("speculators_model_type") == METHOD or head_record(config) is not None:
        return METHOD, 3
    return (METHOD, 1) if mtp_count(config) > 0 else None


def target_prefixes(config: Any) -> tuple[str, ...]:
    """The name prefixes of the target's own MTP layers (transformers never loads them)."""
    return mtp_prefixes(config)


def target_fields(ckpt: Checkpoint) -> tuple[dict[str, Any], bool]:
    """inspect's `mtp` field for a target (None when it declares and carries no head), and
    whether the target ships a head."""
    heads = find_mtp_heads(ckpt)
    declared = mtp_count(ckpt.config)
    if not heads and not declared:
        return {"mtp": None}, False
    summary = {
        "declared": declared,
        "heads": [h.to_json() for h in heads],
        "missing": max(0, declared - len(heads)),
    }
    return {"mtp": summary}, bool(heads)


def target_lines(r: dict[str, Any]) -> list[str]:
    """inspect's line about a target's MTP heads, for a person (cli/ prints it)."""
    mtp = r.get("mtp")
    if not mtp:
        return []
    heads = ", ".join(
        f"#{h['index']} ({h['style']}, {h['prefix']}*, {h['tensors']} tensors)"
        for h in mtp["heads"]
    )
    return [
        f"  MTP heads: {len(mtp['heads'])} found ({heads or 'none'}); config declares "
        f"{mtp['declared']}" + (f", {mtp['missing']} not in the files" if mtp["missing"] else "")
    ]
