"""Warm start vs from scratch on the v2 target (the K2 -> K2.5 hypothesis in miniature).

    python benchmarks/bench_warmstart.py run [--size tiny|full] [--sizes 64,128,256,512]
        [--seeds 0,1,2] [--min-steps 200] [--json benchmarks/results/warmstart-tiny.json]

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
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _env import environment  # noqa: E402


def zoo_data(
    member: str, out: Path, *, files: int | None, max_length: int, held_out: bool, size: str
) -> Path:
    """DATA dir (and its .jsonl beside) of the zoo chat samples of `member`'s slice."""
    from eagle3kit import zoo
    from eagle3kit.data.prepare import prepare
    from eagle3kit.zoo import corpus as _corpus

    if (out / "data.json").is_file():
        return out
    target = zoo.build(member, size=size)
    m = zoo.member(member)
    convs = _corpus.chat_samples(_corpus.files(m.slice, held_out=held_out, limit=files))
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / f"{out.name}.jsonl"
    with open(src, "w") as f:
        for i, c in enumerate(convs):
            f.write(json.dumps({"id": f"{m.slice}-{i}", **c}) + "\n")
    prepare([src], target, out, max_length=max_length)
    return out


def _test_score(target: str, drafter: str, test, depth: int) -> dict:
    from eagle3kit.measure.evaluate import evaluate_offline
    from eagle3kit.model.loading import load_pair

    tm, d = load_pair(target, drafter)
    try:
        r = evaluate_offline(tm, d, test, depth)
    finally:
        tm.close()
    return {"tau_walk": r["tau_walk"], "tau_every_position": r["tau_every_position"]}


def _one_run(a, kind: str, n: int, seed: int, common: dict, v1: str, vocab: int) -> dict:
    from eagle3kit.train.loop import TrainConfig, train

    steps = max(a.min_steps, round(n * a.epochs / a.batch))
    extra = {"init_from": v1} if kind == "warm" else {"draft_vocab_size": vocab}
    out = Path(a.work) / f"{kind}-{n}-s{seed}"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    every = max(1, steps // 4)
    cfg = TrainConfig(
        out=str(out), max_samples=n, steps=steps, seed=seed, eval_every=every, **common, **extra
    )
    s = train(cfg)
    return {
        "kind": kind,
        "samples": n,
        "seed": seed,
        "steps": steps,
        "best_step": s["best_step"],
        "validation_tau_walk": s["tau_walk"],
        "wall_s": round(time.perf_counter() - t0, 1),
        "out": str(out),
    }


def run(a: argparse.Namespace) -> dict:
    import torch

    from eagle3kit import zoo
    from eagle3kit.demo.steps import k2_drafter
    from eagle3kit.measure.evaluate import load_eval_data
    from eagle3kit.model.loading import load_target

    torch.set_num_threads(a.threads)
    target = str(zoo.build(a.member, size=a.size))
    v1 = a.v1_drafter or str(k2_drafter(a.size))
    vocab = json.loads((Path(v1) / "config.json").read_text())["draft_vocab_size"]
    kw = dict(files=a.files, max_length=a.max_len, size=a.size)
    data = zoo_data(a.member, Path(a.work) / f"data-{a.size}", held_out=False, **kw)
    test_dir = zoo_data(a.member, Path(a.work) / f"test-{a.size}", held_out=True, **kw)
    tm = load_target(target)
    test = load_eval_data(test_dir.parent / f"{test_dir.name}.jsonl", tm.tokenizer)
    tm.close()
    test.samples = test.samples[: a.test_samples]
    common = dict(
        target=target,
        data=str(data),
        ttt_steps=a.ttt_steps,
        batch_size=a.batch,
        max_len=a.max_len,
        lr=a.lr,
        eval_samples=a.eval_samples,
        heldout=a.heldout,
    )
    v1_alone = _test_score(target, v1, test, a.ttt_steps)
    print(json.dumps({"v1_drafter_alone": v1_alone}), file=sys.stderr, flush=True)
    rows = []
    for n in [int(x) for x in a.sizes.split(",")]:
        for seed in [int(x) for x in a.seeds.split(",")]:
            for kind in ("scratch", "warm"):
                row = _one_run(a, kind, n, seed, common, v1, vocab)
                row["test"] = _test_score(target, row.pop("out") + "/best", test, a.ttt_steps)
                rows.append(row)
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return {
        "settings": {k: v for k, v in vars(a).items() if k not in ("json", "cmd")},
        "test_samples": len(test.samples),
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
                line[kind] = {
                    "mean": round(statistics.fmean(xs), 4),
                    "min": min(xs),
                    "max": max(xs),
                    "seeds": len(xs),
                }
        out.append(line)
    return out


def report(doc: dict) -> None:
    print(
        f"test: {doc['test_samples']} samples of held-out files; walked tau at depth "
        f"{doc['settings']['ttt_steps']}; mean [min..max] over seeds"
    )
    print(f"v1 drafter alone: {doc['v1_drafter_alone']['tau_walk']:.3f}")
    print(f"{'samples':>8} {'scratch':>24} {'warm start':>24}")
    for line in doc["table"]:
        cells = []
        for kind in ("scratch", "warm"):
            c = line.get(kind)
            cells.append(f"{c['mean']:.3f} [{c['min']:.3f}..{c['max']:.3f}]" if c else "-")
        print(f"{line['samples']:>8} {cells[0]:>24} {cells[1]:>24}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="scratch vs warm start at several data sizes and seeds")
    r.add_argument("--member", default="dsv3-v2")
    r.add_argument("--size", default="full", help="zoo size of the member: full or tiny")
    r.add_argument("--v1-drafter", default=None, help="default: the demo's K2 drafter")
    r.add_argument("--work", default="/tmp/e3k_bench/warmstart")
    r.add_argument("--files", type=int, default=400)
    r.add_argument("--sizes", default="64,128,256,512")
    r.add_argument("--seeds", default="0,1,2")
    r.add_argument("--epochs", type=float, default=2.0, help="passes over the n samples")
    r.add_argument("--min-steps", type=int, default=200)
    r.add_argument("--batch", type=int, default=16)
    r.add_argument("--max-len", type=int, default=256)
    r.add_argument("--lr", type=float, default=3e-3)
    r.add_argument("--ttt-steps", type=int, default=4)
    r.add_argument("--eval-samples", type=int, default=64, help="validation samples scored")
    r.add_argument("--heldout", type=float, default=0.1, help="validation split of the data")
    r.add_argument("--test-samples", type=int, default=128)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--json", type=Path, help="write the result file here")
    a = ap.parse_args()
    print("environment: " + environment())
    doc = run(a)
    report(doc)
    if a.json:
        from _results import write_result

        write_result(a.json, "eagle3kit.bench_warmstart", doc)


if __name__ == "__main__":
    main()
