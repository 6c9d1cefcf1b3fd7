"""DSpark at the train layer: the part core/registry.py asks for. `train --method dspark` is
DFlash's loop (methods/dflash/train/loop.py) on a DSpark drafter: the block loss on the
Markov-corrected logits (the head fed the true previous tokens), plus the confidence head's
BCE (methods/dspark/model.py `aux_loss_terms`). The drafter is a warm start from a DFlash
drafter's backbone (`--init-from` a DFlash checkpoint: every backbone tensor kept, the heads
fresh), a DSpark checkpoint resumed as it is, or a fresh DFlash backbone with the heads. Its
blocks are DFlash's (B - 1 drafts, no sample_from_anchor); RUN/best is written in speculators'
`dspark` layout (vLLM serves it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eagle3kit.methods.dflash.train import summary_lines as dflash_lines
from eagle3kit.methods.dflash.train.loop import train_dflash
from eagle3kit.methods.dflash.train.step import DFlashOptions, new_drafter, position_weights
from eagle3kit.train.config import TrainConfig, from_options

if TYPE_CHECKING:
    from eagle3kit.methods.dspark.model import DSparkDrafter
    from eagle3kit.model.target import TargetModel

__all__ = ["config", "run", "summary_lines"]
MARKOV_RANK = 256  # speculators' default


def config(options: dict[str, Any]) -> TrainConfig:
    return from_options(options, method=None)


def make_drafter(
    target: TargetModel, opts: DFlashOptions, init_from: str | None, device: str
) -> DSparkDrafter:
    """The run's DSpark drafter (module docstring)."""
    from eagle3kit.checkpoint.io.safetensors_io import load_checkpoint
    from eagle3kit.methods.dspark.checkpoint.read import is_dspark_config
    from eagle3kit.methods.dspark.checkpoint.spec import DSparkSpec
    from eagle3kit.methods.dspark.model import DSparkDrafter, from_dflash

    if init_from and is_dspark_config(load_checkpoint(init_from).config):
        d = DSparkDrafter.from_pretrained(init_from, device=device)
        d.attach_target(target)
    else:
        base = new_drafter(target, opts, init_from, device)
        rank = min(MARKOV_RANK, base.spec.vocab_size)
        spec = DSparkSpec(backbone=base.spec.replace(variant="dspark"), markov_rank=rank)
        d = from_dflash(base, spec)
    d.slot_weights = lambda b, device: position_weights(b, opts.gamma, device)
    return d


def run(cfg: TrainConfig, options: dict[str, Any], *, resume: bool, progress: Any) -> dict:
    """`train --method dspark`: the DFlash loop with the block options from the CLI's."""
    o = options
    opts = DFlashOptions(
        o["block_size"],
        o["draft_layers"],
        o["anchors"],
        o["gamma"],
        o["dflash_loss"],
        weights=o["position_weights"],
    )
    return train_dflash(cfg, opts, resume=resume, progress=progress, make=make_drafter)


def summary_lines(s: dict[str, Any]) -> list[str]:
    return [line.replace("a DFlash drafter", "a DSpark drafter") for line in dflash_lines(s)]
