"""What the drafter-training benchmarks share (bench_warmstart, bench_store_tau, bench_predict).

Zoo chat samples as DATA (training files, or the slice's held-out files for a test set), the
test set scored once per drafter, the train settings every arm gets, the options that set
them, and mean [min..max] over seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def zoo_data(
    member: str, out: Path, *, files: int | None, max_length: int, held_out: bool, size: str
) -> Path:
    """DATA dir (and its .jsonl beside) of the zoo chat samples of `member`'s slice."""
    from eagle3kit import zoo
    from eagle3kit.data.prepare import prepare
    from eagle3kit.zoo import corpus as _corpus

    if (out / "data.json").is_file():
        return out
    target = zoo.get(member, size=size)
    m = zoo.member(member)
    convs = _corpus.chat_samples(_corpus.files(m.slice, held_out=held_out, limit=files))
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / f"{out.name}.jsonl"
    with open(src, "w") as f:
        for i, c in enumerate(convs):
            f.write(json.dumps({"id": f"{m.slice}-{i}", **c}) + "\n")
    prepare([src], target, out, max_length=max_length)
    return out


def held_out_set(a: argparse.Namespace, target: str, name: str = "test", *, max_length=None):
    """EvalData of the chat samples of the member's held-out files (all turns encoded with
    the target's chat template), the first ``a.test_samples`` of them when that is set."""
    from eagle3kit.measure.evaluate import load_eval_data
    from eagle3kit.model.loading import load_target

    kw = dict(files=a.files, max_length=max_length or a.max_len, size=a.size)
    d = zoo_data(a.member, Path(a.work) / f"{name}-{a.size}", held_out=True, **kw)
    tm = load_target(target)
    try:
        ev = load_eval_data(d.parent / f"{d.name}.jsonl", tm.tokenizer)
    finally:
        tm.close()
    if getattr(a, "test_samples", None):
        ev.samples = ev.samples[: a.test_samples]
    return ev


def canned_check(target: str, prompts: list[list[int]], *, n: int = 16, max_new: int = 64) -> dict:
    """The canned-output check (`core.diversity.cross_prompt`, as `bench` records it) on the
    target's greedy answers to the first ``n`` of ``prompts``: distinct outputs, distinct
    openings, pooled distinct-4 and the warning. A figure whose file has it set is not quoted."""
    from eagle3kit.decode import greedy_generate
    from eagle3kit.model.loading import load_target

    tm = load_target(target)
    try:
        eos = getattr(tm.tokenizer, "eos_token_id", None)
        outs = [
            greedy_generate(tm, p, max_new_tokens=max_new, eos_token_id=eos).tokens
            for p in prompts[:n]
        ]
    finally:
        tm.close()
    return answers_check(outs, max_new)


def answers_check(outputs: list[list[int]], max_new: int) -> dict:
    """`cross_prompt` of the target's greedy answers, printed when the warning is set."""
    import sys

    from eagle3kit.core.diversity import cross_prompt

    doc = {**cross_prompt(outputs), "max_new_tokens": max_new}
    if doc["warning"]:
        print("WARNING: " + doc["warning"], file=sys.stderr, flush=True)
    return doc


def check_line(c: dict) -> str:
    return (
        f"canned-output check: {c['distinct_outputs']} distinct outputs of {c['outputs']}, "
        f"pooled distinct-4 {c['pooled_distinct4']:.3f}, warning: {bool(c['warning'])}"
    )


def training_data(a: argparse.Namespace) -> Path:
    kw = dict(files=a.files, max_length=a.max_len, size=a.size)
    return zoo_data(a.member, Path(a.work) / f"data-{a.size}", held_out=False, **kw)


def test_score(target: str, drafter: str, test, depth: int) -> dict:
    """The drafter's offline acceptance on ``test``, scored once."""
    from eagle3kit.measure.evaluate import evaluate_offline
    from eagle3kit.model.loading import load_pair

    tm, d = load_pair(target, drafter)
    try:
        r = evaluate_offline(tm, d, test, depth)
    finally:
        tm.close()
    return {"tau_walk": r["tau_walk"], "tau_every_position": r["tau_every_position"]}


def train_run(out: Path, **cfg) -> dict:
    """Train into a fresh ``out``; the best step, its validation τ and the wall time. RUN/best
    is ``out / "best"``."""
    import shutil
    import time

    from eagle3kit.train.loop import TrainConfig, train

    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    s = train(TrainConfig(out=str(out), **cfg))
    return {
        "best_step": s["best_step"],
        "validation_tau_walk": s["tau_walk"],
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def train_settings(a: argparse.Namespace, target: str) -> dict:
    """The TrainConfig fields every arm of a comparison gets."""
    return dict(
        target=target,
        ttt_steps=a.ttt_steps,
        batch_size=a.batch,
        max_len=a.max_len,
        lr=a.lr,
        eval_samples=a.eval_samples,
        heldout=a.heldout,
    )


def add_train_options(p: argparse.ArgumentParser, *, member: str, size: str, work: str) -> None:
    """The options `train_settings`, `training_data` and `held_out_set` read."""
    p.add_argument("--member", default=member)
    p.add_argument("--size", default=size, help="zoo size of the member: full or tiny")
    p.add_argument("--work", default=work)
    p.add_argument("--files", type=int, default=400)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--ttt-steps", type=int, default=4)
    p.add_argument("--eval-samples", type=int, default=64, help="validation samples scored")
    p.add_argument("--heldout", type=float, default=0.1, help="validation split of the data")
    p.add_argument("--test-samples", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, help="write the result file here")


def seeds(a: argparse.Namespace) -> list[int]:
    return [int(x) for x in a.seeds.split(",")]


def spread(xs: list[float]) -> dict:
    """Mean, min, max over seeds."""
    return {
        "mean": round(statistics.fmean(xs), 4),
        "min": min(xs),
        "max": max(xs),
        "seeds": len(xs),
    }


def fmt_spread(c: dict | None) -> str:
    return f"{c['mean']:.3f} [{c['min']:.3f}..{c['max']:.3f}]" if c else "-"


def target_diversity(target: str, n: int = 8, max_new_tokens: int = 64) -> dict:
    """The canned-output check (core/diversity.cross_prompt) on the target's plain greedy
    answers to ``n`` held-out requests of its slice (as bench_mtp and `bench` run it): do
    its answers depend on the prompt? Acceptance on a canned target says little."""
    from eagle3kit.core.diversity import cross_prompt
    from eagle3kit.decode import greedy_generate
    from eagle3kit.model.loading import load_target

    tm = load_target(target)
    try:
        outs = []
        for ids in held_out_requests(target, tm.tokenizer, n):
            outs.append(greedy_generate(tm, ids, max_new_tokens=max_new_tokens).tokens)
            tm.reset()
    finally:
        tm.close()
    return {**cross_prompt(outs), "max_new_tokens": max_new_tokens}


def held_out_requests(target: str, tokenizer, n: int) -> list[list[int]]:
    """Prompt ids (the target's chat template) of ``n`` requests from the held-out files of
    the target's slice: requests no drafter here trained on."""
    from eagle3kit.data.regenerate import chat_prompt_ids
    from eagle3kit.methods.mtp.train.zoo import _slice
    from eagle3kit.zoo import corpus

    sliced, signed = _slice(Path(target))
    reqs = corpus.held_out_requests(corpus.files(sliced, held_out=True), n, signed)
    return [chat_prompt_ids(tokenizer, r["messages"]) for r in reqs]
