"""Safetensors files assembled from byte spans of other files: bit-exact, torch-free.

convert (DFlash, P-EAGLE), MTP extract and stitch never decode a drafter's tensor: each output
tensor is the exact byte span of a source tensor (checked by safetensors_io/headers.py), under
a new name and possibly a new shape of the same element count. So a round trip is bit-exact
by construction, and a shard nobody touches is never rewritten. The one exception is asked
for by name: a tensor borrowed from the target may be cast to the drafter's dtype
(`cast_raw`, `convert --dtype`), its bytes then made in memory (numpy, round to nearest even
for bfloat16, as torch's `.to(torch.bfloat16)`).
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from eagle3kit.checkpoint.io.headers import TensorInfo
from eagle3kit.core.atomic import atomic_open
from eagle3kit.core.errors import bad

_CHUNK = 1 << 22


@dataclass(frozen=True)
class RawTensor:
    """One output tensor: its name and shape, and the source bytes (file + span) it copies."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str
    start: int
    end: int
    data: bytes | None = None  # bytes made in memory (a cast), instead of the file's span


def raw(info: TensorInfo, name: str | None = None, shape: tuple[int, ...] | None = None):
    """`info`'s bytes under `name` (default: its own) and `shape` (same element count)."""
    shape = tuple(shape) if shape is not None else info.shape
    if math.prod(shape) != info.numel:
        raise bad(info.file, f"tensor {info.name!r}: cannot view {list(info.shape)} as {shape}")
    return RawTensor(name or info.name, info.dtype, shape, info.file, info.start, info.end)


_CASTS = ("F32", "F16", "BF16")


def cast_raw(info: TensorInfo, dtype: str, name: str | None = None) -> RawTensor:
    """`info`'s values in safetensors dtype `dtype` (F32, F16, BF16), under `name`."""
    import numpy as np

    if info.dtype not in _CASTS or dtype not in _CASTS:
        found = f"{info.dtype} -> {dtype}"
        raise bad(info.file, f"{info.name}: expected a cast between {_CASTS}, found {found}")
    with open(info.file, "rb") as f:
        f.seek(info.start)
        buf = f.read(info.nbytes)
    if len(buf) != info.nbytes:
        raise bad(info.file, f"truncated: tensor {info.name!r}")
    x = _to_f32(np.frombuffer(buf, dtype=_NP[info.dtype]), info.dtype)
    out = _from_f32(x, dtype).tobytes()
    return RawTensor(name or info.name, dtype, info.shape, info.file, 0, len(out), out)


_NP = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


def _to_f32(a, dtype: str):
    import numpy as np

    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def _from_f32(x, dtype: str):
    import numpy as np

    if dtype == "F32":
        return x.astype("<f4")
    if dtype == "F16":
        return x.astype("<f2")
    u = x.view(np.uint32)
    nan = np.isnan(x)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")  # nearest, ties to even
    return np.where(nan, np.uint16(0x7FC0), rounded).astype("<u2")


def _copy(dst, src_path: str, start: int, end: int) -> None:
    try:
        with open(src_path, "rb") as src:
            src.seek(start)
            left = end - start
            while left > 0:
                buf = src.read(min(_CHUNK, left))
                if not buf:
                    raise bad(src_path, f"truncated: expected bytes up to {end}")
                dst.write(buf)
                left -= len(buf)
    except OSError as e:
        raise bad(src_path, f"cannot read: {e.strerror or e}") from e


def write_raw(path: str | Path, tensors: list[RawTensor], metadata: dict[str, str] | None = None):
    """Write a safetensors file of `tensors` (in name order), atomically."""
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise bad(str(path), f"tensor names written twice: {dup}")
    order = sorted(tensors, key=lambda t: t.name)
    header: dict[str, object] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for t in order:
        size = t.end - t.start
        header[t.name] = {
            "dtype": t.dtype,
            "shape": list(t.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    with atomic_open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)) + hjson)
        for t in order:
            if t.data is not None:
                f.write(t.data)
            else:
                _copy(f, t.file, t.start, t.end)


def tensor_sha256(info: TensorInfo) -> str:
    """sha256 of one tensor's bytes (reads only its span)."""
    return tensor_sha256_span(info.file, info.start, info.end, info.name)


def tensor_sha256_span(path: str, start: int, end: int, name: str = "") -> str:
    """sha256 of the bytes start..end of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(start)
        left = end - start
        while left > 0:
            buf = f.read(min(_CHUNK, left))
            if not buf:
                raise bad(path, f"truncated: tensor {name!r}")
            h.update(buf)
            left -= len(buf)
    return h.hexdigest()


def file_metadata(path: str) -> dict[str, str] | None:
    """A safetensors file's `__metadata__` (the header is already checked by headers.py)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    meta = header.get("__metadata__")
    return meta if isinstance(meta, dict) else None
