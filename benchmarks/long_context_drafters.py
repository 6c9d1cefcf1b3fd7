"""Drafters that hold up on long inputs? Three EAGLE-3 drafters for one full zoo member, τ by
context bucket, on prompts whose answers are not canned.

    python benchmarks/long_context_drafters.py [--member dsv3-v1] [--drafter k2-drafter]
        [--seeds 0,1] [--steps 8] [--batch 1] [--window 128] [--prompts 3] [--max-new 64]
        [--json benchmarks/results/long_context_drafters-dsv3-v1.json]
    python benchmarks/long_context_drafters.py --part greedy|demo|long|swa [...]   # one part
    python benchmarks/long_context_drafters.py --collect [...]    # the result from the parts

Without --part/--collect it runs every part in turn, then collects. The parts are independent
processes (each writes WORK/part-PART-sSEED.json with its own command and commit), so on a
shared machine they can run side by side; --collect checks every arm against greedy's answers.

Arms:
- **demo**: the zoo's shipped drafter for the member (`--drafter`), trained by the zoo's
  recipe at the demo's length (128 tokens, 240 steps of 8 chat samples; its zoo.json), as is;
- **long**: that drafter fine-tuned `--steps` steps on long samples at 2048 tokens
  (`train --init-from --max-len 2048`, the target's max_position_embeddings);
- **swa**: the same fine-tune with `--sliding-window W` (the same data, order, steps and lr):
  at any context its layer sees the last W positions only, as in training.
A long sample is a window of the member's own training-split standard-library files
concatenated (never a held-out file), cut in two: the first part the user turn ("Continue this
file:"), the second the assistant's. The loss is the target's own law at every assistant
position (online teacher), so the text need not be the target's. Long windows only, no packing.
The seed sets the fine-tunes' data order (the start is the same drafter).

Each drafter decodes (chain, depth 3 = the TTT depth, greedy) `--prompts` prompts per context
length, built from the zoo's held-out files (data/long_prompts.py, set B: a request for a
function after 128..1984 tokens of context; 1984 + 64 new tokens reach the 2048 positions).
τ per bucket = tokens emitted / cycles over its prompts; each answer is checked against plain
greedy (lossless), and the greedy answers' distinctness is recorded (core/diversity.py).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _results import write_result  # noqa: E402

LENGTHS = (128, 512, 1024, 1984)
ARMS = ("demo", "long", "swa")  # demo: the shipped drafter as it is


def _long_samples(member: str, tok, n: int, length: int, seed: int) -> list[dict]:
    """n conversations of about `length` tokens cut from the member's training files
    concatenated (a seeded order): user = "Continue this file:" + first half, assistant =
    the second half."""
    from eagle3kit import zoo
    from eagle3kit.zoo import corpus

    files = corpus.files(zoo.member(member).slice, held_out=False)
    random.Random(seed).shuffle(files)
    ids = tok("\n\n".join(f.text for f in files), add_special_tokens=False)["input_ids"]
    half = (length - 32) // 2  # room for the chat frame
    out = []
    for i in range(n):
        a = i * 2 * half
        if a + 2 * half > len(ids):
            break
        user = "Continue this file:\n" + tok.decode(ids[a : a + half])
        out.append(
            {
                "id": f"long-{i}",
                "messages": [
                    {"role": "user", "content": user},
                    {"role": "assistant", "content": tok.decode(ids[a + half : a + 2 * half])},
                ],
            }
        )
    return out


def _data(name: str, rows: list[dict], target: str, work: Path, max_length: int) -> Path:
    from eagle3kit.data.prepare import prepare

    out = work / f"data-{name}"
    if (out / "data.json").is_file():
        return out
    src = work / f"{name}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepare([src], target, out, max_length=max_length)
    return out


def _train(arm: str, seed: int, data: Path, target: str, base: str, a, work: Path):
    """(RUN/best, summary) of one fine-tune of the base drafter (cached in `work`)."""
    from eagle3kit.train.config import TrainConfig
    from eagle3kit.train.loop import train

    run = work / f"run-{arm}-s{seed}"
    if (run / "summary.json").is_file():
        return run / "best", json.loads((run / "summary.json").read_text())
    cfg = TrainConfig(
        out=str(run),
        target=target,
        data=str(data),
        init_from=base,
        ttt_steps=a.depth,
        steps=a.steps,
        batch_size=a.batch,
        max_len=2048,
        sliding_window=a.window if arm == "swa" else None,
        lr=a.lr,
        seed=seed,
        eval_every=a.steps,
        eval_samples=2,
        eval_batch=1,
        heldout=2,
        best_includes_start=False,
    )
    t0 = time.time()
    s = train(cfg)
    s["wall_s"] = round(time.time() - t0, 1)
    return run / "best", s


def _decode(tm, drafter_dir: Path | None, prompts, a) -> list[dict]:
    """Plain greedy (no drafter) or the drafter's chain on every prompt."""
    from eagle3kit.decode import greedy_generate, speculative_generate
    from eagle3kit.model.drafter import Eagle3Drafter

    rows = []
    d = None
    if drafter_dir is not None:
        d = Eagle3Drafter.from_pretrained(drafter_dir).eval()
        d.attach_target(tm)
    for p in prompts:
        if d is None:
            g = greedy_generate(tm, list(p.ids), max_new_tokens=a.max_new)
            rows.append({"length": p.length, "index": p.index, "tokens": g.tokens})
            continue
        g = speculative_generate(tm, d, list(p.ids), max_new_tokens=a.max_new, depth=a.depth)
        st = g.stats
        rows.append(
            {
                "length": p.length,
                "index": p.index,
                "tokens": g.tokens,
                "emitted": sum(c.accepted + 1 for c in st.cycles),
                "cycles": len(st.cycles),
            }
        )
    return rows


def _buckets(rows: list[dict], greedy: list[dict]) -> dict[str, dict]:
    ref = {(r["length"], r["index"]): r["tokens"] for r in greedy}
    out = {}
    for n in sorted({r["length"] for r in rows}):
        mine = [r for r in rows if r["length"] == n]
        out[str(n)] = {
            "tau": round(
                sum(r["emitted"] for r in mine) / max(1, sum(r["cycles"] for r in mine)), 4
            ),
            "cycles": sum(r["cycles"] for r in mine),
            "prompts": len(mine),
            "lossless": all(r["tokens"] == ref[(r["length"], r["index"])] for r in mine),
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--member", default="dsv3-v1")
    p.add_argument("--drafter", default="k2-drafter")
    p.add_argument("--seeds", default="0")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--window", type=int, default=128)
    p.add_argument("--long-samples", type=int, default=24)
    p.add_argument("--prompts", type=int, default=3)
    p.add_argument("--max-new", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work", default="/tmp/long_context_drafters")
    p.add_argument("--json", default="benchmarks/results/long_context_drafters-dsv3-v1.json")
    p.add_argument("--part", help="run one part (greedy, demo, long, swa) into WORK/part-*.json")
    p.add_argument("--collect", action="store_true", help="the result from WORK's parts")
    a = p.parse_args()
    if a.collect:
        return collect(a)
    if a.part:
        return run_part(a)
    for part in ("greedy", *ARMS):  # one process, part after part
        a.part = part
        run_part(a)
    collect(a)


def _setup(a):
    """(target model, target dir, base drafter dir, DATA of long samples, prompts, source)."""
    import torch

    from eagle3kit import zoo
    from eagle3kit.data.long_prompts import long_prompts
    from eagle3kit.model.loading import load_target
    from eagle3kit.zoo.shipping import shipped

    torch.set_num_threads(a.threads)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    target, base = str(zoo.get(a.member)), str(shipped(a.drafter))
    tm = load_target(target)
    data = work / "data-long"
    if not (data / "data.json").is_file():
        longs = _long_samples(a.member, tm.tokenizer, a.long_samples, 2048, 0)
        data = _data("long", longs, target, work, 2048)
    prompts, source = long_prompts(
        tm.tokenizer, LENGTHS, a.prompts, which="B", new_tokens=a.max_new, max_positions=2048
    )
    return tm, target, base, data, prompts, source


def run_part(a) -> None:
    """One part: plain greedy on every prompt, or one arm's drafter (trained first for long
    and swa, unless WORK holds its run) on every prompt; WORK/part-PART-sSEED.json."""
    from _results import code_state

    t0 = time.time()
    tm, target, base, data, prompts, source = _setup(a)
    seed = int(a.seeds.split(",")[0])
    s: dict = {}
    best = None
    if a.part == "demo":
        best = Path(base)
    elif a.part in ("long", "swa"):
        best, s = _train(a.part, seed, data, target, base, a, Path(a.work))
    t1 = time.time()
    rows = _decode(tm, best, prompts, a)
    doc = {
        "part": a.part,
        "seed": None if a.part in ("greedy", "demo") else seed,
        "command": "python " + " ".join(sys.argv),
        **code_state(),
        "prompt_source": source,
        "train_tokens_per_s": s.get("tokens_per_s"),
        "train_steps": s.get("steps"),
        "decode_wall_s": round(time.time() - t1, 1),
        "wall_s": round(time.time() - t0, 1),
        "rows": rows,
    }
    out = Path(a.work) / f"part-{a.part}-s{seed}.json"
    out.write_text(json.dumps(doc))
    print(out, doc["wall_s"], flush=True)


def collect(a) -> None:
    """The result file from WORK's parts: τ per bucket per arm, lossless against greedy."""
    from eagle3kit.core.diversity import cross_prompt

    work = Path(a.work)
    parts = [json.loads(p.read_text()) for p in sorted(work.glob("part-*.json"))]
    greedy = next(p for p in parts if p["part"] == "greedy")
    runs = [
        {
            "arm": p["part"],
            "seed": p["seed"],
            "train_tokens_per_s": p["train_tokens_per_s"],
            "train_steps": p["train_steps"],
            "decode_wall_s": p["decode_wall_s"],
            "by_length": _buckets(p["rows"], greedy["rows"]),
        }
        for p in parts
        if p["part"] in ARMS
    ]
    table = {}
    for arm in ARMS:
        table[arm] = {}
        for n in LENGTHS:
            taus = [r["by_length"][str(n)]["tau"] for r in runs if r["arm"] == arm]
            if taus:
                table[arm][str(n)] = {
                    "mean": round(statistics.mean(taus), 4),
                    "min": min(taus),
                    "max": max(taus),
                    "runs": len(taus),
                }
    keep = ("part", "seed", "command", "commit", "dirty", "changed_during_run", "wall_s")
    doc = {
        "member": a.member,
        "drafter": a.drafter,
        "settings": {k: v for k, v in vars(a).items() if k not in ("json", "work", "part")},
        "lengths": list(LENGTHS),
        "prompt_source": greedy["prompt_source"],
        "prompt_set": "B",
        "canned_check": cross_prompt([r["tokens"] for r in greedy["rows"]]),
        "train_data": {"long_samples": a.long_samples, "tokens_each": 2048, "max_len": 2048},
        "parts": [{k: p.get(k) for k in keep} for p in parts],
        "runs": runs,
        "tau_by_length": table,
    }
    print(write_result(a.json, "long_context_drafters", doc))


if __name__ == "__main__":
    main()
