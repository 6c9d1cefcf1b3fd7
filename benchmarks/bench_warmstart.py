"""Warm start vs from scratch on the v2 target (the K2 -> K2.5 hypothesis in miniature).

    python benchmarks/bench_warmstart.py run [--size tiny|full] [--sizes 64,128,256,512]
        [--seeds 0,1,2] [--min-steps 200] [--json benchmarks/results/warmstart-full.json]

For each data size n and seed, two runs on the v2 member that differ only in their start:
(a) from scratch (the draft vocab built from the data, as large as the v1 drafter's) and
(b) from the v1 drafter (`--init-from`, its vocab kept), the demo's "K2 drafter" trained on
v1 (`demo.steps.k2_drafter`, cached; or --v1-drafter). Both arms get the same optimiser steps
(max(--min-steps, n * --epochs / --batch)), learning rate, schedule, batch and seed.

Three disjoint sets, so that nothing reported chose anything:
- training: the first n training samples of the zoo's chat samples of v2's slice;
- validation: the run's held-out split of the same files (`--heldout`); it chooses RUN/best
  among the *trained* steps (step 0 is not a candidate, `train --best-includes-start` off);
- test: chat samples of the slice's held-out files (files the zoo never trained on either),
  scored once per run on RUN/best (`measure.evaluate.evaluate_offline`, walked τ and the
  every-position τ at --ttt-steps).
The table prints the test τ as mean and min..max over seeds, beside the v1 drafter alone.
Torch threads: 2 (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _drafter_runs as R  # noqa: E402
from _env import environment  # noqa: E402


def _one_run(a, kind: str, n: int, seed: int, common: dict, v1: str, vocab: int) -> dict:
    steps = max(a.min_steps, round(n * a.epochs / a.batch))
    extra = {"init_from": v1} if kind == "warm" else {"draft_vocab_size": vocab}
    out = Path(a.work) / f"{kind}-{n}-s{seed}"
    every = max(1, steps // 4)
    r = R.train_run(out, max_samples=n, steps=steps, seed=seed, eval_every=every, **common, **extra)
    return {"kind": kind, "samples": n, "seed": seed, "steps": steps, **r, "out": str(out)}


def run(a: argparse.Namespace) -> dict:
    import torch

    from eagle3kit import zoo
    from eagle3kit.demo.steps import k2_drafter

    torch.set_num_threads(a.threads)
    target = str(zoo.get(a.member, size=a.size))
    v1 = a.v1_drafter or str(k2_drafter(a.size))
    vocab = json.loads((Path(v1) / "config.json").read_text())["draft_vocab_size"]
    common = {**R.train_settings(a, target), "data": str(R.training_data(a))}
    test = R.held_out_set(a, target)
    # the canned-output check on the target's greedy answers to the test prompts (issue 33)
    diversity = R.canned_check(target, test.prompts, n=a.check_prompts)
    v1_alone = R.test_score(target, v1, test, a.ttt_steps)
    print(json.dumps({"v1_drafter_alone": v1_alone}), file=sys.stderr, flush=True)
    rows = []
    for n in [int(x) for x in a.sizes.split(",")]:
        for seed in R.seeds(a):
            for kind in ("scratch", "warm"):
                row = _one_run(a, kind, n, seed, common, v1, vocab)
                row["test"] = R.test_score(target, row.pop("out") + "/best", test, a.ttt_steps)
                rows.append(row)
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return {
        "settings": {k: v for k, v in vars(a).items() if k not in ("json", "cmd")},
        "test_samples": len(test.samples),
        "target_diversity": diversity,
        "v1_drafter": v1,
        "v1_drafter_alone": v1_alone,
        "rows": rows,
        "table": table(rows),
    }


def table(rows: list[dict]) -> list[dict]:
    """Per size and arm: test walked τ mean, min, max over seeds."""
    out = []
    for n in sorted({r["samples"] for r in rows}):
        line: dict = {"samples": n}
        for kind in ("scratch", "warm"):
            xs = [r["test"]["tau_walk"] for r in rows if r["samples"] == n and r["kind"] == kind]
            if xs:
                line[kind] = R.spread(xs)
        out.append(line)
    return out


def report(doc: dict) -> None:
    print(
        f"test: {doc['test_samples']} samples of held-out files; walked tau at depth "
        f"{doc['settings']['ttt_steps']}; mean [min..max] over seeds"
    )
    print(R.check_line(doc["target_diversity"]))
    print(f"v1 drafter alone: {doc['v1_drafter_alone']['tau_walk']:.3f}")
    print(f"{'samples':>8} {'scratch':>24} {'warm start':>24}")
    for line in doc["table"]:
        cells = [R.fmt_spread(line.get(kind)) for kind in ("scratch", "warm")]
        print(f"{line['samples']:>8} {cells[0]:>24} {cells[1]:>24}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="scratch vs warm start at several data sizes and seeds")
    R.add_train_options(r, member="dsv3-v2", size="full", work="/tmp/e3k_bench/warmstart")
    r.add_argument("--v1-drafter", default=None, help="default: the demo's K2 drafter")
    r.add_argument("--sizes", default="64,128,256,512")
    r.add_argument("--epochs", type=float, default=2.0, help="passes over the n samples")
    r.add_argument("--min-steps", type=int, default=200)
    r.add_argument("--check-prompts", type=int, default=16, help="prompts of the canned check")
    a = ap.parse_args()
    print("environment: " + environment())
    doc = run(a)
    report(doc)
    if a.json:
        from _results import write_result

        write_result(a.json, "eagle3kit.bench_warmstart", doc)


if __name__ == "__main__":
    main()
