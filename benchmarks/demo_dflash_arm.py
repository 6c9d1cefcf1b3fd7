"""The demo's DFlash arm alone, timed: train + offline eval + bench on one zoo member.

    python benchmarks/demo_dflash_arm.py [--size full] [--lr LR] [--anchors N] [--layers L] \
        [--out benchmarks/results/demo_dflash_arm.json]

It runs the demo's DFlash arm as it was before it started from the K2 DFlash drafter (its
"DFlash (scratch)" row; demo/dflash_arm.py `train_dflash_run` with no `init`,
demo/story.py `train_step` and `eval_bench_step`) on dsv3-v2 (or dsv3-v2-tiny with --size
tiny): the recipe's v2 data, a DFlash drafter (B = depth + 1, one layer) trained from scratch
for the recipe's tune steps, its offline acceptance on the demo's held-out batch (32
sequences), and the bench of the recipe's held-out prompts (greedy and its chain,
interleaved), on 1 torch thread. It records the seconds of each part (the data preparation is
shared with the EAGLE-3 arms in the demo, so it is timed apart and not counted in the arm's)
and the arm's figures. --lr / --anchors / --layers override the arm's settings (what the
choice of the defaults was measured with).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from dataclasses import replace
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def main() -> None:
    from eagle3kit import zoo
    from eagle3kit.demo import dflash_arm
    from eagle3kit.demo.steps import (
        PAIR,
        RECIPES,
        bench_drafter,
        held_out_prompts,
        prepare_data,
    )
    from eagle3kit.measure.probe_batches import data_batch
    from eagle3kit.model.target import TargetModel

    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="full", choices=list(RECIPES))
    ap.add_argument("--lr", type=float, default=None, help="default: the recipe's")
    ap.add_argument("--anchors", type=int, default=None, help="default: the arm's")
    ap.add_argument("--layers", type=int, default=None, help="default: the arm's")
    ap.add_argument("--work", default="/tmp/eagle3kit-demo-dflash-arm")
    ap.add_argument("--out", default=str(HERE / "results" / "demo_dflash_arm.json"))
    a = ap.parse_args()
    torch.set_num_threads(1)  # as the demo runs
    r = RECIPES[a.size]
    if a.lr is not None:
        r = replace(r, lr=a.lr)
    if a.anchors is not None:
        dflash_arm.ANCHORS = a.anchors
    if a.layers is not None:
        dflash_arm.DRAFT_LAYERS = a.layers
    work = Path(a.work)
    shutil.rmtree(work / "runs", ignore_errors=True)  # the arm trains afresh every time
    p2 = zoo.get(PAIR[1], size=a.size)
    t0 = time.perf_counter()
    data = prepare_data("test", r.v2_samples, work / "data", p2, r, None)
    prompts = held_out_prompts(data, r.bench_prompts)
    v2 = TargetModel.from_pretrained(p2)
    t_data = time.perf_counter() - t0
    load1 = os.getloadavg()
    t0 = time.perf_counter()
    s = dflash_arm.train_dflash_run(work, p2, data, r, print, None)
    t_train = time.perf_counter() - t0
    t0 = time.perf_counter()
    path = work / "runs" / dflash_arm.RUN / "best"
    d, t = dflash_arm.load_dflash(path, v2)
    ev = dflash_arm.eval_dflash(d, t, data_batch(str(data), 32, r.max_len), r.depth, path)
    t_eval = time.perf_counter() - t0
    t0 = time.perf_counter()
    b = bench_drafter(t, d, prompts, r, None, {"label": "DFlash (scratch)", "role": "dflash"})
    t_bench = time.perf_counter() - t0
    keep = (
        "method",
        "depth",
        "baseline_tps",
        "spec_tps",
        "speedup",
        "tau_online",
        "cycle_ms",
        "draft_ms",
        "verify_ms",
        "per_position_acceptance",
        "lossless",
    )
    doc = {
        "kind": "eagle3kit.bench.demo_dflash_arm",
        "command": "python benchmarks/demo_dflash_arm.py"
        + (f" --size {a.size}" if a.size != "full" else "")
        + (f" --lr {a.lr}" if a.lr is not None else "")
        + (f" --anchors {a.anchors}" if a.anchors is not None else "")
        + (f" --layers {a.layers}" if a.layers is not None else "")
        + (f" --out {a.out}" if a.out != ap.get_default("out") else ""),
        "member": zoo.get(PAIR[1], size=a.size).name,
        "recipe": a.size,
        "settings": {
            "steps": r.tune_steps,
            "batch": r.batch,
            "max_len": r.max_len,
            "lr": r.lr,
            "block_size": r.depth + 1,
            "draft_layers": dflash_arm.DRAFT_LAYERS,
            "anchors": dflash_arm.ANCHORS,
        },
        "seconds": {
            "arm": round(t_train + t_eval + t_bench, 1),
            "train": round(t_train, 1),
            "eval": round(t_eval, 1),
            "bench": round(t_bench, 1),
            "data_not_counted": round(t_data, 1),
        },
        "train": {
            k: s[k]
            for k in (
                "best_step",
                "steps",
                "tau_every_position",
                "per_position_acceptance",
                "train_s",
            )
        },
        "eval": ev,
        "bench": {k: b[k] for k in keep},
        "environment": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "threads": 1,
            "torch": torch.__version__,
            "load_average_before_after": [*load1, *os.getloadavg()],
        },
    }
    t.close()
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("command", "seconds", "settings")}, indent=1))
    print(json.dumps({"tau_walk": ev["tau_walk"], **doc["bench"]}, indent=1))


if __name__ == "__main__":
    main()
