"""Atomic writes: a reader (or a rerun after kill -9) sees the old file or the new one, never half.

Every writer in eagle3kit goes through here: write a temp file in the destination's folder,
fsync, rename over the destination, fsync the folder. Files get the mode the user's umask
gives a new file (not mkstemp's 0600), so an engine running as another user can read them.

A folder is replaced by exchanging the two names in one step (Linux ``renameat2`` with
``RENAME_EXCHANGE``, on ext4, xfs, btrfs, tmpfs and overlayfs), so the destination always
holds the old folder whole or the new one whole. Where the filesystem cannot exchange (NFS,
FAT, another OS) the old folder is moved aside first and the new one renamed in: a crash in
that instant leaves the old folder beside the destination under ``.NAME.old-PID``, and the
next write to the destination puts it back before it starts.

Each replace passes two stop points (``core/stops.py``), before and after it, where the kill
tests stop a job to kill it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import functools
import glob
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from eagle3kit.core.stops import stop_point


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
        stop_point("before", path)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    stop_point("after", path)


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

    A reader (or a rerun after kill -9) finds the old folder whole or the new one whole under
    `path`, never a mix and never nothing (module doc). The temp sibling's name carries the
    writer's pid; the next write to `path` removes those of writers no longer running.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _restore_aside(path)
    _remove_dead_temps(path)
    prefix = f".{path.name}.{os.getpid()}."
    tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=path.parent))
    os.chmod(tmp, _umask_mode(0o777))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(tmp)
    stop_point("before", path)
    old = _swap_in(tmp, path)
    _fsync_dir(path.parent)
    stop_point("after", path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _swap_in(new: Path, path: Path) -> Path | None:
    """Put the folder `new` at `path` in one step; the old folder's new name (to delete), or
    None when there was none."""
    if not path.exists():
        os.replace(new, path)
        return None
    if exchange(new, path):
        return new
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    os.replace(path, old)
    os.replace(new, path)
    return old


def _restore_aside(path: Path) -> None:
    """A write interrupted between its two renames (no exchange here) left `path` missing and
    the old folder aside: put it back."""
    if path.exists():
        return
    found = path.parent.glob(f".{glob.escape(path.name)}.old-*")
    aside = sorted(found, key=lambda p: p.stat().st_mtime)
    if aside:
        os.replace(aside[-1], path)


def _remove_dead_temps(path: Path) -> None:
    """Temp siblings `.NAME.PID.*.tmp` left by writers killed before they finished."""
    for p in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = p.name[len(path.name) + 2 :].split(".", 1)[0]
        if p.is_dir() and pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def exchange(a: str | Path, b: str | Path) -> bool:
    """Swap the names `a` and `b` atomically (renameat2 RENAME_EXCHANGE): True when done,
    False where this OS or filesystem cannot (then nothing changed)."""
    fn = _renameat2()
    if fn is None:
        return False
    rc = fn(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, f"renameat2 {a} <-> {b}: {os.strerror(err)}")


@functools.cache
def _renameat2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):  # glibc < 2.28, musl without it
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn
