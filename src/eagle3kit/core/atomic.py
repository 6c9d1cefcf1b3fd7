"""Atomic writes: a reader (or a rerun after kill -9) sees the old file or the new one, never half.

Every writer in eagle3kit goes through here: write a temp file in the destination's folder,
fsync, rename over the destination, fsync the folder. Files get the mode the user's umask
gives a new file (not mkstemp's 0600), so an engine running as another user can read them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any


def _umask_mode(base: int = 0o666) -> int:
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a folder be fsynced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[str]:
    """Yield a temp file name beside `path`; when the block ends, fsync it and rename it over
    `path` (mode from the umask); on any error the temp file is removed and `path` untouched."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, _umask_mode())
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """`with atomic_open(p, "w") as f: f.write(...)`: p appears complete, or not at all."""
    with _replacing(Path(path)) as tmp, open(tmp, mode) as f:
        yield f


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def atomic_write_json(path: str | Path, obj: Any, *, indent: int | None = 2) -> None:
    atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=False) + "\n")


def atomic_write_with(path: str | Path, write: Callable[[str], None]) -> None:
    """For writers that want a file name (safetensors' save_file, matplotlib's savefig):
    `write(tmp_name)` writes the temp file, which is then fsynced and renamed into place."""
    with _replacing(Path(path)) as tmp:
        write(tmp)


def save_safetensors(
    path: str | Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None
) -> None:
    """torch tensors -> safetensors file, atomically."""
    from safetensors.torch import save_file

    atomic_write_with(
        path, lambda tmp: save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata)
    )


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Build a whole folder in a temp sibling; it replaces `path` only when the block ends.

    An existing `path` is moved aside first and deleted after the swap, so a crash leaves
    either the old folder or the new one under `path` (plus, at worst, a stale `.tmp` sibling).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, _umask_mode(0o777))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        os.replace(path, old)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
