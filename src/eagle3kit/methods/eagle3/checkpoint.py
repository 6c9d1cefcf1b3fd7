"""EAGLE-3 / EAGLE 3.1 drafters at the checkpoint layer: the part core/registry.py asks for.
Their format is checkpoint/eagle3/ (the base the generic verbs fall back on), so this part
only claims the drafters: which of the two a drafter is (`method_of`, by its flags)."""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.eagle3.layouts import EAGLE31_FLAGS, is_drafter_config, method_of
from eagle3kit.checkpoint.engines.windows import rows_for

__all__ = ["ENGINE_RULES", "EAGLE31_FLAGS", "detect", "method_of"]

ENGINE_RULES = rows_for("eagle3")  # which window each engine release runs (sliding windows)


def detect(config: dict[str, Any], names: set[str]) -> tuple[str, int] | None:
    """An EAGLE-3 drafter config (checkpoint/eagle3/layouts.py): EAGLE-3 or 3.1 by its flags,
    claimed by shape (strength 2: a config that names another method wins)."""
    return (method_of(config), 2) if is_drafter_config(config, names) else None
