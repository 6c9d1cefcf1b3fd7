"""Do the zoo targets' greedy continuations loop? Re-measured outside the build.

    python lab/loops.py [--members llama-v1,llama-v2,dsv3-v1,dsv3-v2] [--gen 128]

Uses the path later verbs use (eagle3kit.decode.greedy_generate: batch 1, KV cache, EOS not
special-cased) on prompts the build never evaluated: 48-token windows from the middle of
held-out files of each slice, and held-out chat requests rendered with the tokenizer's own
chat template (``apply_chat_template(..., add_generation_prompt=True)``; the answer stops at
EOS). Prints, per member and prompt set, the distinct-4 ratio (distinct 4-grams / all
4-grams of the continuation): mean, min, max, and the share of continuations below 0.5.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # _env, _results
from _env import environment  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", default="llama-v1,llama-v2,dsv3-v1,dsv3-v2")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=16, help="per prompt set")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch
    from transformers import AutoTokenizer

    from eagle3kit import zoo
    from eagle3kit.decode import greedy_generate
    from eagle3kit.model.target import TargetModel
    from eagle3kit.zoo import corpus as corpus
    from eagle3kit.zoo.training import distinct_ngram_ratio

    torch.set_num_threads(2)
    print("environment: " + environment())
    rows = []
    for name in args.members.split(","):
        p = zoo.get(name)
        tok = AutoTokenizer.from_pretrained(p)
        target = TargetModel.from_pretrained(p)
        sets: dict[str, list[list[int]]] = {}
        for sl in corpus.SLICES:
            prompts = []
            for f in corpus.files(sl, held_out=True):
                ids = tok(f.text, add_special_tokens=False)["input_ids"]
                if len(ids) >= 400:
                    prompts.append(ids[len(ids) // 2 - 48 : len(ids) // 2])
            step = max(1, len(prompts) // args.prompts)
            sets[f"{sl} mid-file"] = prompts[::step][: args.prompts]
        convs = corpus.chat_samples(corpus.files(zoo.member(name).slice, held_out=True))
        step = max(1, len(convs) // args.prompts)
        sets["chat"] = [
            tok.apply_chat_template(
                c["messages"][:1], add_generation_prompt=True, tokenize=True, return_dict=False
            )
            for c in convs[::step][: args.prompts]
        ]
        for label, prompts in sets.items():
            t0 = time.perf_counter()
            eos = tok.eos_token_id if label == "chat" else None
            outs = [
                greedy_generate(target, pr, max_new_tokens=args.gen, eos_token_id=eos).tokens
                for pr in prompts
            ]
            r = [distinct_ngram_ratio(o) for o in outs]
            row = {
                "member": name,
                "prompts": label,
                "n": len(r),
                "mean": statistics.mean(r),
                "min": min(r),
                "max": max(r),
                "below_0.5": sum(x < 0.5 for x in r) / len(r),
                "mean_tokens": statistics.mean(map(len, outs)),
                "seconds": time.perf_counter() - t0,
            }
            rows.append(row)
            print(
                f"{name:9s} {label:15s} n={row['n']:2d} distinct-4 mean {row['mean']:.3f} "
                f"min {row['min']:.3f} max {row['max']:.3f} below 0.5: {row['below_0.5']:.0%} "
                f"tokens {row['mean_tokens']:.0f}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps({"environment": environment(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
