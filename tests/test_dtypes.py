"""core/dtypes.py is the one dtype-name table: it agrees with the safetensors header sizes and
with torch, and the modules that name dtypes read it instead of keeping their own copy."""

import subprocess

import torch

from eagle3kit.checkpoint.io.headers import DTYPE_SIZES
from eagle3kit.core import dtypes


def test_table_agrees_with_headers_and_torch():
    for st, name in dtypes.SAFETENSORS_TO_NAME.items():
        assert dtypes.NAME_TO_SAFETENSORS[name] == st
        assert DTYPE_SIZES[st] == dtypes.NAME_BYTES[name]
        assert getattr(torch, name).itemsize == dtypes.NAME_BYTES[name]
    assert dtypes.canonical("bf16") == "bfloat16"
    assert dtypes.canonical("fp32") == "float32"
    assert dtypes.canonical("int8") is None


def test_no_second_copy_of_the_table():
    out = subprocess.run(
        ["git", "grep", "-n", '"BF16": "bfloat16"\\|"bfloat16": "BF16"', "--", "src"],
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    assert [line for line in out if "core/dtypes.py" not in line] == []
