"""Load drafter weights in any layout, save them in any layout, and convert between layouts."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.errors import Eagle3Error, bad
from eagle3kit.formats.layouts import (
    LAYOUTS,
    LossyConversion,
    canonical_to_file,
    config_for,
    read_spec,
)
from eagle3kit.formats.safetensors_io import (
    Checkpoint,
    load_checkpoint,
    write_json,
    write_safetensors,
)
from eagle3kit.spec import DraftSpec

# Tensors some trainers save that no engine serves; conversion may drop them.
TRAINING_ONLY = ("verifier_norm.weight", "verifier_lm_head.weight")


def _local_dir(ckpt: Checkpoint) -> Checkpoint:  # pragma: no cover - needs network
    """For a Hub checkpoint, download its safetensors + config (the weights are needed here)."""
    from huggingface_hub import snapshot_download

    from eagle3kit.formats.safetensors_io import load_local

    d = snapshot_download(
        ckpt.repo_id, revision=ckpt.revision, allow_patterns=["*.json", "*.safetensors"]
    )
    return load_local(d)


def load_drafter_tensors(path: str) -> tuple[DraftSpec, dict[str, Any], str]:
    """(spec, canonical name -> torch tensor, layout) for a drafter checkpoint."""
    from safetensors import safe_open

    ckpt = load_checkpoint(path)
    if ckpt.repo_id is not None:
        ckpt = _local_dir(ckpt)
    layout, spec, names = read_spec(ckpt)
    by_file: dict[str, list[tuple[str, str]]] = {}
    for canon, stored in names.items():
        by_file.setdefault(ckpt.tensors[stored].file, []).append((canon, stored))
    tensors: dict[str, Any] = {}
    for fname, pairs in by_file.items():
        try:
            with safe_open(fname, framework="pt") as f:
                for canon, stored in pairs:
                    tensors[canon] = f.get_tensor(stored)
        except Exception as e:  # the header passed our checks, so this is an I/O-level failure
            raise bad(fname, f"cannot read tensors: {e}") from None
    return spec, tensors, layout


def save_drafter(
    out: str | Path,
    spec: DraftSpec,
    tensors: dict[str, Any],
    layout: str,
    *,
    verifier: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write a servable drafter directory in `layout`; returns the config written.

    Written to a temporary sibling directory first and renamed into place, so an existing
    directory is never left half-written."""
    if layout not in LAYOUTS:
        raise Eagle3Error(f"--to: expected one of {', '.join(LAYOUTS)}, found {layout!r}")
    try:
        cfg = config_for(spec, layout, verifier=verifier)
    except LossyConversion as e:
        raise Eagle3Error(f"refusing a lossy conversion to {layout}: {e}") from None
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise bad(str(out), "already exists and is not empty; choose another output directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        stored = {
            canonical_to_file(n, layout): t for n, t in tensors.items() if n not in TRAINING_ONLY
        }
        write_safetensors(
            tmp / "model.safetensors", stored, metadata={"format": "pt", "eagle3kit_layout": layout}
        )
        write_json(tmp / "config.json", cfg)
        if out.exists():
            shutil.rmtree(out) if overwrite else out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return cfg


def launch_command(layout: str, draft: str, target: str | None, steps: int = 3) -> str:
    """The engine command that serves `draft` (SGLang counts one more draft token than vLLM)."""
    tgt = target or "TARGET_MODEL"
    if layout == "sglang":
        return (
            f"python -m sglang.launch_server --model-path {tgt} --speculative-algorithm EAGLE3 "
            f"--speculative-draft-model-path {draft} --speculative-num-steps {steps} "
            f"--speculative-eagle-topk 1 --speculative-num-draft-tokens {steps + 1}"
        )
    if layout == "vllm":
        return (
            f"vllm serve {tgt} --speculative-config "
            f'\'{{"method": "eagle3", "model": "{draft}", "num_speculative_tokens": {steps}}}\''
        )
    return (
        'python -c "from eagle.model.ea_model import EaModel; '
        f"EaModel.from_pretrained(base_model_path='{tgt}', ea_model_path='{draft}', use_eagle3=True)\""
    )


@dataclass
class ConvertResult:
    source: str
    from_layout: str
    to_layout: str
    out: str
    launch: str
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "from": self.from_layout,
            "to": self.to_layout,
            "out": self.out,
            "launch_command": self.launch,
            "notes": self.notes,
        }


def convert(
    src: str, to: str, out: str, *, verifier: str | None = None, overwrite: bool = False
) -> ConvertResult:
    """Rewrite drafter `src` in layout `to` at `out`, refusing lossy conversions."""
    if to not in LAYOUTS:
        raise Eagle3Error(f"--to: expected one of {', '.join(LAYOUTS)}, found {to!r}")
    spec, tensors, layout = load_drafter_tensors(src)
    notes: list[str] = []
    unknown = [n for n in tensors if n not in spec.expected_shapes() and n not in TRAINING_ONLY]
    if unknown:
        raise Eagle3Error(
            f"refusing a lossy conversion: {src}: tensors with no place in the {to} layout: {', '.join(sorted(unknown))}"
        )
    dropped = [n for n in tensors if n in TRAINING_ONLY]
    if dropped:
        notes.append(f"dropped training-only tensors: {', '.join(dropped)}")
    if to == "eagle" and spec.aux_layers:
        notes.append(
            f"original EAGLE code always captures its default aux layers (2, L//2, L-3); this drafter was "
            f"trained on HF hidden states {list(spec.aux_layers)} (kept in config as eagle3kit_aux_layers)"
        )
    if "embed_tokens.weight" not in tensors:
        notes.append("no embed_tokens: the engine uses the target's embedding (normal)")
    save_drafter(out, spec, tensors, to, verifier=verifier, overwrite=overwrite)
    return ConvertResult(
        src, layout, to, str(out), launch_command(to, str(out), verifier or spec.verifier), notes
    )
