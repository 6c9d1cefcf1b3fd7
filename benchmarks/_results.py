"""Result files under benchmarks/results/ (what a README or docs figure quotes) and lab/results/.

Every file carries the command that produced it, the commit it ran at (with a flag when the
work tree had uncommitted changes) and the environment, beside "kind" and "schema".
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from eagle3kit.core.atomic import atomic_write_json
from eagle3kit.core.environment import environment_info

RESULTS = Path(__file__).parent / "results"


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


def write_result(path: str | Path, kind: str, doc: dict) -> Path:
    """Write ``doc`` with kind, schema, command, commit and environment, atomically."""
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
    atomic_write_json(path, full)
    return path


def load(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())
