"""Bounds-checked safetensors headers, for single files, sharded checkpoints and Hub repos.

Nothing here reads weight bytes: a checkpoint is described by its headers alone. The only
tensors ever read are small index tensors (d2t, t2d), through `read_small_tensor`, which uses
numpy (no torch import, so `inspect` and `compat` start fast).
`read_tensor` (torch, imported on call) reads one
named tensor by its span, for engine capture's final norm and lm_head.

Checks made on every header (docs/formats.md "Reading safetensors safely"): the header length
fits in the file; the header is a JSON object; every dtype is known; shapes are lists of
non-negative ints; dtype x shape equals the byte span; spans lie inside the file and do not
overlap; sharded index file names stay inside the checkpoint directory.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from eagle3kit.core.environment import hub_offline
from eagle3kit.core.errors import Eagle3Error, bad

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


def _load_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise bad(str(path), f"cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise bad(str(path), "not UTF-8 text, expected JSON") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise bad(str(path), f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from e


def _index_files(index: Any, where: str, root: Path | None) -> dict[str, str]:
    """weight_map of a sharded index, each shard name checked to stay inside the checkpoint
    (`root`: the local folder, whose symlinks are resolved too; None for a Hub repo)."""
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict) or not wmap:
        raise bad(where, "weight_map: expected a non-empty object of tensor name -> shard file")
    for name, fname in wmap.items():
        if not isinstance(fname, str) or not fname:
            raise bad(where, f"weight_map[{name!r}]: expected a file name, found {fname!r}")
        p = Path(fname)
        outside = p.is_absolute() or ".." in p.parts
        if root is not None and not outside:
            outside = not (root / p).resolve().is_relative_to(root.resolve())
        if outside:
            raise bad(
                where,
                f"weight_map[{name!r}]: shard {fname!r} points outside the checkpoint directory",
            )
    return wmap


class _Files(Protocol):
    """Where a checkpoint's files come from. `_Folder` and `_HubRepo` differ only in how bytes
    are fetched; `_read_tensors` below is the one code path that checks and merges headers."""

    where: str

    def names(self) -> list[str]: ...  # top-level file names
    def exists(self, rel: str) -> bool: ...
    def label(self, rel: str) -> str: ...  # for messages
    def read_json(self, rel: str) -> Any: ...
    def header(self, rel: str) -> dict[str, TensorInfo]: ...


class _Folder:
    def __init__(self, root: Path) -> None:
        self.root, self.where = root, str(root)

    def names(self) -> list[str]:
        return sorted(f.name for f in self.root.iterdir() if f.is_file())

    def exists(self, rel: str) -> bool:
        return (self.root / rel).exists()

    def label(self, rel: str) -> str:
        return str(self.root / rel)

    def read_json(self, rel: str) -> Any:
        return _load_json(self.root / rel)

    def header(self, rel: str) -> dict[str, TensorInfo]:
        return read_header_file(self.root / rel)


def _read_tensors(src: _Files) -> tuple[dict[str, TensorInfo], list[str]]:
    """Every tensor of a folder or repo (sharded index or plain *.safetensors), all headers
    checked by parse_header; a tensor in two shards, or listed and absent, is an error."""
    names = src.names()
    indexes = [n for n in names if n.endswith(".safetensors.index.json")]
    tensors: dict[str, TensorInfo] = {}
    files: list[str] = []
    if indexes:
        iwhere = src.label(indexes[0])
        wmap = _index_files(src.read_json(indexes[0]), iwhere, getattr(src, "root", None))
        for fname in sorted(set(wmap.values())):
            if not src.exists(fname):
                raise bad(iwhere, f"shard {fname!r} listed in weight_map is missing")
            files.append(src.label(fname))
            for name, info in src.header(fname).items():
                if wmap.get(name) == fname:
                    tensors[name] = info
        for name, fname in wmap.items():
            if name not in tensors:
                raise bad(
                    src.label(fname),
                    f"tensor {name!r} is listed in {indexes[0]} but absent from the shard",
                )
    else:
        first: dict[str, str] = {}  # tensor name -> the file that holds it
        for fname in (n for n in names if n.endswith(".safetensors")):
            for name, info in src.header(fname).items():
                if name in first:
                    raise bad(
                        src.label(fname),
                        f"tensor {name!r} also appears in {src.label(first[name])}",
                    )
                first[name] = fname
                tensors[name] = info
            files.append(src.label(fname))
    pickles = [n for n in names if Path(n).suffix in PICKLE_SUFFIXES]
    if not files and pickles:
        raise bad(
            src.where,
            f"only pickle weights found ({', '.join(pickles)}); eagle3kit reads only safetensors, "
            "because loading a pickle can run arbitrary code (convert it to safetensors first)",
        )
    return tensors, files


def _config(src: _Files) -> dict[str, Any]:
    config = src.read_json("config.json")
    if not isinstance(config, dict):
        raise bad(
            src.label("config.json"), f"expected a JSON object, found {type(config).__name__}"
        )
    return config


def load_local(path: str | Path) -> Checkpoint:
    """Describe a local checkpoint: a directory, or a single .safetensors file."""
    p = Path(path)
    if not p.exists():
        raise bad(str(p), "no such file or directory")
    if p.is_file():
        if p.suffix != ".safetensors":
            raise bad(
                str(p),
                "expected a checkpoint directory or a .safetensors file, found a "
                f"{p.suffix or 'plain'} file",
            )
        tensors = read_header_file(p)
        cfg_path = p.parent / "config.json"
        config = _config(_Folder(p.parent)) if cfg_path.exists() else {}
        return Checkpoint(str(p), config, str(cfg_path), tensors, [str(p)])
    src = _Folder(p)
    if not (p / "config.json").exists():
        raise bad(
            str(p), "no config.json in the directory (expected a Hugging Face-style checkpoint)"
        )
    config = _config(src)
    tensors, files = _read_tensors(src)
    tok = p / "tokenizer.json"
    has_tok = tok.exists() or (p / "tokenizer_config.json").exists()
    return Checkpoint(
        str(p),
        config,
        str(p / "config.json"),
        tensors,
        files,
        has_tokenizer=has_tok,
        tokenizer_file=str(tok) if tok.exists() else None,
    )


# ---------------------------------------------------------------- the Hub

HUB_TIMEOUT = 10.0  # seconds per request; no retries (a mistyped local path fails fast)


class _HubStatus(Exception):
    def __init__(self, status: int, url: str) -> None:
        super().__init__(f"HTTP {status} for {url}")
        self.status = status


def _http_get(url: str, rng: tuple[int, int] | None = None) -> tuple[bytes, int | None]:
    """(body, total file size from Content-Range or None): one request, short timeout."""
    from huggingface_hub.utils import build_hf_headers, get_session

    headers = dict(build_hf_headers())
    if rng is not None:
        headers["Range"] = f"bytes={rng[0]}-{rng[1]}"
    sess = get_session()
    try:  # httpx (huggingface_hub >= 1.0) needs follow_redirects; requests follows by default
        r = sess.get(url, headers=headers, timeout=HUB_TIMEOUT, follow_redirects=True)
    except TypeError:
        r = sess.get(url, headers=headers, timeout=HUB_TIMEOUT)
    status = int(getattr(r, "status_code", 200))
    if status >= 400:
        raise _HubStatus(status, url)
    body, cr = r.content, (getattr(r, "headers", None) or {}).get("Content-Range")
    if rng is None:
        return body, len(body)
    if status == 206 and cr and "/" in cr and cr.rsplit("/", 1)[1].isdigit():
        return body, int(cr.rsplit("/", 1)[1])
    if status == 200:  # the server ignored Range and sent the whole file
        return body[rng[0] : rng[1] + 1], len(body)
    return body, None


class _HubRepo:
    def __init__(self, repo_id: str, revision: str | None) -> None:
        self.repo_id, self.revision, self.where = repo_id, revision, f"hf://{repo_id}"
        from huggingface_hub import constants

        api = f"{constants.ENDPOINT}/api/models/{repo_id}"
        if revision:
            api += f"/revision/{revision}"
        info = _hub_call(self.where, lambda: json.loads(_http_get(api)[0]))
        sib = info.get("siblings") if isinstance(info, dict) else None
        if not isinstance(sib, list):
            raise bad(self.where, f"Hub model info: expected a list of siblings, found {sib!r}")
        self._names = sorted(
            s["rfilename"]
            for s in sib
            if isinstance(s, dict) and isinstance(s.get("rfilename"), str)
        )

    def url(self, rel: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.repo_id, rel, revision=self.revision)

    def names(self) -> list[str]:
        return [n for n in self._names if "/" not in n]

    def exists(self, rel: str) -> bool:
        return rel in self._names

    def label(self, rel: str) -> str:
        return f"{self.where}/{rel}"

    def read_json(self, rel: str) -> Any:
        raw = _hub_call(self.label(rel), lambda: _http_get(self.url(rel))[0])
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise bad(self.label(rel), f"not valid JSON: {e}") from e

    def header(self, rel: str) -> dict[str, TensorInfo]:
        """The same bytes read_header_file reads, by range requests; header length read once."""
        where, url = self.label(rel), self.url(rel)
        head, size = _hub_call(where, lambda: _http_get(url, (0, 7)))
        if size is None:
            raise bad(where, "expected the file size in the Hub's Content-Range reply, found none")
        if len(head) == 8:
            (n,) = struct.unpack("<Q", head)
            if 0 < n <= MAX_HEADER_BYTES and 8 + n <= size:
                head += _hub_call(where, lambda: _http_get(url, (8, 8 + n - 1))[0])
        return parse_header(head, size, where, file=rel)


def _hub_call(where: str, fn: Any) -> Any:
    """Run one Hub request; any failure becomes one line naming `where` (cause chained)."""
    try:
        return fn()
    except Eagle3Error:
        raise
    except _HubStatus as e:
        raise bad(where, f"Hub request failed: {e}") from e
    except Exception as e:  # offline, DNS, timeout ... (kept as __cause__ for --debug)
        first = str(e).splitlines()[0] if str(e) else ""
        raise bad(where, f"cannot read from the Hub: {type(e).__name__}: {first}") from e


def load_hub(repo_id: str, revision: str | None = None) -> Checkpoint:
    """Describe a Hub checkpoint from its config.json and safetensors headers (no weights),
    through the same header checks as a local folder (range requests, no retries)."""
    src = _HubRepo(repo_id, revision)
    if not src.exists("config.json"):
        raise bad(
            src.where, "no config.json in the repo (expected a Hugging Face-style checkpoint)"
        )
    config = _config(src)
    tensors, files = _read_tensors(src)
    tok_file = None
    if src.exists("tokenizer.json"):
        from huggingface_hub import hf_hub_download

        tok_file = _hub_call(
            src.label("tokenizer.json"),
            lambda: hf_hub_download(repo_id, "tokenizer.json", revision=revision),
        )
    has_tok = src.exists("tokenizer.json") or src.exists("tokenizer_config.json")
    return Checkpoint(
        src.where,
        config,
        src.label("config.json"),
        tensors,
        [f.removeprefix(src.where + "/") for f in files],
        repo_id=repo_id,
        revision=revision,
        has_tokenizer=has_tok,
        tokenizer_file=tok_file,
    )


def looks_like_repo_id(p: str) -> bool:
    """`org/name` and not a relative or absolute path (`./x`, `/x`)."""
    return bool(_REPO_ID.match(p)) and not p.startswith((".", "/"))


def load_checkpoint(path_or_repo: str) -> Checkpoint:
    """A local path when it exists, else a Hub repo id (`org/name`), else a clear error.

    A missing path of the form `dir/name` names both readings in one line, without network
    retries: at once when `dir` exists locally or HF_HUB_OFFLINE is set."""
    p = path_or_repo
    if os.path.exists(p):
        return load_local(p)
    if not looks_like_repo_id(p):
        raise bad(p, "no such file or directory (and not a Hub repo id of the form org/name)")
    first = p.split("/")[0]
    if os.path.isdir(first):
        raise bad(
            p,
            f"no such local path (folder {first}/ exists here, so it is not tried as a Hub repo "
            "id)",
        )
    if hub_offline():
        raise bad(
            p,
            "no such local path; as a Hub repo id it cannot be read offline (HF_HUB_OFFLINE is "
            "set)",
        )
    try:
        return load_hub(p)
    except Eagle3Error as e:
        raise bad(p, f"no such local path, and as a Hub repo id: {e}") from e


_NP_DTYPES = {
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "?",
    "F32": "<f4",
    "F64": "<f8",
    "F16": "<f2",
    "U16": "<u2",
    "U32": "<u4",
    "U64": "<u8",
}


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
        raw = hub_range(ckpt, info)
    if len(raw) != info.nbytes:
        raise bad(info.file, f"tensor {name!r}: file ended after {len(raw)} of {info.nbytes} bytes")
    return np.frombuffer(raw, dtype=_NP_DTYPES[info.dtype]).reshape(info.shape)


def hub_range(ckpt: Checkpoint, info: TensorInfo) -> bytes:
    """One tensor's bytes from a Hub file: one range request (offsets are absolute)."""
    from huggingface_hub import hf_hub_url

    if info.nbytes == 0:
        return b""
    url = hf_hub_url(ckpt.repo_id, info.file, revision=ckpt.revision)
    return _hub_call(
        f"{ckpt.source}/{info.file}", lambda: _http_get(url, (info.start, info.end - 1))[0]
    )
