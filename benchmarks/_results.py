"""Result files under benchmarks/results/ (what a README or docs figure quotes) and lab/results/.

Every file carries the command that produced it, the commit it ran at (with a flag when the
work tree had uncommitted changes) and the environment, beside "kind" and "schema".
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from eagle3kit.core.atomic import atomic_write_json
from eagle3kit.core.environment import environment_info

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parents[1]

# An absolute path inside a string: at its start or after a space, quote, '=', '(', ',', ':'
# or '[', and at least two components ("/tmp/x"; "/metrics" is an endpoint, not a path).
ABSOLUTE = re.compile(r"(?:^|(?<=[\s='\"(,:\[]))/[\w.+-]+(?:/[\w.+-]*)+")
# Folders of this repository, wherever a checkout of it lay (another worktree's included).
IN_REPO = re.compile(r"/((?:src/eagle3kit|benchmarks|tests|lab|docs)(?:/.*)?)$")


def git_commit() -> dict:
    """{"commit": HEAD's sha or None, "dirty": uncommitted changes to tracked files}."""
    root = Path(__file__).parent

    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        except OSError:
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    # result files are outputs, not code: one benchmark's result written before another
    # runs does not make the second one's code state dirty
    status = git(
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ":(top)",
        ":(top,exclude)benchmarks/results",
        ":(top,exclude)lab/results",
    )
    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(status) if status is not None else None,
    }


# The code state when the benchmark started (benchmarks/_env.py, which every benchmark imports
# first, imports this module): a run of many minutes records the commit it ran, not one made
# while it ran; where the state changed before the file is written, the file says so.
AT_START = git_commit()


def code_state() -> dict:
    """{"commit", "dirty"} at the start, and "changed_during_run" when HEAD or the work tree
    differ at the end."""
    end = git_commit()
    return {**AT_START, **({"changed_during_run": True} if end != AT_START else {})}


def _anchors() -> list[tuple[str, str]]:
    """(absolute prefix, what a reader is told instead), most specific first."""
    home = os.environ.get("EAGLE3KIT_HOME") or str(Path.home() / ".cache" / "eagle3kit")
    pairs = [
        (str(ROOT), "."),
        (os.path.realpath(home), "$EAGLE3KIT_HOME"),
        (os.path.realpath(tempfile.gettempdir()), "$TMPDIR"),
        ("/tmp", "$TMPDIR"),
        (str(Path.home()), "~"),
    ]
    return sorted({a: b for a, b in pairs}.items(), key=lambda p: -len(p[0]))


def portable_path(path: str) -> str:
    """An absolute path of the machine that ran the benchmark, as a reader elsewhere can use
    it: relative to the repository, under $EAGLE3KIT_HOME, $TMPDIR or ~, else "…/" and its
    last two components."""
    if m := IN_REPO.search(path):
        return m.group(1)
    for prefix, name in _anchors():
        if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
            rest = path[len(prefix) :].lstrip("/")
            if name == ".":
                return rest or "."
            return f"{name}/{rest}".rstrip("/")
    return "…/" + "/".join(Path(path).parts[-2:])


def portable(obj: Any) -> Any:
    """``obj`` with every absolute path in its strings made portable (``portable_path``)."""
    if isinstance(obj, dict):
        return {portable(k): portable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [portable(v) for v in obj]
    if isinstance(obj, str):
        return ABSOLUTE.sub(lambda m: portable_path(m.group(0)), obj)
    return obj


def write_result(path: str | Path, kind: str, doc: dict) -> Path:
    """Write ``doc`` with kind, schema, command, commit and environment, atomically; absolute
    paths of this machine in it are written portably (``portable``)."""
    cmd = "python " + " ".join(shlex.quote(x) for x in sys.argv)
    full = {
        "kind": kind,
        "schema": 1,
        "command": cmd,
        **code_state(),
        "environment": environment_info(),
        **doc,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, portable(full))
    return path


def load(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())
