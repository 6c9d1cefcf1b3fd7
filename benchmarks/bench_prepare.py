"""Benchmark `data prepare`'s tokenisation: conversations/s and tokens/s for both loss-mask methods.

    python benchmarks/bench_prepare.py [--samples 500] [--repeats 5] [--threads 1] [--json out.json]

Data: the zoo's own chat samples (a user asks for a stdlib function, the assistant answers
with its source), as 1-turn and 3-turn conversations. Tokenizer: the zoo's tiny Llama member
(byte-level BPE, V = 512). Methods: "generation" (the zoo template's {% generation %} marks,
`apply_chat_template(return_assistant_tokens_mask=True)`) and "prefix-diff" (the same template
with the marks removed: render growing prefixes and diff them). Timed: `ChatEncoder.encode` over
all samples (no disk I/O); the figure is wall-clock per repeat, median (min, max).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import torch
import transformers  # noqa: F401  (so that the environment line names it)

sys.path.insert(0, str(Path(__file__).parent))
from _env import environment, environment_info, stats  # noqa: E402


def conversations(n: int) -> dict[str, list[list[dict]]]:
    from eagle3kit.zoo import corpus as _corpus

    pairs = _corpus.chat_samples(_corpus.files("lib", limit=200))
    pairs = [p["messages"] for p in pairs][: 3 * n]
    one = pairs[:n]
    three = [pairs[i] + pairs[i + 1] + pairs[i + 2] for i in range(0, len(pairs) - 2, 3)][:n]
    return {"1 turn": one, "3 turns": three}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    from eagle3kit import zoo
    from eagle3kit.data.templates import ChatEncoder

    tok = AutoTokenizer.from_pretrained(zoo.get("llama-v1", size="tiny"))
    plain = re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", tok.chat_template)
    encoders = {"generation": ChatEncoder(tok), "prefix-diff": ChatEncoder(tok, template=plain)}
    rows = []
    print(environment())
    for shape, convs in conversations(args.samples).items():
        for method, enc in encoders.items():
            n_tok = sum(len(enc.encode(c)[0]) for c in convs)  # warm-up + token count
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                for c in convs:
                    enc.encode(c)
                times.append(time.perf_counter() - t0)
            per_s = [len(convs) / t for t in times]
            rows.append(
                {
                    "shape": shape,
                    "method": method,
                    "samples": len(convs),
                    "tokens": n_tok,
                    "seconds": times,
                    "samples_per_s": per_s,
                    "tokens_per_s": [n_tok / t for t in times],
                }
            )
            print(
                f"{shape:8s} {method:12s} {len(convs)} samples, {n_tok} tokens: "
                f"samples/s {stats(per_s)}; tokens/s median "
                f"{n_tok / sorted(times)[len(times) // 2]:.0f}"
            )
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps({"environment": environment_info(), "rows": rows}, indent=2)
        )


if __name__ == "__main__":
    main()
