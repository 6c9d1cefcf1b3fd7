"""The one dtype-name table (torch-free): safetensors dtype <-> torch dtype name <-> bytes.

Names are strings so that core/, plan/ and checkpoint/ can use them without importing torch;
torch users turn a name into a dtype with `getattr(torch, name)`.
"""

from __future__ import annotations

# safetensors header dtype -> torch/config dtype name, for the float dtypes a drafter is stored in
SAFETENSORS_TO_NAME = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
NAME_TO_SAFETENSORS = {name: st for st, name in SAFETENSORS_TO_NAME.items()}
# bytes per element, by torch/config dtype name
NAME_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# short spellings accepted on the command line
ALIASES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def canonical(name: str) -> str | None:
    """`name` as a torch dtype name (bf16 -> bfloat16), or None if it is not a known float dtype."""
    name = ALIASES.get(name, name)
    return name if name in NAME_BYTES else None
