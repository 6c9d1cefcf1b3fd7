"""MTP heads at the train layer: the part core/registry.py asks for.

finetune.py   FastMTP's recipe: teacher-forced recursive steps, the run, the head's save
zoo.py        a fresh MTP layer for a zoo member (`zoo add-mtp`)
"""

from __future__ import annotations

from typing import Any

from eagle3kit.core.errors import bad
from eagle3kit.methods.mtp.train.finetune import MTPTrainConfig, train_mtp
from eagle3kit.methods.mtp.train.zoo import add_mtp_layer

__all__ = ["add_mtp_layer", "config", "run", "summary_lines"]


def config(options: dict[str, Any]) -> MTPTrainConfig:
    """`train --method mtp`'s settings from the CLI's options."""
    o = options
    if o["target"] is None or o["data"] is None:
        raise bad("train --method mtp", "expected --target and --data (a DATA dir)")
    return MTPTrainConfig(
        target=o["target"],
        data=str(o["data"]),
        out=o["out"],
        init_from=o["init_from"],
        steps=o["steps"] or 200,
        batch_size=o["batch_size"],
        max_len=o["max_len"],
        lr=o["lr"],
        k=o["mtp_steps"],
        eval_samples=o["eval_samples"],
        seed=o["seed"],
        device=o["device"],
        targets=o["mtp_targets"],
        loss=o["loss"],
    )


def run(cfg: MTPTrainConfig, options: dict[str, Any], *, resume: bool, progress: Any) -> dict:
    """RUN/head (the target's names) and RUN/summary.json (a head run is not resumed)."""
    return train_mtp(cfg, progress)


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The run's summary in a line, for a person (cli/ prints it)."""
    b, a = s["before"], s["after"]
    return [
        f"mtp head ({s['init']}): {s['config']['steps']} steps, loss {s['loss']['first']:.3f} -> "
        f"{s['loss']['last']:.3f}; held-out tau_every_position "
        f"{b['tau_every_position']:.3f} -> {a['tau_every_position']:.3f} "
        f"(per position {', '.join(f'{x:.2f}' for x in a['per_position_acceptance'])}); "
        f"head: {s['head']}"
    ]
