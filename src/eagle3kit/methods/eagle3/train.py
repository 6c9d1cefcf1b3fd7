"""EAGLE-3 / EAGLE 3.1 at the train layer: the part core/registry.py asks for. The
training-time-test loop (train/loop.py) trains them (`TTT`); this part holds what is theirs:
the flag presets of `--method eagle3` / `eagle3.1` (train/flags.py), how a start becomes the
run's drafter, the loss of one step, how the run's drafters are written, and the CLI's run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.checkpoint.eagle3.layouts import method_of
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.train import distributed as dist_
from eagle3kit.train import flags as F
from eagle3kit.train.config import TrainConfig, check_method, from_options
from eagle3kit.train.outputs import save_servable
from eagle3kit.train.ttt import loss_positions, ttt_loss

if TYPE_CHECKING:
    from eagle3kit.model.protocols import Target

__all__ = [
    "EAGLE3",
    "EAGLE31",
    "TTT",
    "check_method",
    "config",
    "loss",
    "method_of",
    "prepare",
    "preset",
    "run",
    "save",
    "summary_lines",
    "wanted_flags",
]

TTT = True  # trained by train/loop.py
EAGLE3 = F.PLAIN
EAGLE31 = {"fc_norm": True, "norm_before_fc": False, "norm_output": True}
PRESETS = {"eagle3": EAGLE3, "eagle3.1": EAGLE31}
spec_flags, flag_changes, with_flags = F.spec_flags, F.flag_changes, F.with_flags


def preset(method: str | None) -> dict[str, bool] | None:
    """The flags `--method` sets (None: none, the start's or each flag's own)."""
    return PRESETS.get(method) if method is not None else None


def wanted_flags(cfg: Any, start: dict[str, bool] | None) -> dict[str, bool]:
    return F.wanted_flags(cfg, start, preset(cfg.method))


def prepare(m: Any, cfg: Any, target: Target, info: dict[str, Any] | None) -> Any:
    """The run's drafter from its start `m`: itself; a drafter of another method (a P-EAGLE
    checkpoint) cannot be trained as EAGLE-3 (its own tensors would be dropped)."""
    if m.method not in PRESETS:
        raise Eagle3Error(
            f"--method {cfg.method}: {cfg.init_from} is a {m.method} drafter; train it with "
            f"--method {m.method} (or without --method), or start from an EAGLE-3 drafter"
        )
    return m


def loss(m: Any, feats: Any, k: int, cfg: Any, d: Any, step: int) -> torch.Tensor:
    """One step's loss on this rank's slice: TTT over k steps with `--loss` per position,
    normalised by the global count of loss positions per step (train/ttt.py)."""
    norm = dist_.all_sum(loss_positions(m.t2d, feats, k), d)  # global |C_i|, float32 [k]
    out, _ = ttt_loss(m, feats, k, norm=norm.clamp(min=1), counts=False, loss=cfg.loss)
    return out


def save(out: Path, spec: Any, tensors: dict[str, torch.Tensor], verifier: Any, m: Any) -> None:
    """RUN/best, RUN/step-N: the SGLang layout (train/outputs.py)."""
    save_servable(out, spec, tensors, verifier)


def config(options: dict[str, Any]) -> TrainConfig:
    """The run's settings from the CLI's options (those that are TrainConfig's fields)."""
    return from_options(options)


def run(cfg: TrainConfig, options: dict[str, Any], *, resume: bool, progress: Any) -> dict:
    """The run of `cfg` through the TTT loop; its summary."""
    from eagle3kit.train.loop import train

    return train(cfg, resume=resume, progress=progress)


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The run's summary in a few lines, for a person (cli/ prints them)."""
    depth = s.get("tau_every_position_by_depth") or []
    out = [
        f"trained {s['steps']} steps ({s['source']}, {s.get('method', 'eagle3')} "
        f"{s['attention']} drafter, {s['train_samples']} samples, {s['world_size']} "
        f"process(es), loss {s.get('position_loss', 'kl')})",
        f"best step {s['best_step']}: tau_every_position {s['tau_every_position']:.3f} "
        f"(by depth: {', '.join(f'{x:.2f}' for x in depth)})",
    ]
    if s.get("tau_walk") is not None:
        out.append(f"walked tau (tau_walk, picks best): {s['tau_walk']:.3f}")
    cov = s.get("vocab_coverage")
    if cov:
        out.append(f"DATA's loss tokens in the draft vocab: {cov['fraction']:.1%}")
    if s.get("best_acc"):
        out.append(
            "held-out accuracy per draft step: " + ", ".join(f"{a:.3f}" for a in s["best_acc"])
        )
    tps = s.get("tokens_per_s")
    out.append(f"{tps:.0f} tokens/s; peak memory {s['peak_memory_mb']:.0f} MB" if tps else "")
    return out + _reference_lines(s.get("reference"))


def _reference_lines(ref: dict[str, Any] | None) -> list[str]:
    if not ref:
        return []
    return [
        f"accept length on the old target {ref['target']}"
        + (f" (store {ref['features']})" if ref.get("features") else "")
        + f": {ref['before']['old']:.3f} -> {ref['after']['old']:.3f}; on the new target: "
        f"{ref['before']['new']:.3f} -> {ref['after']['new']:.3f}"
    ]
