"""One safetensors file's header, bounds-checked (docs/formats.md "Reading safetensors safely").

Checks made on every header: the header length fits in the file; the header is a JSON object;
every dtype is known; shapes are lists of non-negative ints; dtype x shape equals the byte
span; spans lie inside the file and do not overlap. Nothing here reads weight bytes.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3kit.core.errors import bad

# Bytes per element of each safetensors dtype.
DTYPE_SIZES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "C64": 8,
}
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors library's own limit


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: its file, dtype, shape and absolute byte span in that file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str  # local path, or the file name inside a Hub repo
    start: int  # absolute offset in the file
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def parse_header(
    raw: bytes, file_size: int, where: str, file: str | None = None
) -> dict[str, TensorInfo]:
    """Validate one safetensors header (`raw` = the file's first bytes) against the file size.

    Local files and Hub files both come through here (Hub: the same bytes by range requests),
    so both get every check. Offsets in the result are absolute; `file` (default `where`) is
    what TensorInfo.file records: a local path, or the file name inside a Hub repo."""
    header, data_start = _header_json(raw, file_size, where)
    out = {
        name: _tensor_info(name, entry, where, file or where, data_start, file_size - data_start)
        for name, entry in header.items()
        if name != "__metadata__"
    }
    spans = sorted((t.start, t.end, t.name) for t in out.values() if t.end > t.start)
    for (_s0, e0, n0), (s1, _e1, n1) in zip(spans, spans[1:], strict=False):
        if s1 < e0:
            raise bad(where, f"tensors {n0!r} and {n1!r} overlap in the file (byte {s1} < {e0})")
    return out


def _header_json(raw: bytes, file_size: int, where: str) -> tuple[dict, int]:
    """(the header's JSON object, where the data section starts), the length checked."""
    if file_size < 8 or len(raw) < 8:
        raise bad(
            where,
            f"truncated safetensors file: {file_size} bytes, the 8-byte header length is missing",
        )
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER_BYTES:
        raise bad(where, f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
    if 8 + n > file_size:
        raise bad(where, f"header length {n} runs past the end of the file ({file_size} bytes)")
    if len(raw) < 8 + n:
        raise bad(where, f"truncated safetensors file: header needs {8 + n} bytes, read {len(raw)}")
    try:
        header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(where, f"header is not valid JSON ({e})") from e
    if not isinstance(header, dict):
        raise bad(where, f"header: expected a JSON object, found {type(header).__name__}")
    return header, 8 + n


def _tensor_info(
    name: str, entry: Any, where: str, file: str, data_start: int, data_len: int
) -> TensorInfo:
    """One header entry, checked: dtype, shape, offsets, and its span against the file."""
    if not isinstance(entry, dict):
        raise bad(where, f"tensor {name!r}: expected an object, found {entry!r}")
    dtype = entry.get("dtype")
    if dtype not in DTYPE_SIZES:
        raise bad(
            where, f"tensor {name!r}: unknown dtype {dtype!r} (known: {', '.join(DTYPE_SIZES)})"
        )
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise bad(
            where,
            f"tensor {name!r}: shape must be a list of non-negative ints, found {shape!r}",
        )
    offs = entry.get("data_offsets")
    if (
        not isinstance(offs, list)
        or len(offs) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
        or not 0 <= offs[0] <= offs[1]
    ):
        raise bad(
            where,
            f"tensor {name!r}: data_offsets must be [begin, end] with 0 <= begin <= end, found "
            f"{offs!r}",
        )
    span = offs[1] - offs[0]
    expected = math.prod(shape) * DTYPE_SIZES[dtype]
    if span != expected:
        raise bad(
            where,
            f"tensor {name!r}: {dtype} x {shape} needs {expected} bytes, data_offsets span {span}",
        )
    if offs[1] > data_len:
        raise bad(
            where,
            f"tensor {name!r}: data_offsets {offs} end outside the file (data section is "
            f"{data_len} bytes)",
        )
    return TensorInfo(name, dtype, tuple(shape), file, data_start + offs[0], data_start + offs[1])


def read_header_file(path: str | Path) -> dict[str, TensorInfo]:
    """Read and validate one local .safetensors file's header; never reads tensor data."""
    path = Path(path)
    where = str(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) == 8:
                (n,) = struct.unpack("<Q", head)
                if n <= MAX_HEADER_BYTES and 8 + n <= size:
                    head += f.read(n)
    except OSError as e:
        raise bad(where, f"cannot read: {e.strerror or e}") from e
    return parse_header(head, size, where)
