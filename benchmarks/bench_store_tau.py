"""Does training from the lossy feature store reach the τ of training on exact features?

    python benchmarks/bench_store_tau.py [--member dsv3-v1] [--size tiny|full]
        [--seeds 0,1,2] [--steps 200] [--draft-vocab-size 256]
        [--json benchmarks/results/store_tau-tiny.json]

Three arms, each trained from scratch with the same settings and seeds, differing only in
where the drafter's inputs and teacher come from:
- exact: online, the target in this process (`train --data`): float32 aux states and the
  full-vocabulary teacher;
- store-top64: `data capture` defaults, aux states in fp8 (a scale per token and layer) and
  the teacher's top-64 log-probs in fp16 (`train --features`);
- store-full: the same fp8 aux with the whole draft vocabulary's teacher (topk=None): the
  top-K ablation.
All three use one draft vocabulary (the --draft-vocab-size most frequent answer tokens of
DATA, `data.vocab_counts.draft_vocab`), so nothing else differs. The
validation split (the same sample ids for DATA and its store) chooses RUN/best among trained
steps; each RUN/best is then scored once on a test set of chat samples of the member's
held-out files, with exact features (`measure.evaluate.evaluate_offline`). The table prints
the test walked τ as mean and min..max over seeds. fp8 vs bf16 aux is not ablated: the store
writes fp8 only.
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
from bench_warmstart import _test_score, zoo_data  # noqa: E402

ARMS = ("exact", "store-top64", "store-full")


def _stores(a, target: str, data: Path, vocab: Path) -> dict[str, str]:
    from eagle3kit.data.store import capture
    from eagle3kit.model.loading import load_target

    out = {}
    tm = load_target(target)
    try:
        for arm, topk in (("store-top64", 64), ("store-full", None)):
            p = Path(a.work) / f"{arm}-{a.size}"
            capture(
                data, tm, p, vocab=vocab, topk=topk
            )  # resumable: a complete store is left as it is
            out[arm] = str(p)
    finally:
        tm.close()
    return out


def _train(a, arm: str, seed: int, target: str, data: Path, stores: dict, vocab: Path) -> dict:
    from eagle3kit.train.loop import TrainConfig, train

    src = {"data": str(data)} if arm == "exact" else {"features": stores[arm]}
    out = Path(a.work) / f"{arm}-s{seed}"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    s = train(
        TrainConfig(
            out=str(out),
            target=target,
            steps=a.steps,
            seed=seed,
            eval_every=max(1, a.steps // 4),
            ttt_steps=a.ttt_steps,
            batch_size=a.batch,
            max_len=a.max_len,
            lr=a.lr,
            eval_samples=a.eval_samples,
            heldout=a.heldout,
            vocab=str(vocab),
            **src,
        )
    )
    return {
        "arm": arm,
        "seed": seed,
        "steps": a.steps,
        "best_step": s["best_step"],
        "validation_tau_walk": s["tau_walk"],
        "wall_s": round(time.perf_counter() - t0, 1),
        "best": str(out / "best"),
    }


def run(a: argparse.Namespace) -> dict:
    import torch

    from eagle3kit import zoo
    from eagle3kit.measure.evaluate import load_eval_data
    from eagle3kit.model.loading import load_target

    torch.set_num_threads(a.threads)
    target = str(zoo.build(a.member, size=a.size))
    kw = dict(files=a.files, max_length=a.max_len, size=a.size)
    data = zoo_data(a.member, Path(a.work) / f"data-{a.size}", held_out=False, **kw)
    test_dir = zoo_data(a.member, Path(a.work) / f"test-{a.size}", held_out=True, **kw)
    tm = load_target(target)
    test = load_eval_data(test_dir.parent / f"{test_dir.name}.jsonl", tm.tokenizer)
    tm.close()
    test.samples = test.samples[: a.test_samples]
    from eagle3kit.data.vocab_counts import draft_vocab

    vocab = Path(a.work) / f"vocab-{a.size}-{a.draft_vocab_size}.safetensors"
    draft_vocab(data, a.draft_vocab_size, vocab)
    stores = _stores(a, target, data, vocab)
    rows = []
    for seed in [int(x) for x in a.seeds.split(",")]:
        for arm in ARMS:
            row = _train(a, arm, seed, target, data, stores, vocab)
            row["test"] = _test_score(target, row.pop("best"), test, a.ttt_steps)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return {
        "settings": {k: v for k, v in vars(a).items() if k != "json"},
        "test_samples": len(test.samples),
        "rows": rows,
        "table": table(rows),
    }


def table(rows: list[dict]) -> dict:
    """Per arm: test walked τ mean, min, max over seeds."""
    out = {}
    for arm in ARMS:
        xs = [r["test"]["tau_walk"] for r in rows if r["arm"] == arm]
        if xs:
            out[arm] = {
                "mean": round(statistics.fmean(xs), 4),
                "min": min(xs),
                "max": max(xs),
                "seeds": len(xs),
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--member", default="dsv3-v1")
    ap.add_argument("--size", default="tiny", help="zoo size of the member: full or tiny")
    ap.add_argument("--work", default="/tmp/e3k_bench/store_tau")
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--draft-vocab-size", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--ttt-steps", type=int, default=4)
    ap.add_argument("--eval-samples", type=int, default=64, help="validation samples scored")
    ap.add_argument("--heldout", type=float, default=0.1, help="validation split of the data")
    ap.add_argument("--test-samples", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the result file here")
    a = ap.parse_args()
    print("environment: " + environment())
    doc = run(a)
    print(
        f"test: {doc['test_samples']} samples of held-out files; walked tau at depth "
        f"{a.ttt_steps} after {a.steps} steps; mean [min..max] over seeds"
    )
    for arm, c in doc["table"].items():
        print(f"{arm:>12}  {c['mean']:.3f} [{c['min']:.3f}..{c['max']:.3f}]")
    if a.json:
        from _results import write_result

        write_result(a.json, "eagle3kit.bench_store_tau", doc)


if __name__ == "__main__":
    main()
