"""Reading one tensor of any dtype by its header span, and the safetensors dtype table.

Engine capture reads a target's final norm and lm_head this way, and `train --features`
reads the target's embedding: nothing else of the checkpoint is read.
"""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.io.safetensors_io import Checkpoint, hub_range, load_local
from eagle3kit.core.errors import bad


def torch_dtypes() -> dict[str, Any]:
    import torch

    return {
        "F64": torch.float64,
        "F32": torch.float32,
        "F16": torch.float16,
        "BF16": torch.bfloat16,
        "I64": torch.int64,
        "I32": torch.int32,
        "I16": torch.int16,
        "I8": torch.int8,
        "U8": torch.uint8,
        "BOOL": torch.bool,
        "F8_E4M3": torch.float8_e4m3fn,
        "F8_E5M2": torch.float8_e5m2,
    }


def read_tensor(ckpt: Checkpoint, name: str):
    """One tensor of any dtype as a torch tensor, read by its header span (local file or one
    Hub range request); nothing else of the checkpoint is read. Engine capture reads a
    target's final norm and lm_head this way."""
    import torch

    info = ckpt.info(name)  # a tensor of an absent shard: fetched (Hub cache) or refused
    dtypes = torch_dtypes()
    if info.dtype not in dtypes:
        raise bad(
            info.file, f"tensor {name!r}: dtype {info.dtype} cannot be read as a torch tensor"
        )
    if ckpt.repo_id is None:
        raw = bytearray(info.nbytes)
        with open(info.file, "rb") as f:
            f.seek(info.start)
            got = f.readinto(raw)
    else:
        raw = bytearray(hub_range(ckpt, info))
        got = len(raw)
    if got != info.nbytes:
        raise bad(info.file, f"tensor {name!r}: file ended after {got} of {info.nbytes} bytes")
    if info.nbytes == 0:
        return torch.zeros(info.shape, dtype=dtypes[info.dtype])
    return torch.frombuffer(raw, dtype=dtypes[info.dtype]).reshape(info.shape)


def read_tensors(ckpt: Checkpoint, wanted: dict[str, str]) -> dict[str, Any]:
    """{key: torch tensor} for {key: stored name} of a local checkpoint."""
    from safetensors import safe_open

    by_file: dict[str, list[tuple[str, str]]] = {}
    for key, stored in wanted.items():
        by_file.setdefault(ckpt.tensors[stored].file, []).append((key, stored))
    out: dict[str, Any] = {}
    for fname, pairs in by_file.items():
        try:
            with safe_open(fname, framework="pt") as f:
                for key, stored in pairs:
                    out[key] = f.get_tensor(stored)
        except Exception as e:  # the header passed our checks, so this is an I/O-level failure
            raise bad(fname, f"cannot read tensors: {type(e).__name__}: {e}") from e
    return out


def local_copy(ckpt: Checkpoint) -> Checkpoint:  # pragma: no cover - needs network
    """For a Hub checkpoint, download its safetensors + config (the weights are needed here)."""
    from huggingface_hub import snapshot_download

    d = snapshot_download(
        ckpt.repo_id, revision=ckpt.revision, allow_patterns=["*.json", "*.safetensors"]
    )
    return load_local(d)
