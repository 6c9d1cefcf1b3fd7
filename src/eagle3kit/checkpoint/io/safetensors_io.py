"""Checkpoints described by their safetensors headers: single files, sharded folders, Hub repos.

Nothing here reads weight bytes: a checkpoint is described by its headers alone. The only
tensors ever read are small index tensors (d2t, t2d), through `read_small_tensor`, which uses
numpy (no torch import, so `inspect` and `compat` start fast).
`read_tensor` (torch, imported on call) reads one
named tensor by its span, for engine capture's final norm and lm_head.

Every header goes through `headers.parse_header`
(docs/formats.md "Reading safetensors safely"); sharded index file names must stay inside the
checkpoint directory. A sharded checkpoint may be partial (a download of only some shards):
the tensors of absent shards are recorded as `Checkpoint.absent`, and only a reader that needs
one of them is refused, with the shard named (`Checkpoint.info`; a drafter is always read
whole: `Checkpoint.require_complete`).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from eagle3kit.checkpoint.io.headers import (  # re-exported: the one header reader
    DTYPE_SIZES,
    MAX_HEADER_BYTES,
    TensorInfo,
    parse_header,
    read_header_file,
)
from eagle3kit.core.environment import hub_offline
from eagle3kit.core.errors import Eagle3Error, bad

__all__ = ["DTYPE_SIZES", "Checkpoint", "TensorInfo", "parse_header", "read_header_file"]

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


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
    # A partial checkpoint: tensors the index lists in shards that are not here (name -> shard
    # file name), the index that lists them, and how to fetch a shard (a Hub cache), if any.
    absent: dict[str, str] = field(default_factory=dict)
    index_file: str | None = None
    fetch: Callable[[str], str] | None = None

    def read_small_tensor(self, name: str, max_bytes: int = 64 * 1024 * 1024):
        return read_small_tensor(self, name, max_bytes)

    def names(self) -> list[str]:
        """Every tensor name the checkpoint lists, in present shards or absent ones."""
        return sorted({*self.tensors, *self.absent})

    def missing_shards(self) -> list[str]:
        return sorted(set(self.absent.values()))

    def require_complete(self) -> None:
        """Fetch every absent shard (a Hub cache), or refuse a partial checkpoint (a drafter is
        always read whole)."""
        if self.absent and self.fetch is not None:
            for shard in self.missing_shards():
                self._add_shard(shard, self.fetch(shard))
        if self.absent:
            shard = self.missing_shards()[0]
            where = self.index_file or self.source
            raise bad(where, f"shard {shard!r} listed in weight_map is missing")

    def info(self, name: str) -> TensorInfo:
        """Where tensor `name` lives; a tensor in an absent shard is fetched when the checkpoint
        can fetch (a Hub cache), else refused naming the shard that holds it."""
        if name in self.tensors:
            return self.tensors[name]
        shard = self.absent.get(name)
        if shard is None:
            raise bad(self.source, f"tensor {name!r}: not in the checkpoint")
        if self.fetch is None:
            raise bad(
                self.index_file or self.source,
                f"tensor {name!r} is in shard {shard!r}, which is not here (a partial "
                "download: add that shard)",
            )
        self._add_shard(shard, self.fetch(shard))
        return self.tensors[name]

    def _add_shard(self, shard: str, path: str) -> None:
        """Merge a fetched shard's checked header (the tensors the index puts in it)."""
        header = read_header_file(path)
        for n in [n for n, f in self.absent.items() if f == shard]:
            if n not in header:
                raise bad(path, f"tensor {n!r} is listed in the index but absent from the shard")
            self.tensors[n] = header[n]
            del self.absent[n]
        self.files.append(path)


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


@dataclass
class _Found:
    """What a folder or repo holds: present tensors, their files, and (partial) absent ones."""

    tensors: dict[str, TensorInfo]
    files: list[str]
    absent: dict[str, str] = field(default_factory=dict)  # tensor -> shard not present
    index_file: str | None = None


def _read_tensors(src: _Files) -> _Found:
    """Every tensor of a folder or repo (sharded index or plain *.safetensors), all headers
    checked by parse_header; a tensor in two shards, or listed and absent from a present shard,
    is an error. Shards the index lists that are not present make the checkpoint partial:
    their tensors are recorded as absent (a reader that needs one names the shard)."""
    names = src.names()
    indexes = [n for n in names if n.endswith(".safetensors.index.json")]
    found = _read_indexed(src, indexes[0]) if indexes else _read_plain(src, names)
    pickles = [n for n in names if Path(n).suffix in PICKLE_SUFFIXES]
    if not found.files and not found.absent and pickles:
        raise bad(
            src.where,
            f"only pickle weights found ({', '.join(pickles)}); eagle3kit reads only safetensors, "
            "because loading a pickle can run arbitrary code (convert it to safetensors first)",
        )
    return found


def _read_indexed(src: _Files, index: str) -> _Found:
    iwhere = src.label(index)
    wmap = _index_files(src.read_json(index), iwhere, getattr(src, "root", None))
    found = _Found({}, [], index_file=iwhere)
    for fname in sorted(set(wmap.values())):
        if not src.exists(fname):
            found.absent.update({n: f for n, f in wmap.items() if f == fname})
            continue
        found.files.append(src.label(fname))
        for name, info in src.header(fname).items():
            if wmap.get(name) == fname:
                found.tensors[name] = info
    for name, fname in wmap.items():
        if name not in found.tensors and name not in found.absent:
            raise bad(
                src.label(fname),
                f"tensor {name!r} is listed in {index} but absent from the shard",
            )
    return found


def _read_plain(src: _Files, names: list[str]) -> _Found:
    found = _Found({}, [])
    first: dict[str, str] = {}  # tensor name -> the file that holds it
    for fname in (n for n in names if n.endswith(".safetensors")):
        for name, info in src.header(fname).items():
            if name in first:
                raise bad(
                    src.label(fname),
                    f"tensor {name!r} also appears in {src.label(first[name])}",
                )
            first[name] = fname
            found.tensors[name] = info
        found.files.append(src.label(fname))
    return found


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
    found = _read_tensors(src)
    tok = p / "tokenizer.json"
    has_tok = tok.exists() or (p / "tokenizer_config.json").exists()
    return Checkpoint(
        str(p),
        config,
        str(p / "config.json"),
        found.tensors,
        found.files,
        has_tokenizer=has_tok,
        tokenizer_file=str(tok) if tok.exists() else None,
        absent=found.absent,
        index_file=found.index_file,
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
    found = _read_tensors(src)
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
        found.tensors,
        [f.removeprefix(src.where + "/") for f in found.files],
        repo_id=repo_id,
        revision=revision,
        has_tokenizer=has_tok,
        tokenizer_file=tok_file,
        absent=found.absent,
        index_file=found.index_file,
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
