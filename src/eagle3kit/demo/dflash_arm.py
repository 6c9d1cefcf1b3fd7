"""The demo's DFlash arm: a block drafter trained from scratch on the same v2 data, evaluated
on the same held-out batch and benched on the same prompts as the EAGLE-3 arms.

Its block is B = depth + 1 (`[last token, mask x depth]`), so it drafts `depth` tokens per
cycle like the chain arms, in one drafter pass (docs/dflash.md). It trains for the recipe's
`tune_steps` at the recipe's batch, length and learning rate (train/dflash.py
`train_dflash_drafter`), one layer, `ANCHORS` blocks per sample (docs/dflash.md "Demo entry point").
The target reads the drafter's layers through a second TargetModel over the same weights.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle3kit.core.atomic import atomic_write_json
from eagle3kit.core.progress import Progress

if TYPE_CHECKING:
    from eagle3kit.demo.steps import Recipe
    from eagle3kit.model.dflash import DFlashDrafter
    from eagle3kit.model.target import TargetModel

LABEL = "DFlash (scratch)"
RUN = "scratch-dflash"  # OUT/runs/RUN (sorted after "scratch": the report pairs EAGLE-3 runs)
ANCHORS = 16  # blocks per sample per step (speculators' and our default)
DRAFT_LAYERS = 1


def train_dflash_run(
    out: Path,
    target: Path,
    data: Path,
    r: Recipe,
    say: Callable[[str], None],
    progress: Progress | None,
) -> dict[str, Any]:
    """OUT/runs/scratch-dflash: reused when complete with this recipe, resumed when a previous
    demo was killed in it, else trained fresh. Returns its summary (also RUN/summary.json)."""
    from eagle3kit.train.dflash import DFlashOptions
    from eagle3kit.train.dflash_run import train_dflash, train_dflash_drafter

    run = out / "runs" / RUN
    state = run / "state" / "state.json"
    if state.is_file():
        meta = json.loads(state.read_text())
        cfg = meta.get("config", {})
        blocks = (meta.get("dflash") or {}).get("block_size")
        same = (cfg.get("steps"), cfg.get("lr"), blocks) == (r.tune_steps, r.lr, r.depth + 1)
        if same and (run / "summary.json").is_file():
            say(f"   DFlash: complete run reused [runs/{RUN}/summary.json]")
            return json.loads((run / "summary.json").read_text())
        if same:
            from eagle3kit.train.loop import TrainConfig

            say("   DFlash: resuming an interrupted run")
            s = train_dflash(
                TrainConfig.from_json({**cfg, "out": str(run)}),
                DFlashOptions(),  # the run's saved options win on --resume
                resume=True,
                progress=progress,
            )
            atomic_write_json(run / "summary.json", s)
            return s
    if run.exists():
        shutil.rmtree(run)  # a previous demo's run with another recipe
    s = train_dflash_drafter(
        run,
        target,
        data,
        steps=r.tune_steps,
        batch=r.batch,
        max_len=r.max_len,
        lr=r.lr,
        block_size=r.depth + 1,
        draft_layers=DRAFT_LAYERS,
        anchors=ANCHORS,
        progress=progress,
    )
    atomic_write_json(run / "summary.json", s)
    return s


def load_dflash(path: Path, v2: TargetModel) -> tuple[DFlashDrafter, TargetModel]:
    """The drafter for inference, and a TargetModel over v2's weights that captures the
    drafter's layers (close it after use); the drafter borrows its embedding and lm_head."""
    from eagle3kit.model.dflash import DFlashDrafter
    from eagle3kit.model.target import TargetModel

    d = DFlashDrafter.from_pretrained(path).eval().requires_grad_(False)
    t = TargetModel(
        v2.model, v2.tokenizer, aux_layers=d.spec.aux_layers, name_or_path=v2.name_or_path
    )
    d.attach_target(t)
    return d, t


class _Samples:
    """A probe Batch as `evaluate_offline_dflash` reads data: (ids, loss mask) per row."""

    def __init__(self, batch: Any) -> None:
        n = batch.attention_mask.sum(1).tolist()
        self.samples = [(batch.input_ids[b, : int(k)], batch.loss_mask[b, : int(k)].long())
                        for b, k in enumerate(n)]  # fmt: skip
        self.source, self.skipped = batch.source, []


def eval_dflash(d: DFlashDrafter, t: TargetModel, batch: Any, depth: int, path: Path):
    """The eval.json entry of the DFlash drafter on the probe batch the EAGLE-3 drafters were
    measured on (measure/block_eval.py); `walk_acc` is its walked P(r >= i), as theirs."""
    from eagle3kit.measure.block_eval import evaluate_offline_dflash

    r = evaluate_offline_dflash(t, d, _Samples(batch), depth)
    ap = r["all_positions"]
    return {
        "path": str(path),
        "method": "dflash",
        "block_size": d.spec.block_size,
        "acc": [round(x, 6) for x in ap["per_position_acceptance"]],  # every position
        "counted": ap["counted"],
        "tau_every_position": round(r["tau_every_position"], 6),
        "tau_walk": round(r["tau_walk"], 6),
        "walk_acc": [round(x, 6) for x in r["per_position_acceptance"]],
        "cycles": r["cycles"],
    }
