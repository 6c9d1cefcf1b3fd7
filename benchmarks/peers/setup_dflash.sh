#!/usr/bin/env bash
# Build z-lab's `dflash` venv: torch 2.13.0 (CPU wheel) + dflash 0.1.0 (PyPI) + transformers.
#
#   bash benchmarks/peers/setup_dflash.sh        # prints the venv's python on stdout
#
# `dflash` on PyPI is z-lab's package (METADATA: Author "Z Lab", Homepage
# https://github.com/z-lab/dflash; dflash/model.py holds DFlashDraftModel and dflash_generate).
# It lists torch and transformers only under its `local` extra, pinned to torch==2.13.0 and
# transformers==5.15.0; they are installed here by exact version, torch first so that pip keeps
# the CPU wheel. The venv lives in $EAGLE3KIT_PEERS/dflash (default
# ${XDG_CACHE_HOME:-~/.cache}/eagle3kit-peers/dflash), never in the repository. Re-running is
# cheap; a finished venv is marked by a stamp file with the versions.
set -euo pipefail
DFLASH_VERSION="${DFLASH_VERSION:-0.1.0}"
ROOT="${EAGLE3KIT_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/eagle3kit-peers}"
VENV="$ROOT/dflash"
PY="${PYTHON:-python3}"
mkdir -p "$ROOT"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" >&2
fi
PIP=("$VENV/bin/python" -m pip install --quiet)
"${PIP[@]}" "torch==2.13.0" >&2
"${PIP[@]}" "dflash==$DFLASH_VERSION" "torch==2.13.0" "transformers==5.15.0" "jinja2==3.1.6" >&2
"$VENV/bin/python" -c "from dflash.model import DFlashDraftModel" >&2
"$VENV/bin/python" - > "$VENV/.eagle3kit-ready" <<'PY'
from importlib.metadata import version
print(" ".join(f"{p}=={version(p)}" for p in ("dflash", "torch", "transformers")))
PY
echo "$VENV/bin/python"
