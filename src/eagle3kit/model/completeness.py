"""Never a random weight: a model loaded in process holds every tensor it declares, or is refused.

transformers initialises any weight a checkpoint lacks at random and goes on (a "load report"
on stderr); a target without its layers (a partial download, a `target slim` directory) would
then score garbage with exit 0. Here, before a target is loaded, its safetensors headers are
checked (`check_target_files`: the shards its index lists, tensors for every decoder layer);
after loading, transformers' own account (`output_loading_info`, which knows tied embeddings,
non-persistent buffers and its key renames) must list no missing and no unexpected key
(`check_loading_info`). A drafter's canonical tensors are checked the same way
(`Eagle3Drafter.load_canonical`). Each refusal is one line: how many tensors, the first few
by name, and the engine route that needs no in-process target.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.io.safetensors_io import load_local
from eagle3kit.core.errors import Eagle3Error, bad

ENGINE_ROUTE = (
    "eagle3kit never runs a model on random weights; for a target served by SGLang/vLLM use "
    "--url (bench, eval, probe) or a captured feature store with --features (train, eval; "
    "docs/engine-capture.md)"
)
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")
_EXPERT = re.compile(r"^(.*\.experts\.)(\d+)(\..+)$")
_SHOWN = 3


def name_list(names: list[str], shown: int = _SHOWN) -> str:
    """`a, b, c (+N more)`: the first few names and how many more."""
    head = ", ".join(names[:shown])
    return head + (f" (+{len(names) - shown} more)" if len(names) > shown else "")


def tensor_problems(missing: list[str], unexpected: list[str], mismatched: Any = ()) -> str:
    """`N tensors missing (a, b, c +K more); M unexpected (...)`, the parts that apply."""
    parts = []
    if mismatched:
        parts.append(f"{len(mismatched)} tensor(s) of the wrong shape ({name_list(mismatched)})")
    if missing:
        parts.append(f"{len(missing)} tensor(s) missing ({name_list(sorted(missing))})")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected tensor(s) ({name_list(sorted(unexpected))})")
    return "; ".join(parts)


def _ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out: list[str] = []
    for i in ids:
        if out and int(out[-1].split("-")[-1]) == i - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ", ".join(out)


def _num_layers(config: dict[str, Any]) -> int | None:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    n = text.get("num_hidden_layers", text.get("n_layer", config.get("num_hidden_layers")))
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def missing_experts(names: list[str]) -> list[str]:
    """MoE tensors one expert lacks that its siblings have (`...experts.2.up_proj.weight`
    when experts 0, 1, 3 of the same layer have one): transformers fuses the experts of a
    layer and can only fail, not say which, when one is missing."""
    have: dict[str, dict[str, set[str]]] = {}  # prefix -> expert id -> suffixes
    for n in names:
        if m := _EXPERT.match(n):
            have.setdefault(m.group(1), {}).setdefault(m.group(2), set()).add(m.group(3))
    out = []
    for prefix, experts in have.items():
        every = set().union(*experts.values())
        out += [f"{prefix}{e}{s}" for e, got in experts.items() for s in sorted(every - got)]
    return sorted(out)


def check_target_files(path: str | Path) -> None:
    """Refuse a local target whose safetensors cannot hold the whole model: shards its index
    lists that are not here, or decoder layers without a single tensor (a slim directory)."""
    try:
        ckpt = load_local(path)
    except Eagle3Error:
        return  # not a plain safetensors directory: transformers' own account decides
    if ckpt.absent:
        shards = ckpt.missing_shards()
        raise bad(
            str(path),
            f"{tensor_problems(list(ckpt.absent), [])}, in {len(shards)} shard(s) its index "
            f"lists that are not here ({name_list(shards, 2)}); {ENGINE_ROUTE}",
        )
    n = _num_layers(ckpt.config)
    names = ckpt.names()
    have = {int(m.group(1)) for x in names if (m := _LAYER.search(x))}
    empty = [i for i in range(n or 0) if i not in have]
    if empty:
        raise bad(
            str(path),
            f"no tensors for {len(empty)} of its {n} decoder layers ({_ranges(empty)}): its "
            f"safetensors hold {len(names)} tensor(s) ({name_list(names)}); {ENGINE_ROUTE}",
        )
    lost = missing_experts(names)
    if lost:
        raise bad(str(path), f"{tensor_problems(lost, [])}; {ENGINE_ROUTE}")


def check_loading_info(src: str, info: dict[str, Any]) -> None:
    """Refuse a model transformers loaded with missing, unexpected or mismatched keys."""
    missing = list(info.get("missing_keys") or [])
    unexpected = list(info.get("unexpected_keys") or [])
    mismatched = [
        str(k[0] if isinstance(k, tuple) else k) for k in info.get("mismatched_keys") or []
    ]
    problems = tensor_problems(missing, unexpected, mismatched)
    if problems:
        raise bad(src, f"{problems}; {ENGINE_ROUTE}")
