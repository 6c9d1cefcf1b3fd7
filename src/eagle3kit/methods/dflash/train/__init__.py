"""DFlash block drafters at the train layer: the part core/registry.py asks for.

step.py   the options, the blocks, the loss and the block evaluation
run.py    the run (one process or torchrun): its state, resume, summary
"""

from __future__ import annotations

from typing import Any

from eagle3kit.methods.dflash.train.run import train_dflash
from eagle3kit.methods.dflash.train.step import DFlashOptions
from eagle3kit.train.config import from_options

__all__ = ["run", "summary_lines"]


def run(options: dict[str, Any], progress: Any) -> dict[str, Any]:
    """`train --method dflash` (the CLI's options): its own loop, block options from the CLI."""
    o = options
    opts = DFlashOptions(
        o["block_size"], o["draft_layers"], o["anchors"], o["gamma"], o["dflash_loss"],
        weights=o["position_weights"],
    )  # fmt: skip
    cfg = from_options(options, method=None)  # the run's settings; DFlash is its own loop
    return train_dflash(cfg, opts, resume=options["resume"], progress=progress)


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The run's summary in a line, for a person (cli/ prints it)."""
    acc = ", ".join(f"{a:.2f}" for a in s["per_position_acceptance"])
    return [
        f"trained a DFlash drafter {s['steps']} steps ({s['source']}, block {s['block_size']}, "
        f"{s['train_samples']} samples); best step {s['best_step']}: expected accept length "
        f"{s['tau_every_position']:.3f} (per position: {acc}) -> {s['best']}"
    ]
