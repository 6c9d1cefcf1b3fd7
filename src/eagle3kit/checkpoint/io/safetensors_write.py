"""Writing safetensors files: atomic (core/atomic), mode from the umask, and sparse where the
weights are zero (all-zero runs stay holes, so a 2.2 GiB synthetic drafter costs KB of disk).
Reading them is safetensors_io.py's job."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.io.tensor_read import torch_dtypes
from eagle3kit.core.atomic import atomic_write_json, save_safetensors
from eagle3kit.core.errors import bad


def write_safetensors(
    path: str | Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None
) -> None:
    """Write torch tensors to `path` atomically (core/atomic; the file respects the umask)."""
    save_safetensors(path, tensors, metadata)


def write_json(path: str | Path, doc: Any) -> None:
    """Write JSON atomically (eagle3kit.core.atomic; the file respects the umask)."""
    atomic_write_json(path, doc)


SPARSE_CHUNK = 1 << 20  # bytes: an all-zero run this long becomes a hole in the file


def _tensor_bytes(t: Any):
    """The raw little-endian bytes of a torch tensor as a numpy uint8 view (no copy if
    contiguous)."""
    import torch

    return t.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy()  # [nbytes]


def write_safetensors_sparse(
    path: str | Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None
) -> int:
    """Write a safetensors file whose all-zero runs stay holes (seek past them); returns the bytes
    actually written. Atomic (eagle3kit.core.atomic), mode from the umask; the safetensors library
    reads it back like any other file (tensors in name order, contiguous, 8-byte aligned header).
    """
    import numpy as np

    names = sorted(tensors)
    dtypes = {v: k for k, v in torch_dtypes().items()}
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for n in names:
        t = tensors[n]
        if t.dtype not in dtypes:
            raise bad(str(path), f"tensor {n!r}: dtype {t.dtype} has no safetensors name")
        size = t.numel() * t.element_size()
        header[n] = {
            "dtype": dtypes[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size

    def chunks():  # (offset in the data section, bytes): the non-zero SPARSE_CHUNK runs
        for n in names:
            raw = _tensor_bytes(tensors[n])  # [nbytes] uint8
            start = header[n]["data_offsets"][0]
            for a in range(0, raw.shape[0], SPARSE_CHUNK):
                chunk = raw[a : a + SPARSE_CHUNK]
                if np.any(chunk):
                    yield start + a, chunk.tobytes()

    return write_with_holes(path, header, offset, chunks())


def write_with_holes(
    path: str | Path, header: dict[str, Any], total: int, chunks: Iterable[tuple[int, bytes]]
) -> int:
    """A safetensors file from its header and (offset in the data section, bytes) chunks; the
    rest of the `total`-byte data section stays holes. Atomic; returns the data bytes written."""
    from eagle3kit.core.atomic import atomic_open

    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)  # 8-byte aligned data
    written = 0
    with atomic_open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)) + hjson)
        base = 8 + len(hjson)
        for off, raw in chunks:
            f.seek(base + off)
            f.write(raw)
            written += len(raw)
        f.truncate(base + total)
    return written
