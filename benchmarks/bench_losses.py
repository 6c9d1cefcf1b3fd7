"""τ after equal steps for each training loss (`train --loss`), on two of the zoo's questions.

    python benchmarks/bench_losses.py run [--size full] [--arms warm,scratch]
        [--losses kl,rkl,jsd,tv,ce,lk,lk-hybrid] [--seeds 0,1] [--warm-steps 80]
        [--scratch-steps 80] [--online-prompts 4] [--online-seeds 0]
        [--json benchmarks/results/losses-full.json]

Two arms, every loss in each with the same settings, steps and seeds:
- warm: the demo's question, fine-tuning the K2 drafter (trained on dsv3-v1, shipped) on data
  of dsv3-v2, its vocab kept, lr / 3 (the demo's warm-start rule, demo/steps.py);
- scratch: a fresh drafter on dsv3-v1, its draft vocab built from the data, as large as the K2
  drafter's, at lr.
The demo's recipe otherwise (batch 8, max length 128, 3 TTT steps, lr 3e-3).

Three disjoint sets per arm, as in bench_warmstart.py (benchmarks/_drafter_runs.py): training
samples of the member's slice; the run's validation split of them, evaluated once after the
last step (so RUN/best is the last step: every loss is scored after the same steps); and the
test set, chat samples of the slice's held-out files (files the zoo never trained on), scored
once per run on RUN/best: walked τ (`tau_walk`) and the
every-position τ offline at depth --ttt-steps, and τ online for the runs of --online-seeds
(greedy chain decoding at that depth, `decode.speculative_generate`, pooled over the cycles of
the first --online-prompts test prompts, --online-tokens new tokens each). The canned-output
check (`core.diversity`) is recorded per arm on the target's greedy answers to the test
prompts (what online τ decodes) and on the test set's own answers (what offline τ is scored
on): a τ on canned answers says little. The K2 drafter alone is scored on the warm arm's test set.

A loss "wins" an arm only when, over two seeds or more, its lowest seed is above every other
loss's highest seed (`verdict`); otherwise the file names the losses whose seed ranges overlap
the best mean's.
Sizes, and why: the demo's fine-tune is 80 steps of batch 8 on 600 samples of v2's slice, so
every run gets that (the scratch arm too: the demo's "from scratch" row gets the same steps);
2 seeds per loss, 7 losses, 2 arms: 28 runs. On the shared 2-core machine (load 6-10 from other
jobs) a run trained in about 4-5 minutes, offline scoring of 64 test samples took under a
minute and decoding 4 prompts online about 100 s, so online τ is measured for seed 0 only
(--online-seeds): about 2.5 hours in all. Torch threads: 2 (the machine is shared).
The committed table (docs/train.md) was sized to about 40 minutes at a load of 13-20: the six
losses the issue names (no lk-hybrid), 40 steps, 32 test samples, no online τ, one process
per arm (--arms) side by side with 1 thread each; a run took 84-207 s there.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _drafter_runs as R  # noqa: E402
from _env import environment  # noqa: E402

LOSSES = ("kl", "rkl", "jsd", "tv", "ce", "lk", "lk-hybrid")
ARMS = {"warm": "dsv3-v2", "scratch": "dsv3-v1"}


def online_tau(target: str, drafter: str, prompts: list[list[int]], a) -> dict:
    """τ online: greedy chain decoding of `prompts`, pooled over every cycle."""
    from eagle3kit.decode import speculative_generate
    from eagle3kit.model.loading import load_pair

    tm, d = load_pair(target, drafter)
    accepted: list[int] = []
    try:
        eos = getattr(tm.tokenizer, "eos_token_id", None)
        for ids in prompts[: a.online_prompts]:
            g = speculative_generate(
                tm, d, ids, max_new_tokens=a.online_tokens, depth=a.ttt_steps, eos_token_id=eos
            )
            accepted += [c.accepted for c in g.stats.cycles]
            tm.reset()
    finally:
        tm.close()
    n = len(accepted)
    return {"tau_online": 1.0 + sum(accepted) / n if n else None, "cycles": n}


def _arm(a: argparse.Namespace, arm: str) -> argparse.Namespace:
    """The arm's options: its member and its own work folder (data, test set, runs)."""
    b = copy.copy(a)
    b.member, b.work = ARMS[arm], str(Path(a.work) / arm)
    return b


def run_arm(a: argparse.Namespace, arm: str, k2: str, vocab: int) -> dict:
    from eagle3kit import zoo

    b = _arm(a, arm)
    target = str(zoo.get(b.member, size=b.size))
    common = {**R.train_settings(b, target), "data": str(R.training_data(b))}
    common |= {"max_samples": b.train_samples, "eval_every": None}
    if arm == "warm":
        common |= {"init_from": k2, "lr": b.lr / 3, "steps": b.warm_steps}
    else:
        common |= {"draft_vocab_size": vocab, "steps": b.scratch_steps}
    # one evaluation after the last step (and step 0, never a candidate): RUN/best is the
    # last step, so every loss is scored after the same steps
    common["eval_every"] = common["steps"]
    test = R.held_out_set(b, target)
    doc = {
        "member": b.member,
        "target_diversity": R.canned_check(target, test.prompts, n=b.check_prompts),
        "answers_diversity": answers_diversity(test, b.online_tokens),
        "test_samples": len(test.samples),
        "settings": {k: v for k, v in common.items() if k not in ("target", "data")},
        "rows": [],
    }
    if arm == "warm":
        doc["k2_alone"] = _score(target, k2, test, b)
        print(json.dumps({"k2_alone": doc["k2_alone"]}), file=sys.stderr, flush=True)
    for seed in R.seeds(b):
        for loss in b.losses.split(","):
            out = Path(b.work) / f"{loss}-s{seed}"
            row = {"loss": loss, "seed": seed, **R.train_run(out, seed=seed, loss=loss, **common)}
            online = str(seed) in b.online_seeds.split(",")
            row["test"] = _score(target, str(out / "best"), test, b, online=online)
            doc["rows"].append(row)
            print(json.dumps({"arm": arm, **row}), file=sys.stderr, flush=True)
    doc["table"] = table(doc["rows"])
    doc["verdict"] = verdict(doc["table"])
    return doc


def answers_diversity(test, n: int) -> dict:
    """The canned-output check on the test set's own answers (the assistant tokens offline τ
    is scored on, the first `n` of each): are they one answer repeated?"""
    outs = [ids[mask].tolist()[:n] for ids, mask in test.samples]
    return R.answers_check(outs, n)


def _score(target: str, drafter: str, test, b: argparse.Namespace, online: bool = True) -> dict:
    """Offline (walked, every position) and, with `online`, online τ of `drafter` on the test
    set, once, and the seconds each took."""
    t0 = time.perf_counter()
    out = R.test_score(target, drafter, test, b.ttt_steps)
    out["offline_s"] = round(time.perf_counter() - t0, 1)
    if b.online_prompts and online:
        t0 = time.perf_counter()
        out |= online_tau(target, drafter, test.prompts, b)
        out["online_s"] = round(time.perf_counter() - t0, 1)
    return out


def table(rows: list[dict]) -> list[dict]:
    """Per loss: each τ as mean, min, max over seeds."""
    out = []
    for loss in dict.fromkeys(r["loss"] for r in rows):
        mine = [r["test"] for r in rows if r["loss"] == loss]
        line: dict = {"loss": loss}
        for key in ("tau_walk", "tau_every_position", "tau_online"):
            xs = [t[key] for t in mine if t.get(key) is not None]
            if xs:
                line[key] = R.spread(xs)
        out.append(line)
    return out


def verdict(lines: list[dict], key: str = "tau_walk") -> dict:
    """The loss of the best mean `key`, and whether its seeds clear every other loss's
    (its min above their max); else the losses whose ranges reach its min."""
    scored = [x for x in lines if key in x]
    if not scored:
        return {"key": key, "best": None, "separated": False, "overlapping": []}
    best = max(scored, key=lambda x: x[key]["mean"])
    overlap = [x["loss"] for x in scored if x is not best and x[key]["max"] >= best[key]["min"]]
    alone = not overlap and best[key]["seeds"] >= 2  # one seed has no spread to clear
    return {"key": key, "best": best["loss"], "separated": alone, "overlapping": overlap}


def run(a: argparse.Namespace) -> dict:
    import torch

    from eagle3kit.demo.steps import k2_drafter

    torch.set_num_threads(a.threads)
    k2 = str(k2_drafter(a.size))
    vocab = json.loads((Path(k2) / "config.json").read_text())["draft_vocab_size"]
    arms = {arm: run_arm(a, arm, k2, vocab) for arm in a.arms.split(",")}
    return {
        "settings": {k: v for k, v in vars(a).items() if k not in ("json", "cmd")},
        "k2_drafter": k2,
        "arms": arms,
    }


def report(doc: dict) -> None:
    for arm, d in doc["arms"].items():
        print(
            f"\n{arm} ({d['member']}, {d['settings']['steps']} steps): test {d['test_samples']} "
            "samples of held-out files; mean [min..max] over seeds"
        )
        print(R.check_line(d["target_diversity"]))
        if "k2_alone" in d:
            print(f"K2 drafter alone: tau_walk {d['k2_alone']['tau_walk']:.3f}")
        print(f"{'loss':>10} {'tau_walk':>24} {'tau_every_position':>24} {'tau_online':>24}")
        for x in d["table"]:
            cells = [R.fmt_spread(x.get(k)) for k in ("tau_walk", "tau_every_position")]
            cells.append(R.fmt_spread(x.get("tau_online")))
            print(f"{x['loss']:>10} {cells[0]:>24} {cells[1]:>24} {cells[2]:>24}")
        v = d["verdict"]
        say = "separated from every other" if v["separated"] else f"overlaps {v['overlapping']}"
        print(f"best mean {v['key']}: {v['best']} ({say})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="every loss on the warm and the scratch arm")
    R.add_train_options(r, member="dsv3-v2", size="full", work="/tmp/e3k_bench/losses")
    r.set_defaults(batch=8, max_len=128, ttt_steps=3, eval_samples=32, test_samples=64)
    r.set_defaults(seeds="0,1", files=30)  # 30 files: 696 (v1) and 1020 (v2) chat samples
    r.add_argument("--arms", default="warm,scratch")
    r.add_argument("--losses", default=",".join(LOSSES))
    r.add_argument("--train-samples", type=int, default=600, help="the demo's v2 samples")
    r.add_argument("--warm-steps", type=int, default=80, help="the demo's fine-tune steps")
    r.add_argument("--scratch-steps", type=int, default=80, help="the demo's: as the warm arm")
    r.add_argument("--online-prompts", type=int, default=4, help="0: no online τ")
    r.add_argument("--online-seeds", default="0", help="the seeds whose runs decode online")
    r.add_argument("--online-tokens", type=int, default=64)
    r.add_argument("--check-prompts", type=int, default=16, help="prompts of the canned check")
    a = ap.parse_args()
    print("environment: " + environment())
    doc = run(a)
    report(doc)
    if a.json:
        from _results import write_result

        write_result(a.json, "eagle3kit.bench_losses", doc)


if __name__ == "__main__":
    main()
