"""A DFlash drafter beside an EAGLE-3 drafter on one zoo member: same data, same steps.

    python benchmarks/dflash_vs_eagle3.py [--member dsv3-v2-tiny] [--steps 200] \
        [--block-size 8] [--out benchmarks/results/dflash_vs_eagle3-tiny.json]

Both drafters train from scratch on the demo's "K2.5 data" (the stdlib test slice, prepared
for the member as the demo prepares it, demo/steps.py recipe "tiny" for a -tiny member, else
"full") for --steps steps at the recipe's batch, length and learning rate; EAGLE-3 with the
recipe's draft vocabulary and k = ttt_steps, DFlash with --draft-layers layers and block B.
Each is then benched as `eagle3kit bench` does (greedy and the speculative chain interleaved,
the recipe's held-out prompts, repeats and new tokens; EAGLE-3 at the recipe's depth, DFlash
at B-1 drafts), on 1 CPU thread. The result holds both rows: the held-out expected accept
length from training, the measured accept length, tok/s and speedup over greedy, and whether
the output equals greedy; beside them the canned-output check on the target's greedy answers
(`target_diversity`, core/diversity.cross_prompt, as `bench` records it).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def bench_row(target_path, drafter, aux, prompts, r, depth: int) -> dict:
    from eagle3kit.measure.bench import bench
    from eagle3kit.model.target import TargetModel

    tm = TargetModel.from_pretrained(target_path, aux_layers=aux)
    if hasattr(drafter, "attach_target"):
        drafter.attach_target(tm)
    else:
        drafter.set_embedding(tm.embed_tokens.weight)
    doc = bench(
        tm,
        drafter,
        prompts,
        repeats=r.bench_repeats,
        max_new_tokens=r.bench_tokens,
        depth=depth,
        methods=("greedy", "chain"),
    )
    rows = {m["name"]: m for m in doc["methods"]}
    c = rows["chain"]
    return {
        # the canned-output check (core/diversity.py): do the target's answers vary?
        "target_diversity": doc["target_diversity"],
        "depth": depth,
        "greedy_tokens_per_s": rows["greedy"]["tokens_per_s"],
        "tokens_per_s": c["tokens_per_s"],
        "speedup": c["speedup"],
        "tau_online": c["tau_online"],
        "per_position_acceptance": c["per_position_acceptance"],
        "draft_ms": c["draft_ms"],
        "verify_ms": c["verify_ms"],
        "lossless": c.get("same_tokens_as_greedy"),
    }


def main() -> None:
    from eagle3kit.demo.steps import RECIPES, held_out_prompts, prepare_data, train_config
    from eagle3kit.methods.dflash.model import DFlashDrafter
    from eagle3kit.methods.dflash.train.loop import train_dflash_drafter
    from eagle3kit.model.drafter import Eagle3Drafter
    from eagle3kit.model.loading import resolve_target
    from eagle3kit.train.loop import train

    ap = argparse.ArgumentParser()
    ap.add_argument("--member", default="dsv3-v2-tiny")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--block-size", type=int, default=8)
    ap.add_argument("--draft-layers", type=int, default=1)
    ap.add_argument("--dflash-lr", type=float, default=None, help="default: the recipe's lr")
    ap.add_argument("--work", default="/tmp/eagle3kit-dflash-vs-eagle3")
    ap.add_argument("--out", default=str(HERE / "results" / "dflash_vs_eagle3-tiny.json"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    r = RECIPES["tiny" if a.member.endswith("-tiny") else "full"]
    work = Path(a.work)
    target = Path(resolve_target(a.member))
    data = prepare_data("test", r.v2_samples, work / "data", target, r, None)
    prompts = held_out_prompts(data, r.bench_prompts)
    for run in ("eagle3", "dflash"):  # scratch runs: trained afresh each time
        shutil.rmtree(work / run, ignore_errors=True)
    t0 = time.perf_counter()
    e_sum = train(train_config(work / "eagle3", target, data, a.steps, None, r))
    t_e = time.perf_counter() - t0
    t0 = time.perf_counter()
    d_sum = train_dflash_drafter(
        work / "dflash",
        target,
        data,
        steps=a.steps,
        batch=r.batch,
        max_len=r.max_len,
        lr=a.dflash_lr or r.lr,
        block_size=a.block_size,
        draft_layers=a.draft_layers,
    )
    t_d = time.perf_counter() - t0
    e = Eagle3Drafter.from_pretrained(work / "eagle3" / "best").eval().requires_grad_(False)
    d = DFlashDrafter.from_pretrained(work / "dflash" / "best").eval().requires_grad_(False)
    rows = {
        "eagle3": {
            "train_s": t_e,
            "heldout_tau_walk": e_sum["tau_walk"],
            **bench_row(target, e, e.spec.aux_layers, prompts, r, r.depth),
        },
        "dflash": {
            "train_s": t_d,
            "heldout_tau_every_position": d_sum["tau_every_position"],
            "block_size": a.block_size,
            "draft_layers": a.draft_layers,
            "lr": a.dflash_lr or r.lr,
            **bench_row(target, d, d.spec.aux_layers, prompts, r, d.spec.num_proposals),
        },
    }
    doc = {
        "kind": "eagle3kit.bench.dflash_vs_eagle3",
        "command": f"python benchmarks/dflash_vs_eagle3.py --member {a.member} --steps "
        f"{a.steps} --block-size {a.block_size} --draft-layers {a.draft_layers}"
        + (f" --dflash-lr {a.dflash_lr}" if a.dflash_lr else ""),
        "member": a.member,
        "steps": a.steps,
        "recipe": "tiny" if a.member.endswith("-tiny") else "full",
        "prompts": len(prompts),
        "environment": {
            "cpu": platform.processor() or platform.machine(),
            "threads": 1,
            "torch": torch.__version__,
        },
        "methods": [{"method": m, **row} for m, row in rows.items()],
    }
    # one check for the run: both arms bench the same greedy outputs of the same prompts
    doc["target_diversity"] = rows["eagle3"]["target_diversity"]
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
