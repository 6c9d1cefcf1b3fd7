"""What produced a run directory: RUN/config.toml (the resolved options, a file `--config`
reads back) and RUN/provenance.json (kind `eagle3kit.provenance`).

    {"kind": "eagle3kit.provenance", "schema": 1,
     "command": ["eagle3kit", "train", ...],        the command line as given
     "config": "config.toml",                       `train --config RUN/config.toml -o NEW`
     "code": {"eagle3kit": "0.x", "commit": sha | null, "dirty": bool | null},
     "versions": {"python", "torch", "transformers", "safetensors", ...},
     "device": {"name": "cpu", "cpu": "...", "cuda": "..."},
     "inputs": {"data": {"path", "sha256", "of"}, "init_from": {...}, ...},
     "time": "2026-...Z",
     "resumed": [{"command", "code", "time"}, ...]}  each later `--resume` of the run

An input's digest is the sha256 of what identifies it: DATA's data.json and a feature store's
manifest.json (each lists its shards' sha256), a file's bytes, a drafter directory's files
(sha256 over their names and digests, `of` lists them). A hub id is recorded as given.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from eagle3kit.core.artifacts import stamp
from eagle3kit.core.atomic import atomic_write_json
from eagle3kit.core.config_file import read_config, write_config
from eagle3kit.core.digest import sha256_file
from eagle3kit.core.options import recorded

CONFIG = "config.toml"
PROVENANCE = "provenance.json"
PACKAGES = ("eagle3kit", "torch", "transformers", "safetensors", "numpy", "typer", "pyyaml")
IDENTITY = ("data.json", "manifest.json")  # a directory identified by this one file


def write(
    run: str | Path,
    options: Any,
    *,
    command: list[str],
    device: str,
    inputs: dict[str, str | None],
    verb: str = "train",
) -> dict[str, Any]:
    """RUN/config.toml (when absent: a resumed run keeps the one it started with) and
    RUN/provenance.json (a resumed run's adds this invocation under "resumed"); the document."""
    run = Path(run)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if not (run / CONFIG).is_file():
        head = (
            f"eagle3kit {verb}: the options of this run ({now}); "
            f"`eagle3kit {verb} --config {CONFIG} -o NEW` runs it again"
        )
        write_config(run / CONFIG, recorded(options), header=head)
    old = _read(run / PROVENANCE)
    if old is not None:
        again = {"command": command, "code": code_state(), "time": now}
        doc = {**old, "resumed": [*old.get("resumed", []), again]}
    else:
        doc = stamp(
            {
                "command": command,
                "config": CONFIG,
                "code": code_state(),
                "versions": versions(),
                "device": describe_device(device),
                "inputs": {k: digest(v) for k, v in inputs.items() if v is not None},
                "time": now,
            },
            "provenance",
        )
    atomic_write_json(run / PROVENANCE, doc)
    return doc


def read_back(run: str | Path, options: type) -> dict[str, Any]:
    """RUN/config.toml's values, read as `--config` reads them (a check that it reads back)."""
    return read_config(Path(run) / CONFIG, options)


def _read(path: Path) -> dict[str, Any] | None:
    import json

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def code_state() -> dict[str, Any]:
    """The package's version, and its git commit and whether the tree had uncommitted changes
    to tracked files (null when the package is not in a git checkout)."""
    here = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    # the checkout this package was loaded from (not a repository that merely holds a venv)
    tracked = git("ls-files", "--error-unmatch", "core/provenance.py") is not None
    commit = git("rev-parse", "HEAD") if tracked else None
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {
        "eagle3kit": _version("eagle3kit"),
        "commit": commit,
        "dirty": bool(status) if status is not None else None,
    }


def versions() -> dict[str, str | None]:
    """Python and the installed versions of the packages a run rests on."""
    return {"python": sys.version.split()[0], **{p: _version(p) for p in PACKAGES}}


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe_device(device: str) -> dict[str, Any]:
    """The device by name, the CPU's model, and the accelerator's name when torch is loaded."""
    from eagle3kit.core.environment import environment_info

    env = environment_info()
    out: dict[str, Any] = {"name": device, "cpu": env["cpu"], "cpu_count": env["cpu_count"]}
    torch = sys.modules.get("torch")
    if torch is not None and not device.startswith("cpu") and torch.cuda.is_available():
        out["accelerator"] = torch.cuda.get_device_name(torch.device(device))
    if "threads" in env:
        out["threads"] = env["threads"]
    return out


def digest(path: str) -> dict[str, Any]:
    """{"path", "sha256", "of"} of an input (module docstring); a path that is not here (a hub
    id) is recorded as given, sha256 null."""
    p = Path(path)
    if p.is_file():
        return {"path": path, "sha256": sha256_file(p), "of": [p.name]}
    if not p.is_dir():
        return {"path": path, "sha256": None, "of": []}
    for name in IDENTITY:
        if (p / name).is_file():
            return {"path": path, "sha256": sha256_file(p / name), "of": [name]}
    files = sorted(f for f in p.rglob("*") if f.is_file())
    h = hashlib.sha256()
    names = []
    for f in files:
        rel = f.relative_to(p).as_posix()
        h.update(f"{rel}\0{sha256_file(f)}\n".encode())
        names.append(rel)
    return {"path": path, "sha256": h.hexdigest(), "of": names}
