"""Does training from the lossy feature store reach the τ of training on exact features?

    python benchmarks/bench_store_tau.py [--member dsv3-v2] [--size full|tiny]
        [--seeds 0,1,2] [--steps 200] [--draft-vocab-size 256]
        [--json benchmarks/results/store_tau-full.json]

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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _drafter_runs as R  # noqa: E402
from _env import environment  # noqa: E402

ARMS = ("exact", "store-top64", "store-full")


def _stores(a, target: str, data: Path, vocab: Path) -> dict[str, str]:
    """The two stores of DATA (resumable: a complete store is left as it is)."""
    from eagle3kit.data.store import capture
    from eagle3kit.model.loading import load_target

    out = {}
    tm = load_target(target)
    try:
        for arm, topk in (("store-top64", 64), ("store-full", None)):
            p = Path(a.work) / f"{arm}-{a.size}"
            capture(data, tm, p, vocab=vocab, topk=topk)
            out[arm] = str(p)
    finally:
        tm.close()
    return out


def run(a: argparse.Namespace) -> dict:
    import torch

    from eagle3kit import zoo
    from eagle3kit.data.vocab_counts import draft_vocab

    torch.set_num_threads(a.threads)
    target = str(zoo.get(a.member, size=a.size))
    data = R.training_data(a)
    test = R.held_out_set(a, target)
    # the canned-output check on the target's greedy answers to the test prompts (issue 33)
    diversity = R.canned_check(target, test.prompts, n=a.check_prompts)
    vocab = Path(a.work) / f"vocab-{a.size}-{a.draft_vocab_size}.safetensors"
    draft_vocab(data, a.draft_vocab_size, vocab)
    inputs = {"exact": {"data": str(data)}}
    inputs |= {arm: {"features": p} for arm, p in _stores(a, target, data, vocab).items()}
    common = {**R.train_settings(a, target), "vocab": str(vocab), "steps": a.steps}
    rows = []
    for seed in R.seeds(a):
        for arm in ARMS:
            out = Path(a.work) / f"{arm}-s{seed}"
            every = max(1, a.steps // 4)
            r = R.train_run(out, seed=seed, eval_every=every, **common, **inputs[arm])
            row = {"arm": arm, "seed": seed, "steps": a.steps, **r}
            row["test"] = R.test_score(target, str(out / "best"), test, a.ttt_steps)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return {
        "settings": {k: v for k, v in vars(a).items() if k != "json"},
        "test_samples": len(test.samples),
        "target_diversity": diversity,
        "rows": rows,
        "table": table(rows),
    }


def table(rows: list[dict]) -> dict:
    """Per arm: test walked τ mean, min, max over seeds."""
    out = {}
    for arm in ARMS:
        xs = [r["test"]["tau_walk"] for r in rows if r["arm"] == arm]
        if xs:
            out[arm] = R.spread(xs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    R.add_train_options(ap, member="dsv3-v2", size="full", work="/tmp/e3k_bench/store_tau")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--draft-vocab-size", type=int, default=256)
    ap.add_argument("--check-prompts", type=int, default=16, help="prompts of the canned check")
    a = ap.parse_args()
    print("environment: " + environment())
    doc = run(a)
    print(
        f"test: {doc['test_samples']} samples of held-out files; walked tau at depth "
        f"{a.ttt_steps} after {a.steps} steps; mean [min..max] over seeds"
    )
    print(R.check_line(doc["target_diversity"]))
    for arm, c in doc["table"].items():
        print(f"{arm:>12}  {R.fmt_spread(c)}")
    if a.json:
        from _results import write_result

        write_result(a.json, "eagle3kit.bench_store_tau", doc)


if __name__ == "__main__":
    main()
