"""`eagle3kit target slim`: the part of a target that no engine holds for us, in one directory.

The engine route (capture by vLLM, training from the feature store, evaluation from it) needs
of the target only its config, its tokenizer, and three tensors: the input embedding, the
final norm and `lm_head` (docs/engine-capture.md). `slim_target` reads exactly those from a
local directory (partial or whole) or a Hub id (only the shards holding them are fetched) and
writes config, tokenizer files and one `model.safetensors` holding them, byte for byte as
stored (no torch needed, no dtype change). The directory appears whole or not at all.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.io.headers import TensorInfo
from eagle3kit.checkpoint.io.hub_files import TOKENIZER_FILES, open_target
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.core.artifacts import stamp
from eagle3kit.core.atomic import atomic_dir
from eagle3kit.core.errors import bad

NORM_NAMES = (
    "model.norm.weight",
    "language_model.model.norm.weight",
    "model.language_model.norm.weight",
)
HEAD_NAMES = ("lm_head.weight", "language_model.lm_head.weight")
EMBED_NAMES = (
    "model.embed_tokens.weight",
    "language_model.model.embed_tokens.weight",
    "model.language_model.embed_tokens.weight",
)
WEIGHTS = "model.safetensors"
_CHUNK = 64 * 1024 * 1024


def first_listed(ckpt: Checkpoint, names: tuple[str, ...]) -> str | None:
    """The first of `names` the checkpoint lists (present or in an absent shard)."""
    listed = set(ckpt.names())
    return next((n for n in names if n in listed), None)


def head_tensors(ckpt: Checkpoint) -> dict[str, str]:
    """{role: tensor name} for embed, norm and lm_head (lm_head left out when it is tied to
    the embedding and not stored)."""
    found = {
        "embed": first_listed(ckpt, EMBED_NAMES),
        "norm": first_listed(ckpt, NORM_NAMES),
        "lm_head": first_listed(ckpt, HEAD_NAMES),
    }
    cfg = ckpt.config.get("text_config") or ckpt.config
    tied = bool(cfg.get("tie_word_embeddings") or ckpt.config.get("tie_word_embeddings"))
    if found["lm_head"] is None and tied:
        del found["lm_head"]
    lost = [role for role, name in found.items() if name is None]
    if lost:
        want = {"embed": EMBED_NAMES, "norm": NORM_NAMES, "lm_head": HEAD_NAMES}
        raise bad(
            ckpt.source,
            f"expected the target's {lost[0]} tensor ({' / '.join(want[lost[0]])}), found none "
            "in its safetensors or index",
        )
    return {role: str(name) for role, name in found.items()}


def _header_bytes(infos: list[TensorInfo]) -> bytes:
    """A safetensors header for `infos` laid end to end (8-byte aligned, as the library pads)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    pos = 0
    for t in infos:
        header[t.name] = {
            "dtype": t.dtype,
            "shape": list(t.shape),
            "data_offsets": [pos, pos + t.nbytes],
        }
        pos += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def _write_weights(path: Path, infos: list[TensorInfo]) -> None:
    """Copy each tensor's stored bytes (by its span) into one safetensors file."""
    with open(path, "wb") as out:
        out.write(_header_bytes(infos))
        for t in infos:
            with open(t.file, "rb") as f:
                f.seek(t.start)
                left = t.nbytes
                while left:
                    chunk = f.read(min(left, _CHUNK))
                    if not chunk:
                        raise bad(t.file, f"tensor {t.name!r}: file ended {left} bytes early")
                    out.write(chunk)
                    left -= len(chunk)


def _side_files(ckpt: Checkpoint) -> list[Path]:
    """config.json, tokenizer files and remote-code modules beside the config."""
    root = Path(ckpt.config_file).parent
    keep = set(TOKENIZER_FILES) | {"config.json"}
    return sorted(
        f
        for f in root.iterdir()
        if f.is_file() and (f.name in keep or f.suffix in (".py", ".tiktoken"))
    )


def slim_target(target: str, out: str | Path, *, overwrite: bool = False) -> dict[str, Any]:
    """Write `out`: config, tokenizer and the embedding, final norm and lm_head of `target`."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise bad(
            str(out),
            "expected a new or empty directory, found one that is not empty "
            "(--overwrite replaces it)",
        )
    ckpt = open_target(target)
    roles = head_tensors(ckpt)
    infos = [ckpt.info(name) for name in dict.fromkeys(roles.values())]  # fetches its shards
    files = _side_files(ckpt)
    with atomic_dir(out) as tmp:
        for f in files:
            shutil.copyfile(f, tmp / f.name)
        _write_weights(tmp / WEIGHTS, infos)
    doc = {
        "source": target,
        "output": str(out),
        "tensors": {role: name for role, name in roles.items()},
        "bytes": sum(t.nbytes for t in infos),
        "files": sorted([f.name for f in files] + [WEIGHTS]),
        "shards_read": sorted({Path(t.file).name for t in infos}),
    }
    return stamp(doc, "target_slim")
