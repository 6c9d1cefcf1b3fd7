"""EAGLE-3 / EAGLE 3.1 drafters at the decode layer: the part core/registry.py asks for. Their
decoder is decode/speculative.py's `SpecDecoder` (chain or tree: the base the other drafters'
decoders extend)."""

from __future__ import annotations

from eagle3kit.decode.speculative import speculative_generate as generate

__all__ = ["generate"]
