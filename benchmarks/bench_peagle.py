"""P-EAGLE warm-started from the demo's K2 EAGLE-3 drafter, beside an EAGLE-3 fine-tune of it.

    python benchmarks/bench_peagle.py [--size tiny] [--samples 128] [--seeds 0,1]
        [--min-steps 200] [--v1-steps N] [--json benchmarks/results/peagle-tiny.json]

On the v2 member (dsv3-v2; the K2 -> K2.5 situation in miniature), from the same start (the
demo's K2 drafter, trained on dsv3-v1: `demo.steps.k2_drafter`; or with --v1-steps N a K2-like
drafter trained here on dsv3-v1 for N steps), two fine-tunes that differ
only in their method: `--method eagle3` (TTT, its flags kept) and `--method peagle` (mask_hidden
added, COD over --ttt-steps depths). Same data (the first n training samples of v2's slice),
steps, learning rate, schedule, batch and seed; RUN/best chosen on the validation split among
trained steps. Then each RUN/best, the K2 drafter alone and the K2 drafter turned into P-EAGLE
without training (its mask_hidden a seeded normal) are scored once on the test set (chat
samples of the slice's held-out files): walked tau and per-position acceptance at depth
--ttt-steps (`measure.evaluate.evaluate_offline`, the same code `eval` runs).

What the table does not show: P-EAGLE drafts its K tokens in one drafter pass where EAGLE-3
runs K sequential steps; plan/ prices that cycle cost, this script only measures acceptance
(benchmarks/peagle_decode.py times both arms' decoding).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _drafter_runs as R  # noqa: E402
from _env import environment  # noqa: E402


def score(target: str, drafter: str, test, depth: int) -> dict:
    """Walked tau, every-position tau and per-position acceptance on `test`, scored once."""
    from eagle3kit.measure.evaluate import evaluate_offline
    from eagle3kit.model.loading import load_pair

    tm, d = load_pair(target, drafter)
    try:
        r = evaluate_offline(tm, d, test, depth)
    finally:
        tm.close()
    keys = ("method", "tau_walk", "tau_every_position", "per_position_acceptance")
    return {k: r[k] for k in keys}


def untrained_peagle(k2: str, out: Path, seed: int) -> str:
    """The K2 drafter as P-EAGLE before any training (what the warm start begins from)."""
    from eagle3kit.methods.peagle.model import PEagleDrafter, save_peagle
    from eagle3kit.model.loading import load_drafter

    m = load_drafter(k2).drafter
    p = PEagleDrafter.from_eagle3(m, mask_token_id=0, seed=seed)
    save_peagle(out, p.spec, p.canonical_state(with_embedding=False), p.mask_token_id, None)
    return str(out)


def v1_drafter(a: argparse.Namespace) -> str:
    """A K2-like EAGLE-3 drafter trained here on the v1 member (`--v1-steps` steps, the
    demo's draft vocab of 256, this script's batch and length): the demo's own K2 drafter
    takes its recipe's 200 steps of batch 16 x 256 tokens, too long for a loaded machine."""
    from eagle3kit import zoo

    v1 = a.member.replace("-v2", "-v1")
    target = str(zoo.get(v1, size=a.size))
    kw = dict(files=a.files, max_length=a.max_len, size=a.size)
    data = R.zoo_data(v1, Path(a.work) / f"data-v1-{a.size}", held_out=False, **kw)
    out = Path(a.work) / "v1-drafter"
    settings = {**R.train_settings(a, target), "data": str(data)}
    R.train_run(out, draft_vocab_size=256, steps=a.v1_steps, seed=0, **settings)
    return str(out / "best")


def fine_tune(a: argparse.Namespace, k2: str, common: dict, method: str, seed: int) -> dict:
    """One arm: the K2 drafter fine-tuned with --method `method` into WORK/METHOD-sSEED
    (RUN/best there); the row of the result file without its test score."""
    steps = max(a.min_steps, round(a.samples * a.epochs / a.batch))
    out = Path(a.work) / f"{method}-s{seed}"
    r = R.train_run(
        out,
        init_from=k2,
        method=method,
        max_samples=a.samples,
        steps=steps,
        seed=seed,
        eval_every=max(1, steps // 4),
        mask_token_id=0,
        **common,
    )
    return {"method": method, "seed": seed, "steps": steps, **r}


def add_options(ap: argparse.ArgumentParser, work: str) -> None:
    """The options `fine_tune` and the training data read (this script's and
    peagle_decode.py's)."""
    R.add_train_options(ap, member="dsv3-v2", size="tiny", work=work)
    ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--epochs", type=float, default=2.0, help="passes over the samples")
    ap.add_argument("--min-steps", type=int, default=200)


def run(a: argparse.Namespace) -> dict:
    import torch

    from eagle3kit import zoo
    from eagle3kit.demo.steps import k2_drafter

    torch.set_num_threads(a.threads)
    target = str(zoo.get(a.member, size=a.size))
    k2 = a.v1_drafter or (v1_drafter(a) if a.v1_steps else str(k2_drafter(a.size)))
    common = {**R.train_settings(a, target), "data": str(R.training_data(a))}
    test = R.held_out_set(a, target)
    d = a.ttt_steps
    alone = {
        "eagle3": score(target, k2, test, d),
        "peagle_untrained": score(target, untrained_peagle(k2, Path(a.work) / "k2-pe", 0), test, d),
    }
    print(json.dumps({"k2_alone": alone}), file=sys.stderr, flush=True)
    rows = []
    for seed in R.seeds(a):
        for method in ("eagle3", "peagle"):
            row = fine_tune(a, k2, common, method, seed)
            row["test"] = score(target, str(Path(a.work) / f"{method}-s{seed}" / "best"), test, d)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return {
        "settings": {k: v for k, v in vars(a).items() if k not in ("json",)},
        # the canned-output check: do the target's own answers depend on the prompt?
        "target_diversity": R.target_diversity(target),
        "test_samples": len(test.samples),
        "k2_drafter": k2,
        "k2_alone": alone,
        "rows": rows,
        "table": {
            m: R.spread([r["test"]["tau_walk"] for r in rows if r["method"] == m])
            for m in ("eagle3", "peagle")
        },
    }


def report(doc: dict) -> None:
    d = doc["settings"]["ttt_steps"]
    print(f"target's answers: {json.dumps(doc['target_diversity'])}")
    print(f"test: {doc['test_samples']} samples of held-out files; walked tau at depth {d}")
    for name, s in doc["k2_alone"].items():
        acc = ", ".join(f"{x:.3f}" for x in s["per_position_acceptance"])
        print(f"K2 drafter alone ({name}): {s['tau_walk']:.3f} (per position {acc})")
    for m, c in doc["table"].items():
        print(f"fine-tuned from K2, --method {m}: {R.fmt_spread(c)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_options(ap, "/tmp/e3k_bench/peagle")
    ap.add_argument("--v1-drafter", default=None, help="default: the demo's K2 drafter")
    ap.add_argument(
        "--v1-steps", type=int, default=0, help="train a K2-like v1 drafter here (0: the demo's)"
    )
    a = ap.parse_args()
    print("environment: " + environment())
    doc = run(a)
    report(doc)
    if a.json:
        from _results import write_result

        write_result(a.json, "eagle3kit.bench_peagle", doc)


if __name__ == "__main__":
    main()
