"""What a run writes besides its state: servable drafter dirs, metrics.jsonl, curves.png."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from eagle3kit.core.atomic import atomic_dir, atomic_open, atomic_write_with
from eagle3kit.core.retired import current_row


def save_servable(
    out: Path, spec: Any, tensors: dict[str, torch.Tensor], verifier: str | None
) -> None:
    """RUN/best or RUN/step-N of an EAGLE-3 drafter: config.json + model.safetensors in the
    SGLang layout (with d2t/t2d, without the target's embedding), through the EAGLE-3 format's
    writer; the folder is swapped in whole. (A method writes its own drafters by its train
    part's `save`.)"""
    from eagle3kit.checkpoint.eagle3.convert import save_drafter

    keep = {k: v for k, v in tensors.items() if k != "embed_tokens.weight"}
    spec = spec.replace(tensors=tuple(sorted(keep)), dtype="float32")
    with atomic_dir(out) as tmp:
        save_drafter(tmp, spec, keep, "sglang", verifier=verifier, overwrite=True)


def read_metrics(path: Path, upto: int | None = None) -> list[dict[str, Any]]:
    """metrics.jsonl lines (those with step <= upto)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line of a killed run (appends are not atomic)
            if upto is None or row.get("step", 0) <= upto:
                rows.append(current_row(row))
    return rows


def write_metrics(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rewrite metrics.jsonl atomically (on resume: drop evaluations after the saved state)."""
    with atomic_open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def append_metrics(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()


def plot_curves(path: Path, rows: list[dict[str, Any]], k: int) -> None:
    """Simulated accept length and per-step held-out accuracy against optimizer steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        return
    steps = [r["step"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.plot(steps, [r["tau_every_position"] for r in rows], marker="o")
    a.set(xlabel="optimizer step", ylabel="tau_every_position", title="held-out tau")
    for i in range(k):
        b.plot(steps, [r["acc"][i] for r in rows], label=f"step {i}")
    b.set(xlabel="optimizer step", ylabel="accuracy", title="held-out acc per draft step")
    b.legend(fontsize=7)
    fig.tight_layout()
    atomic_write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=90))
    plt.close(fig)
