"""sha256 of a file, read in 1 MiB blocks: the digest DATA's data.json, a feature store's
manifest and the shipped zoo's zoo.json record for each file they list."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
