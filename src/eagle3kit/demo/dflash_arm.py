"""The demo's DFlash arm: the K2 -> K2.5 question for block drafters. The "K2 DFlash
drafter" (trained on dsv3-v1, shipped as zoo/shipped/k2-dflash[-tiny]) is measured stale on
dsv3-v2, then fine-tuned from it (`train --method dflash --init-from`) on the same v2 data the
EAGLE-3 arms train on; both are evaluated on the same held-out batch and benched on the same
prompts as the EAGLE-3 arms.

Its block is B = depth + 1 (`[last token, mask x depth]`), so it drafts `depth` tokens per
cycle like the chain arms, in one drafter pass (docs/dflash.md). The K2 DFlash drafter trains
as the EAGLE-3 K2 drafter does (on `v1_samples` of the stdlib library slice, the recipe's
batch, length and learning rate, seed 0, one torch thread) for `k2_dflash_steps`; the
fine-tune takes the recipe's `tune_steps` at a third of the learning rate
(methods/dflash/train/step.py
`train_dflash_drafter`); both have one layer and draw `ANCHORS` blocks per sample
(docs/dflash.md "Demo entry point"). The target reads the drafter's layers through a second
TargetModel over the same weights.
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
    from eagle3kit.methods.dflash.model import DFlashDrafter
    from eagle3kit.model.target import TargetModel

STALE = "stale K2 DFlash"
LABEL = "DFlash fine-tuned"
RUN = "tuned-dflash"  # OUT/runs/RUN (after "finetune": the report pairs its first warm run)
ANCHORS = 16  # blocks per sample per step (speculators' and our default)
DRAFT_LAYERS = 1
K2_DFLASH = "k2-dflash"  # its shipped label (zoo/shipping.py DRAFTERS)


def k2_dflash_settings(r: Recipe) -> dict[str, int]:
    """The DFlash-specific part of the K2 DFlash drafter's recipe."""
    steps = r.k2_dflash_steps or r.k2_steps
    return {"steps": steps, "block_size": r.depth + 1, "draft_layers": DRAFT_LAYERS} | {
        "anchors": ANCHORS
    }


def k2_dflash(size: str, progress: Progress | None, say: Callable[[str], None]) -> Path:
    """The K2 DFlash drafter: the one shipped in the package (zoo/shipped/k2-dflash[-tiny])
    when it is there, else trained once on the shipped dsv3-v1 and cached under
    $EAGLE3KIT_HOME/drafters/dsv3-v1-dflash[-tiny]; returns its servable dir."""
    from eagle3kit import zoo
    from eagle3kit.demo.steps import PAIR, RECIPES, k2_key
    from eagle3kit.zoo.shipping import location, shipped

    lab = K2_DFLASH + ("" if size == "full" else f"-{size}")
    if (location(lab) / "zoo.json").is_file():
        return shipped(lab)
    p1 = zoo.get(PAIR[0], size=size)
    final = zoo.home() / "drafters" / ("dsv3-v1-dflash" + ("" if size == "full" else f"-{size}"))
    done = final / "demo-drafter.json"
    key = k2_key("dflash", p1, size, k2_dflash_settings(RECIPES[size]))
    if done.is_file() and json.loads(done.read_text()) == key:
        return final / "run" / "best"
    say(f"   training the K2 DFlash drafter on {PAIR[0]} (once; cached in {final})")
    return build_k2_dflash(final, p1, size, progress)


def build_k2_dflash(final: Path, p1: Path, size: str, progress: Progress | None) -> Path:
    """Train the K2 DFlash drafter on the member at ``p1`` into ``final`` (whole or not at
    all: data/, run/ with run/best the servable dir and run/summary.json,
    demo-drafter.json); returns run/best."""
    from eagle3kit.core.atomic import atomic_dir
    from eagle3kit.demo.steps import RECIPES, k2_key, prepare_data
    from eagle3kit.methods.dflash.train.loop import train_dflash_drafter

    r = RECIPES[size]
    final.parent.mkdir(parents=True, exist_ok=True)
    with atomic_dir(final) as tmp:
        data = prepare_data("lib", r.v1_samples, tmp / "data", p1, r, progress)
        s = train_dflash_drafter(
            tmp / "run",
            p1,
            data,
            batch=r.batch,
            max_len=r.max_len,
            lr=r.lr,
            progress=progress,
            **k2_dflash_settings(r),
        )
        atomic_write_json(tmp / "run" / "summary.json", s)
        key = k2_key("dflash", p1, size, k2_dflash_settings(r))
        atomic_write_json(tmp / "demo-drafter.json", key)
    return final / "run" / "best"


def train_dflash_run(
    out: Path,
    target: Path,
    data: Path,
    r: Recipe,
    say: Callable[[str], None],
    progress: Progress | None,
    init: Path | None = None,
) -> dict[str, Any]:
    """OUT/runs/tuned-dflash, the K2 DFlash drafter ``init`` fine-tuned on v2's DATA (None:
    a drafter from scratch, as benchmarks/demo_dflash_arm.py measures): reused when complete
    with this recipe, resumed when a previous demo was killed in it, else trained fresh.
    Returns its summary (also RUN/summary.json)."""
    from eagle3kit.methods.dflash.train.loop import train_dflash, train_dflash_drafter
    from eagle3kit.methods.dflash.train.step import DFlashOptions

    run = out / "runs" / RUN
    state = run / "state" / "state.json"
    if state.is_file():
        meta = json.loads(state.read_text())
        cfg = meta.get("config", {})
        blocks = (meta.get("dflash") or {}).get("block_size")
        have = (cfg.get("steps"), cfg.get("lr"), blocks, cfg.get("init_from"))
        same = have == (r.tune_steps, r.lr / 3 if init else r.lr, r.depth + 1, init and str(init))
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
        lr=r.lr,  # train_dflash_drafter takes a third of it for a warm start
        init=init,
        progress=progress,
        block_size=r.depth + 1,
        draft_layers=DRAFT_LAYERS,
        anchors=ANCHORS,
    )
    atomic_write_json(run / "summary.json", s)
    return s


def load_dflash(path: Path, v2: TargetModel) -> tuple[DFlashDrafter, TargetModel]:
    """The drafter for inference, and a TargetModel over v2's weights that captures the
    drafter's layers (close it after use); the drafter borrows its embedding and lm_head."""
    from eagle3kit.methods.dflash.model import DFlashDrafter
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
        self.samples = [
            (batch.input_ids[b, : int(k)], batch.loss_mask[b, : int(k)].long())
            for b, k in enumerate(n)
        ]
        self.source, self.skipped = batch.source, []


def eval_dflash(d: DFlashDrafter, t: TargetModel, batch: Any, depth: int, path: Path):
    """The eval.json entry of the DFlash drafter on the probe batch the EAGLE-3 drafters were
    measured on (methods/dflash/measure/offline.py); `walk_acc` is its walked P(r >= i), as
    theirs."""
    from eagle3kit.demo.steps import eval_entry
    from eagle3kit.methods.dflash.measure.offline import evaluate_offline_dflash

    r = evaluate_offline_dflash(t, d, _Samples(batch), depth)
    return eval_entry(r, path, "dflash", block_size=d.spec.block_size)
