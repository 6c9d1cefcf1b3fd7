#!/usr/bin/env bash
# Build the peer's own venv: torch 2.13.0 (CPU wheel) + vllm-project/speculators from PyPI.
#
#   bash benchmarks/peers/setup_speculators.sh        # prints the venv's python on stdout
#
# The venv lives in a cache dir, never in the repo: $EAGLE3KIT_PEERS, else
# ${XDG_CACHE_HOME:-~/.cache}/eagle3kit-peers/speculators. Re-running is cheap (pip skips what
# is installed); a finished venv is marked by a stamp file so bench_train.py can find it.
set -euo pipefail
SPECULATORS_VERSION="${SPECULATORS_VERSION:-0.9.0}"
ROOT="${EAGLE3KIT_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/eagle3kit-peers}"
VENV="$ROOT/speculators"
PY="${PYTHON:-python3}"
mkdir -p "$ROOT"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" >&2
fi
PIP=("$VENV/bin/python" -m pip install --quiet)
# Pin torch first, by exact version: a bare `torch` requirement (speculators' own) would
# otherwise resolve to the multi-GB CUDA build. With it installed, pip keeps it.
"${PIP[@]}" "torch==2.13.0" >&2
# speculators imports `datasets` at package import (its data utilities), so install it too.
"${PIP[@]}" "speculators==$SPECULATORS_VERSION" "torch==2.13.0" datasets >&2
# speculators also lists torchvision and torchaudio; the wheels pip picks for them do not load
# against the CPU torch (torchvision: "operator torchvision::nms does not exist"), and
# transformers then fails to import PreTrainedModel. Eagle3DraftModel needs neither: remove them.
"$VENV/bin/python" -m pip uninstall --yes --quiet torchvision torchaudio >&2 || true
"$VENV/bin/python" -c "from speculators.models.eagle3 import Eagle3DraftModel" >&2
"$VENV/bin/python" - > "$VENV/.eagle3kit-ready" <<'PY'
from importlib.metadata import version
print(" ".join(f"{p}=={version(p)}" for p in ("speculators", "torch", "transformers")))
PY
echo "$VENV/bin/python"
