"""DFlash block drafters at the train layer: the part core/registry.py asks for.

step.py   the options, the blocks, the loss and the block evaluation
run.py    the run (one process or torchrun): its state, resume, summary
"""

from __future__ import annotations

from typing import Any

from eagle3kit.methods.dflash.train.loop import train_dflash
from eagle3kit.methods.dflash.train.step import DFlashOptions
from eagle3kit.train.config import TrainConfig, from_options

__all__ = ["config", "run", "summary_lines"]


def config(options: dict[str, Any]) -> TrainConfig:
    """The run's settings from the CLI's options (DFlash has its own loop: no TTT method)."""
    return from_options(options, method=None)


def run(cfg: TrainConfig, options: dict[str, Any], *, resume: bool, progress: Any) -> dict:
    """`train --method dflash`: its own loop, the block options from the CLI's."""
    o = options
    opts = DFlashOptions(
        o["block_size"],
        o["draft_layers"],
        o["anchors"],
        o["gamma"],
        o["dflash_loss"],
        weights=o["position_weights"],
        sliding_window=o.get("sliding_window"),
    )
    return train_dflash(cfg, opts, resume=resume, progress=progress)


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The run's summary in a line, for a person (cli/ prints it)."""
    acc = ", ".join(f"{a:.2f}" for a in s["per_position_acceptance"])
    return [
        f"trained a DFlash drafter {s['steps']} steps ({s['source']}, block {s['block_size']}, "
        f"{s['train_samples']} samples); best step {s['best_step']}: expected accept length "
        f"{s['tau_every_position']:.3f} (per position: {acc}) -> {s['best']}"
    ]
