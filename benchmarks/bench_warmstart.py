"""Warm start vs from scratch on the v2 target (the K2 -> K2.5 hypothesis in miniature).

    python benchmarks/bench_warmstart.py data --member dsv3-v1 --out /tmp/e3k_bench/data-v1
    python benchmarks/bench_warmstart.py run --v1-drafter /tmp/e3k_drafters/dsv3-v1 \
        --sizes 64,128,256,512 --epochs 2 [--size full|tiny] [--json]

`data` turns the zoo's own chat samples of a member's slice (v1: stdlib library, v2: stdlib
tests; zoo/_corpus.py) into a DATA dir through the prepared-data path (`data.prepare` with the
member's tokenizer and chat template). `run` trains on the v2 target (a) from scratch and
(b) from the v1 drafter (--init-from, vocab kept) on the first n training samples for each n
in --sizes, with the same steps per sample and batch, and prints the best held-out simulated
accept length of each. The goal: (b) reaches (a)'s accept length at the largest n with at most
25% of the samples. Torch threads: 2 (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def zoo_data(
    member: str,
    out: Path,
    *,
    files: int | None = 400,
    max_length: int = 512,
    held_out_files: bool = False,
    size: str = "full",
) -> Path:
    """DATA dir of the zoo chat samples of `member`'s slice, tokenised for that member."""
    from eagle3kit import zoo
    from eagle3kit.data.prepare import prepare
    from eagle3kit.zoo import corpus as _corpus

    if (out / "data.json").is_file():
        return out
    target = zoo.build(member, size=size)
    m = zoo.member(member)
    convs = _corpus.chat_samples(_corpus.files(m.slice, held_out=held_out_files, limit=files))
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / f"{out.name}.jsonl"
    with open(src, "w") as f:
        for i, c in enumerate(convs):
            f.write(json.dumps({"id": f"{m.slice}-{i}", **c}) + "\n")
    prepare([src], target, out, max_length=max_length)
    return out


def train_once(out: Path, **kw) -> dict:
    from eagle3kit.train.loop import TrainConfig, train

    t0 = time.perf_counter()
    s = train(TrainConfig(out=str(out), **kw))
    s["wall_s"] = time.perf_counter() - t0
    return s


def run(args: argparse.Namespace) -> dict:
    import torch
    from _env import environment, environment_info

    from eagle3kit import zoo

    torch.set_num_threads(args.threads)
    target = str(zoo.build(args.member, size=args.size))
    data = zoo_data(
        args.member,
        Path(args.work) / f"data-{args.member}-{args.size}",
        files=args.files,
        max_length=args.max_len,
        size=args.size,
    )
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = []
    common = dict(
        target=target,
        data=str(data),
        ttt_steps=args.ttt_steps,
        batch_size=args.batch,
        max_len=args.max_len,
        lr=args.lr,
        eval_samples=args.eval_samples,
        heldout=args.heldout,
        seed=0,
    )
    for n in sizes:
        steps = max(4, round(n * args.epochs / args.batch))
        for kind in ("scratch", "warm"):
            extra = (
                {"init_from": args.v1_drafter}
                if kind == "warm"
                else {"draft_vocab_size": args.draft_vocab_size}
            )
            out = Path(args.work) / f"{kind}-{n}"
            if out.exists():
                import shutil

                shutil.rmtree(out)
            s = train_once(
                out, max_samples=n, steps=steps, eval_every=max(1, steps // 4), **common, **extra
            )
            rows.append(
                {
                    "kind": kind,
                    "samples": n,
                    "steps": steps,
                    "sim_accept_len": s["sim_accept_len"],
                    "best_step": s["best_step"],
                    "depth4": (s.get("sim_accept_len_by_depth") or [None] * 4)[3],
                    "wall_s": round(s["wall_s"], 1),
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return {"env": environment_info(), "env_line": environment(), "rows": rows}


def report(doc: dict) -> None:
    print(doc["env_line"])
    print(
        f"{'samples':>8} {'scratch tau':>12} {'warm tau':>10}  (best held-out simulated accept "
        "length)"
    )
    by = {(r["kind"], r["samples"]): r for r in doc["rows"]}
    sizes = sorted({r["samples"] for r in doc["rows"]})
    for n in sizes:
        a, b = by.get(("scratch", n)), by.get(("warm", n))
        print(
            f"{n:>8} {a['sim_accept_len'] if a else float('nan'):>12.3f} "
            f"{b['sim_accept_len'] if b else float('nan'):>10.3f}"
        )
    final = by[("scratch", sizes[-1])]["sim_accept_len"]
    reach = [n for n in sizes if by[("warm", n)]["sim_accept_len"] >= final]
    if reach:
        print(
            f"warm start reaches scratch's final {final:.3f} with {reach[0]} samples "
            f"({100 * reach[0] / sizes[-1]:.0f}% of {sizes[-1]})"
        )
    else:
        print(f"warm start does not reach scratch's final {final:.3f} at any size tried")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data", help="DATA dir from a zoo member's chat samples")
    d.add_argument("--member", default="dsv3-v1")
    d.add_argument("--out", required=True)
    d.add_argument("--files", type=int, default=400)
    d.add_argument("--max-length", type=int, default=512)
    r = sub.add_parser("run", help="scratch vs warm start at several data sizes")
    r.add_argument("--member", default="dsv3-v2")
    r.add_argument("--size", default="full", help="zoo size of the member: full or tiny")
    r.add_argument("--v1-drafter", default="/tmp/e3k_drafters/dsv3-v1")
    r.add_argument("--work", default="/tmp/e3k_bench/warmstart")
    r.add_argument("--files", type=int, default=400)
    r.add_argument("--sizes", default="64,128,256,512")
    r.add_argument("--epochs", type=float, default=2.0, help="passes over the n samples")
    r.add_argument("--batch", type=int, default=16)
    r.add_argument("--max-len", type=int, default=256)
    r.add_argument("--lr", type=float, default=2e-3)
    r.add_argument("--ttt-steps", type=int, default=4)
    r.add_argument("--draft-vocab-size", type=int, default=2048)
    r.add_argument("--eval-samples", type=int, default=64)
    r.add_argument("--heldout", type=float, default=0.05)
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.cmd == "data":
        import torch

        torch.set_num_threads(2)
        p = zoo_data(a.member, Path(a.out), files=a.files, max_length=a.max_length)
        print(json.dumps(json.loads((p / "data.json").read_text()) | {"shards": "..."}, indent=1))
        return
    os.makedirs(a.work, exist_ok=True)
    doc = run(a)
    if a.json:
        print(json.dumps(doc, indent=1))
    else:
        report(doc)


if __name__ == "__main__":
    main()
