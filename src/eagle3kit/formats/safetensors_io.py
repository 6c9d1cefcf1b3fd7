"""Bounds-checked safetensors headers, for single files, sharded checkpoints and Hub repos.

Nothing here reads weight bytes: a checkpoint is described by its headers alone. The only
tensors ever read are small index tensors (d2t, t2d), through `read_small_tensor`, which uses
numpy (no torch import, so `inspect` and `compat` start fast).

Checks made on every header (DESIGN.md "Safety"): the header length fits in the file; the header
is a JSON object; every dtype is known; shapes are lists of non-negative ints; dtype x shape
equals the byte span; spans lie inside the file and do not overlap; sharded index file names
stay inside the checkpoint directory.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3kit.atomic import atomic_write_json, save_safetensors
from eagle3kit.errors import Eagle3Error, bad

# Bytes per element of each safetensors dtype.
DTYPE_SIZES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U64": 8, "U32": 4, "U16": 2, "U8": 1,
    "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "C64": 8,
}  # fmt: skip
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors library's own limit
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


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


@dataclass
class Checkpoint:
    """A model directory or Hub repo described from its config and safetensors headers only."""

    source: str  # what the user named (dir or repo id)
    config: dict[str, Any]
    config_file: str
    tensors: dict[str, TensorInfo]
    files: list[str]
    repo_id: str | None = None  # set for Hub checkpoints
    revision: str | None = None
    has_tokenizer: bool = False
    tokenizer_file: str | None = None

    def read_small_tensor(self, name: str, max_bytes: int = 64 * 1024 * 1024):
        return read_small_tensor(self, name, max_bytes)


def parse_header(raw: bytes, file_size: int, where: str) -> dict[str, TensorInfo]:
    """Validate one safetensors header (`raw` = the file's first bytes) against the file size."""
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
        raise bad(where, f"header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise bad(where, f"header: expected a JSON object, found {type(header).__name__}")
    data_start = 8 + n
    data_len = file_size - data_start
    out: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
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
                f"tensor {name!r}: data_offsets must be [begin, end] with 0 <= begin <= end, found {offs!r}",
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
                f"tensor {name!r}: data_offsets {offs} end outside the file (data section is {data_len} bytes)",
            )
        out[name] = TensorInfo(
            name, dtype, tuple(shape), where, data_start + offs[0], data_start + offs[1]
        )
    spans = sorted((t.start, t.end, t.name) for t in out.values() if t.end > t.start)
    for (_s0, e0, n0), (s1, _e1, n1) in zip(spans, spans[1:], strict=False):
        if s1 < e0:
            raise bad(where, f"tensors {n0!r} and {n1!r} overlap in the file (byte {s1} < {e0})")
    return out


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
        raise bad(where, f"cannot read: {e.strerror or e}") from None
    return parse_header(head, size, where)


def _load_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise bad(str(path), f"cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise bad(str(path), "not UTF-8 text, expected JSON") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise bad(
            str(path), f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None


def _index_files(index_path: Path, root: Path) -> dict[str, str]:
    """weight_map of a sharded index, with every shard name checked to stay inside `root`."""
    index = _load_json(index_path)
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict) or not wmap:
        raise bad(
            str(index_path), "weight_map: expected a non-empty object of tensor name -> shard file"
        )
    root_resolved = root.resolve()
    for name, fname in wmap.items():
        if not isinstance(fname, str) or not fname:
            raise bad(
                str(index_path), f"weight_map[{name!r}]: expected a file name, found {fname!r}"
            )
        p = Path(fname)
        if (
            p.is_absolute()
            or ".." in p.parts
            or not (root / p).resolve().is_relative_to(root_resolved)
        ):
            raise bad(
                str(index_path),
                f"weight_map[{name!r}]: shard {fname!r} points outside the checkpoint directory",
            )
    return wmap


def load_local(path: str | Path) -> Checkpoint:
    """Describe a local checkpoint: a directory, or a single .safetensors file."""
    p = Path(path)
    if not p.exists():
        raise bad(str(p), "no such file or directory")
    if p.is_file():
        if p.suffix != ".safetensors":
            raise bad(
                str(p),
                f"expected a checkpoint directory or a .safetensors file, found a {p.suffix or 'plain'} file",
            )
        tensors = read_header_file(p)
        cfg_path = p.parent / "config.json"
        config = _load_json(cfg_path) if cfg_path.exists() else {}
        if not isinstance(config, dict):
            raise bad(str(cfg_path), f"expected a JSON object, found {type(config).__name__}")
        return Checkpoint(str(p), config, str(cfg_path), tensors, [str(p)])
    cfg_path = p / "config.json"
    if cfg_path.exists():
        config = _load_json(cfg_path)
        if not isinstance(config, dict):
            raise bad(str(cfg_path), f"expected a JSON object, found {type(config).__name__}")
    else:
        raise bad(
            str(p), "no config.json in the directory (expected a Hugging Face-style checkpoint)"
        )
    tensors: dict[str, TensorInfo] = {}
    files: list[str] = []
    indexes = sorted(p.glob("*.safetensors.index.json"))
    if indexes:
        wmap = _index_files(indexes[0], p)
        for fname in sorted(set(wmap.values())):
            shard = p / fname
            if not shard.exists():
                raise bad(str(indexes[0]), f"shard {fname!r} listed in weight_map is missing")
            hdr = read_header_file(shard)
            files.append(str(shard))
            for name, info in hdr.items():
                if wmap.get(name) == fname:
                    tensors[name] = info
        for name, fname in wmap.items():
            if name not in tensors:
                raise bad(
                    str(p / fname),
                    f"tensor {name!r} is listed in {indexes[0].name} but absent from the shard",
                )
    else:
        shards = sorted(p.glob("*.safetensors"))
        for shard in shards:
            for name, info in read_header_file(shard).items():
                if name in tensors:
                    raise bad(str(shard), f"tensor {name!r} also appears in {tensors[name].file}")
                tensors[name] = info
            files.append(str(shard))
    if not files:
        pickles = sorted(f.name for f in p.iterdir() if f.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise bad(
                str(p),
                f"only pickle weights found ({', '.join(pickles)}); eagle3kit reads only safetensors, "
                "because loading a pickle can run arbitrary code (convert it to safetensors first)",
            )
    has_tok = (p / "tokenizer.json").exists() or (p / "tokenizer_config.json").exists()
    tok = p / "tokenizer.json"
    return Checkpoint(str(p), config, str(cfg_path), tensors, files, has_tokenizer=has_tok,
                      tokenizer_file=str(tok) if tok.exists() else None)  # fmt: skip


def load_hub(repo_id: str, revision: str | None = None) -> Checkpoint:
    """Describe a Hub checkpoint from its config.json and safetensors headers (no weights).

    Uses huggingface_hub's header-only metadata API (HTTP range requests)."""
    try:
        from huggingface_hub import get_safetensors_metadata, hf_hub_download
        from huggingface_hub.utils import HfHubHTTPError
    except ImportError as e:  # pragma: no cover - huggingface_hub is a dependency
        raise Eagle3Error(f"huggingface_hub is needed to read {repo_id}: {e}") from None
    where = f"hf://{repo_id}"
    try:
        cfg_file = hf_hub_download(repo_id, "config.json", revision=revision)
        meta = get_safetensors_metadata(repo_id, revision=revision)
    except HfHubHTTPError as e:
        raise bad(where, f"Hub request failed: {str(e).splitlines()[0]}") from None
    except Exception as e:  # offline, not found, not safetensors ...
        raise bad(
            where,
            f"cannot read from the Hub: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
        ) from None
    config = _load_json(Path(cfg_file))
    tensors: dict[str, TensorInfo] = {}
    for fname, fmeta in meta.files_metadata.items():
        p = Path(fname)
        if p.is_absolute() or ".." in p.parts:
            raise bad(where, f"weight_map: shard {fname!r} points outside the repository")
        for name, t in fmeta.tensors.items():
            b, e = t.data_offsets
            if t.dtype not in DTYPE_SIZES:
                raise bad(f"{where}/{fname}", f"tensor {name!r}: unknown dtype {t.dtype!r}")
            if e - b != math.prod(t.shape) * DTYPE_SIZES[t.dtype]:
                raise bad(
                    f"{where}/{fname}",
                    f"tensor {name!r}: {t.dtype} x {list(t.shape)} does not match its byte span {e - b}",
                )
            # Offsets are relative to the data section; the header length is fetched on demand.
            tensors[name] = TensorInfo(name, t.dtype, tuple(t.shape), fname, b, e)
    return Checkpoint(
        where,
        config,
        cfg_file,
        tensors,
        sorted(meta.files_metadata),
        repo_id=repo_id,
        revision=revision,
    )


def load_checkpoint(path_or_repo: str) -> Checkpoint:
    """A local path when it exists, else a Hub repo id (`org/name`), else a clear error."""
    if os.path.exists(path_or_repo):
        return load_local(path_or_repo)
    if _REPO_ID.match(path_or_repo) and not path_or_repo.startswith((".", "/")):
        return load_hub(path_or_repo)
    raise bad(
        path_or_repo, "no such file or directory (and not a Hub repo id of the form org/name)"
    )


_NP_DTYPES = {"I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?",
              "F32": "<f4", "F64": "<f8", "F16": "<f2", "U16": "<u2", "U32": "<u4", "U64": "<u8"}  # fmt: skip


def read_small_tensor(ckpt: Checkpoint, name: str, max_bytes: int = 64 * 1024 * 1024):
    """Read one small tensor (d2t, t2d) as a numpy array; refuses anything over `max_bytes`."""
    import numpy as np

    info = ckpt.tensors[name]
    if info.nbytes > max_bytes:
        raise bad(
            info.file,
            f"tensor {name!r}: {info.nbytes} bytes is larger than an index tensor should be",
        )
    if info.dtype not in _NP_DTYPES:
        raise bad(info.file, f"tensor {name!r}: dtype {info.dtype} is not an index dtype")
    if ckpt.repo_id is None:
        with open(info.file, "rb") as f:
            f.seek(info.start)
            raw = f.read(info.nbytes)
    else:
        raw = _hub_range(ckpt, info)
    if len(raw) != info.nbytes:
        raise bad(info.file, f"tensor {name!r}: file ended after {len(raw)} of {info.nbytes} bytes")
    return np.frombuffer(raw, dtype=_NP_DTYPES[info.dtype]).reshape(info.shape)


def _hub_range(ckpt: Checkpoint, info: TensorInfo) -> bytes:
    """Fetch one tensor's bytes from a Hub file with HTTP range requests (8-byte length first)."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session

    url = hf_hub_url(ckpt.repo_id, info.file, revision=ckpt.revision)
    sess = get_session()

    def get(a: int, b: int) -> bytes:
        headers = {**build_hf_headers(), "Range": f"bytes={a}-{b}"}
        try:  # httpx (huggingface_hub >= 1.0) needs follow_redirects; requests follows by default
            r = sess.get(url, headers=headers, timeout=60, follow_redirects=True)
        except TypeError:
            r = sess.get(url, headers=headers, timeout=60)
        r.raise_for_status()
        return r.content

    (n,) = struct.unpack("<Q", get(0, 7)[:8])
    return get(8 + n + info.start, 8 + n + info.end - 1)


# ---------------------------------------------------------------- writing


def write_safetensors(
    path: str | Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None
) -> None:
    """Write torch tensors to `path` atomically (eagle3kit.atomic; the file respects the umask)."""
    save_safetensors(path, tensors, metadata)


def write_json(path: str | Path, doc: Any) -> None:
    """Write JSON atomically (eagle3kit.atomic; the file respects the umask)."""
    atomic_write_json(path, doc)


SPARSE_CHUNK = 1 << 20  # bytes: an all-zero run this long becomes a hole in the file


def _tensor_bytes(t: Any):
    """The raw little-endian bytes of a torch tensor as a numpy uint8 view (no copy if contiguous)."""
    import torch

    return t.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy()  # [nbytes]


def write_safetensors_sparse(
    path: str | Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None
) -> int:
    """Write a safetensors file whose all-zero runs stay holes (seek past them); returns the bytes
    actually written. Atomic (eagle3kit.atomic), mode from the umask; the safetensors library
    reads it back like any other file (tensors in name order, contiguous, 8-byte aligned header).
    """
    import numpy as np

    from eagle3kit.atomic import atomic_open

    names = sorted(tensors)
    dtypes = {v: k for k, v in _torch_dtypes().items()}
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for n in names:
        t = tensors[n]
        if t.dtype not in dtypes:
            raise bad(str(path), f"tensor {n!r}: dtype {t.dtype} has no safetensors name")
        size = t.numel() * t.element_size()
        header[n] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}  # fmt: skip
        offset += size
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    written = 0
    with atomic_open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)) + hjson)
        base = 8 + len(hjson)
        for n in names:
            raw = _tensor_bytes(tensors[n])  # [nbytes] uint8
            start = base + header[n]["data_offsets"][0]
            for a in range(0, raw.shape[0], SPARSE_CHUNK):
                chunk = raw[a : a + SPARSE_CHUNK]
                if np.any(chunk):
                    f.seek(start + a)
                    f.write(chunk.tobytes())
                    written += chunk.shape[0]
        f.truncate(base + offset)
    return written


def _torch_dtypes() -> dict[str, Any]:
    import torch

    return {
        "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
        "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
        "U8": torch.uint8, "BOOL": torch.bool,
        "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    }  # fmt: skip
