"""MTP heads: find them in a target, extract one to a standalone drafter, stitch one back.

    find_mtp_heads(target) -> [MtpHead]                       headers + config only
    extract_mtp(target, out_dir, index=0) -> MtpExtractResult  out_dir/config.json +
                                                              model.safetensors (canonical names)
    stitch_mtp(target_dir, drafter_dir) -> MtpStitchResult     in place, atomic

Every tensor is copied byte for byte (raw_tensors.py): extract then stitch is bit-exact.
Stitching writes the head's tensors to one new shard, rewrites (under a new name, without the
head) only a shard that held head tensors beside others, then swaps
model.safetensors.index.json atomically: that rename is the commit point. Shards without head
tensors are never opened for writing (byte-identical); files the new index no longer names are
deleted only after the swap, so a crash leaves the old checkpoint or the new one.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.io.raw_tensors import file_metadata, raw, write_raw
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint, load_checkpoint, load_local
from eagle3kit.core.artifacts import stamp
from eagle3kit.core.atomic import atomic_dir, atomic_write_json
from eagle3kit.core.errors import bad
from eagle3kit.methods.mtp.checkpoint.layout import (
    METHOD,
    MtpHead,
    head_dir_config,
    head_record,
    text_config,
)
from eagle3kit.methods.mtp.checkpoint.layout import find_mtp_heads as _find

INDEX_NAME = "model.safetensors.index.json"


def find_mtp_heads(target: str | Checkpoint) -> list[MtpHead]:
    """The MTP heads of a target (dir, file or Hub id), from its config and headers."""
    ckpt = target if isinstance(target, Checkpoint) else load_checkpoint(target)
    return _find(ckpt)


def _head(ckpt: Checkpoint, index: int) -> MtpHead:
    heads = _find(ckpt)
    if not heads:
        raise bad(
            ckpt.source,
            "no MTP head found (no mtp.* tensors and no "
            "model.layers.{L+k}.{enorm,hnorm,eh_proj} past num_hidden_layers)",
        )
    for h in heads:
        if h.index == index:
            return h
    raise bad(ckpt.source, f"MTP head {index}: not found (heads: {[h.index for h in heads]})")


@dataclass
class MtpExtractResult:
    target: str
    out: str
    head: MtpHead
    tensors: int
    total_bytes: int

    def to_json(self) -> dict[str, Any]:
        return stamp(
            {
                "action": "extract",
                "method": METHOD,
                "target": self.target,
                "out": self.out,
                "head": self.head.to_json(),
                "tensors": self.tensors,
                "total_bytes": self.total_bytes,
            },
            "convert",
        )


def extract_mtp(target: str, out_dir: str, index: int = 0) -> MtpExtractResult:
    """Write MTP head `index` of `target` as a standalone drafter in `out_dir`: tensors under
    their canonical names, config.json = the target's (text) config plus `eagle3kit_mtp`,
    which records where each tensor came from (what stitch_mtp needs)."""
    ckpt = load_checkpoint(target)
    if ckpt.repo_id is not None:
        raise bad(target, "extract reads a local target directory (download it first)")
    head = _head(ckpt, index)
    infos = {canon: ckpt.info(stored) for canon, stored in head.names.items()}
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise bad(out_dir, "expected a new or empty output directory, found one that is not empty")
    record = {
        "style": head.style,
        "index": head.index,
        "layer": head.layer,
        "prefix": head.prefix,
        "names": dict(sorted(head.names.items())),
        "target": str(Path(target).resolve()),
        "target_architectures": ckpt.config.get("architectures"),
    }
    cfg = head_dir_config(copy.deepcopy(text_config(ckpt.config)), record)
    with atomic_dir(out) as tmp:
        tensors = [raw(i, canon) for canon, i in infos.items()]
        write_raw(tmp / "model.safetensors", tensors, {"format": "pt", "eagle3kit_method": METHOD})
        atomic_write_json(tmp / "config.json", cfg)
    total = sum(i.nbytes for i in infos.values())
    return MtpExtractResult(target, str(out), head, len(infos), total)


@dataclass
class MtpStitchResult:
    target: str
    drafter: str
    new_shard: str
    rewritten: list[str] = field(default_factory=list)  # old shard -> rewritten without head
    removed: list[str] = field(default_factory=list)
    untouched: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return stamp(
            {
                "action": "stitch",
                "method": METHOD,
                "target": self.target,
                "drafter": self.drafter,
                "new_shard": self.new_shard,
                "rewritten": self.rewritten,
                "removed": self.removed,
                "untouched": self.untouched,
            },
            "convert",
        )


def _drafter_map(drafter: Checkpoint, target: Checkpoint) -> dict[str, str]:
    """canonical -> target name, checked: every tensor maps, shapes and dtypes match."""
    meta = head_record(drafter.config)
    where = drafter.config_file
    if meta is None:
        raise bad(where, "eagle3kit_mtp.names: missing (not an MTP head extracted by eagle3kit)")
    names: dict[str, str] = meta["names"]
    extra = sorted(set(drafter.tensors) - set(names))
    missing = sorted(set(names) - set(drafter.tensors))
    if extra or missing:
        raise bad(
            where,
            f"tensors: expected exactly the {len(names)} the head had; "
            f"extra {extra[:5]}, missing {missing[:5]}",
        )
    for canon, stored in names.items():
        if stored not in target.names():
            raise bad(target.source, f"tensor {stored!r} (the head's {canon!r}): not in target")
        t, d = target.info(stored), drafter.tensors[canon]
        if (t.dtype, t.shape) != (d.dtype, d.shape):
            raise bad(
                d.file,
                f"tensor {canon!r}: expected {t.dtype} {list(t.shape)} as the "
                f"target's {stored!r}, found {d.dtype} {list(d.shape)}",
            )
    return names


def _weight_map(target: Checkpoint, root: Path) -> dict[str, str]:
    if (root / INDEX_NAME).exists():
        return dict(json.loads((root / INDEX_NAME).read_text())["weight_map"])
    return {n: Path(t.file).name for n, t in target.tensors.items()}


def stitch_mtp(target_dir: str, drafter_dir: str) -> MtpStitchResult:
    """Put a (fine-tuned) extracted MTP head back into `target_dir`, in place."""
    root = Path(target_dir)
    if not root.is_dir():
        raise bad(target_dir, "stitch writes into a local target directory")
    target, drafter = load_local(root), load_local(drafter_dir)
    target.require_complete()
    names = _drafter_map(drafter, target)
    wmap = _weight_map(target, root)
    head_names = set(names.values())
    touched = sorted({wmap[n] for n in head_names})
    idx = head_record(drafter.config).get("index", 0)  # checked by _drafter_map
    new_shard = f"model-mtp{idx}.eagle3kit.safetensors"
    write_raw(
        root / new_shard, [raw(drafter.tensors[c], s) for c, s in names.items()], {"format": "pt"}
    )
    new_map = {n: f for n, f in wmap.items() if n not in head_names}
    rewritten = []
    for shard in touched:
        rest = [n for n, f in wmap.items() if f == shard and n not in head_names]
        if not rest:
            continue
        base = shard[: -len(".safetensors")] + "-base.safetensors"
        src = str(root / shard)
        write_raw(root / base, [raw(target.info(n)) for n in rest], file_metadata(src))
        new_map.update({n: base for n in rest})
        rewritten.append(shard)
    new_map.update({n: new_shard for n in head_names})
    _write_index(root, target, new_map)
    keep = set(new_map.values())
    removed = [s for s in touched if s not in keep]
    for s in removed:
        os.remove(root / s)
    untouched = sorted(set(wmap.values()) - set(touched))
    return MtpStitchResult(str(root), drafter_dir, new_shard, rewritten, removed, untouched)


def _write_index(root: Path, target: Checkpoint, wmap: dict[str, str]) -> None:
    old = {}
    if (root / INDEX_NAME).exists():
        old = json.loads((root / INDEX_NAME).read_text())
    meta = dict(old.get("metadata") or {})
    total = sum(target.info(n).nbytes for n in wmap)
    meta["total_size"] = total
    atomic_write_json(
        root / INDEX_NAME, {"metadata": meta, "weight_map": dict(sorted(wmap.items()))}
    )
