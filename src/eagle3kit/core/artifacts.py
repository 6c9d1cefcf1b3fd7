"""Every JSON document eagle3kit writes says what it is: ``"kind": "eagle3kit.<name>"`` and
``"schema": <int>`` come first. `report` dispatches on the kind and names a file it cannot
read; nothing recognises a document by the keys it happens to contain."""

from __future__ import annotations

from typing import Any

PREFIX = "eagle3kit."
SCHEMA = 1


def stamp(doc: dict[str, Any], name: str, schema: int = SCHEMA) -> dict[str, Any]:
    """``doc`` with ``kind`` and ``schema`` first (an existing kind/schema is replaced)."""
    rest = {k: v for k, v in doc.items() if k not in ("kind", "schema")}
    return {"kind": PREFIX + name, "schema": schema, **rest}


def kind_of(doc: Any) -> str | None:
    """The artefact's name (``"bench"`` for ``"eagle3kit.bench"``), or None if it has none."""
    if isinstance(doc, dict):
        k = doc.get("kind")
        if isinstance(k, str) and k.startswith(PREFIX):
            return k[len(PREFIX) :]
    return None


FEW_SEQUENCES = 8  # a figure or verdict resting on fewer sequences says so


def few_sequences(n: int, what: str) -> list[str]:
    """``[warning]`` when ``what`` rests on fewer than FEW_SEQUENCES sequences, else ``[]``:
    the ``"warnings"`` entries of eval, probe and train documents."""
    if n >= FEW_SEQUENCES:
        return []
    return [
        f"{what} rests on {n} sequence{'s' if n != 1 else ''} (fewer than {FEW_SEQUENCES}): "
        "too few to trust; score more held-out samples"
    ]
