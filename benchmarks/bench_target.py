"""Benchmark the zoo's FULL targets: decode ms/token, verify ms for n = 1..16, and quality.

    python benchmarks/bench_target.py [--members llama-v1,dsv3-v1] [--repeats 15] [--threads 2]
                                      [--json results.json]

Builds missing members first (minutes each). Timings are wall-clock medians (min, max) over
``--repeats`` calls after warm-up, batch 1, float32, on a cache holding a 64-token prompt:
- decode: one greedy token with the KV cache (``eagle3kit.decode.greedy_generate`` over 64
  tokens, per token);
- verify(n): one forward over n tokens on top of the prompt, then crop back to the prompt;
- 1-layer proxy: verify(1) of the same architecture cut to one decoder layer (random weights),
  the cost class of an EAGLE-3 drafter step.
Quality comes from each member's zoo.json (held-out loss vs a unigram baseline, distinct
4-gram ratio of 128-token greedy continuations of held-out prompts).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers  # noqa: F401  (so that the environment line names it)

sys.path.insert(0, str(Path(__file__).parent))
from _env import environment, environment_info  # noqa: E402


def _stats(ms: list[float]) -> dict:
    return {"median": statistics.median(ms), "min": min(ms), "max": max(ms)}


def _time(fn, repeats: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def bench_member(name: str, repeats: int, max_n: int = 16, prompt_len: int = 64) -> dict:
    from transformers import AutoModelForCausalLM

    from eagle3kit import zoo
    from eagle3kit.decode import greedy_generate
    from eagle3kit.model.target import TargetModel

    tm = TargetModel.from_pretrained(zoo.get(name))
    text = Path(zoo.__file__).read_text()[:4000]
    ids = torch.tensor(tm.tokenizer(text)["input_ids"][: prompt_len + max_n])[None]  # [1, P+16]
    prompt, drafts = ids[:, :prompt_len], ids[:, prompt_len:]

    t_dec = []
    for _ in range(max(3, repeats // 5)):
        t0 = time.perf_counter()
        greedy_generate(tm, prompt[0], max_new_tokens=64)
        t_dec.append((time.perf_counter() - t0) * 1e3 / 64)

    tm.prefill(prompt)

    def verify(n: int) -> None:
        tm.verify(drafts[:, :n])
        tm.crop(prompt_len)

    ver = {n: _stats(_time(lambda n=n: verify(n), repeats)) for n in range(1, max_n + 1)}

    cfg = tm.config.__class__.from_dict(tm.config.to_dict())
    cfg.num_hidden_layers = 1
    one = TargetModel(AutoModelForCausalLM.from_config(cfg), aux_layers=(0,))
    one.prefill(prompt)

    def one_step() -> None:
        one.verify(drafts[:, :1])
        one.crop(prompt_len)

    man = zoo.manifest(name) or {}
    return {
        "name": name,
        "params": man.get("params"),
        "layers": tm.num_layers,
        "hidden": tm.hidden_size,
        "vocab": tm.vocab_size,
        "decode_ms_per_token": _stats(t_dec),
        "verify_ms": ver,
        "one_layer_proxy_ms": _stats(_time(one_step, repeats)),
        "quality": man.get("metrics"),
        "build_seconds": man.get("build_seconds"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", default="llama-v1,llama-v2,dsv3-v1,dsv3-v2")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    env = environment_info()
    print("environment: " + environment())
    rows = [bench_member(n, args.repeats) for n in args.members.split(",")]

    def f(s: dict) -> str:
        return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"

    print(
        "\n| member | params | L x H, V | decode ms/tok | verify n=1 | n=4 | n=8 | n=16 | 1-layer "
        "proxy |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        v = r["verify_ms"]
        print(
            f"| {r['name']} | {r['params'] / 1e6:.2f}M | {r['layers']}x{r['hidden']}, {r['vocab']} "
            f"| {f(r['decode_ms_per_token'])} | {f(v[1])} | {f(v[4])} | {f(v[8])} | {f(v[16])} "
            f"| {f(r['one_layer_proxy_ms'])} |"
        )
    print("\nverify ms (median) for n = 1..16:")
    print("| member | " + " | ".join(str(n) for n in range(1, 17)) + " |")
    print("|---|" + "---|" * 16)
    for r in rows:
        cells = " | ".join(f"{r['verify_ms'][n]['median']:.2f}" for n in range(1, 17))
        print(f"| {r['name']} | {cells} |")
    print(
        "\nquality (nats/token; distinct-4 over 128 greedy tokens of held-out prompts;"
        " chat: greedy answers to held-out requests, up to EOS):"
    )
    print(
        "| member | held-out loss | unigram | other-slice loss | distinct-4 mean (min) "
        "| other-slice distinct-4 | chat distinct-4 (ended) | build s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        q = r["quality"] or {}
        c = q.get("chat") or {}
        print(
            f"| {r['name']} | {q.get('heldout_loss')} | {q.get('unigram_loss')} "
            f"| {q.get('heldout_loss_other_slice')} ({q.get('other_slice')}) "
            f"| {q.get('distinct4_mean')} ({q.get('distinct4_min')}) "
            f"| {q.get('distinct4_other_slice_mean')} "
            f"| {c.get('distinct4_mean')} ({c.get('ended')}) | {r['build_seconds']} |"
        )
    if args.json:
        args.json.write_text(json.dumps({"environment": env, "members": rows}, indent=2))


if __name__ == "__main__":
    main()
