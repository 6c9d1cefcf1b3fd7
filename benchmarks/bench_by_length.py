"""`plan` by context length checked on prompts it was not made from: per bucket, the tok/s
predicted from run A's costs and acceptance against the tok/s measured on disjoint prompts B.

    python benchmarks/bench_by_length.py [--member dsv3-v1] [--drafter k2-drafter]
        [--lengths 128,512,1024,1984] [--prompts 8] [--max-new 64] [--repeats 3]
        [--json benchmarks/results/by_length-full.json]

Prompts are built to each context length from the zoo's held-out stdlib files
(data/long_prompts.py): set A and set B are the two disjoint halves of the files (seed 0), each
prompt the same request after 128 to 1984 tokens of context (1984 + 64 new tokens reach the
full members' 2048 positions). Plain greedy decoding and the drafter's chain decode every prompt
of A and B in one timing harness (measure/timing.py: rotated order), A and B and the lengths
interleaved (A0 and B0 at each length in turn, then A1 and B1, ...), so drift in the machine's
speed hits both halves and every bucket alike. (Run 1, by_length-full-dsv3-v1.json, took A0 at
every length before B0 at every length.)

A's runs are summarised as `eagle3kit bench --context-lengths --json` summarises them (per
length: the methods' rows and the costs at concurrency 1: plain step, verify of n tokens, one
drafter pass, the loop's overhead, both prefills) and written to the result directory; `plan`
by length (plan/by_length.py, as `plan --from FILE` reads it) prices each bucket: one request
of N new tokens, N / (prefill + (N - 1) / tau * cycle), for the chain and N / (prefill +
(N - 1) * step) for plain decoding. B's runs give the measured tok/s per bucket, pooled (all
its new tokens / all their wall seconds, prefill included), the rate the model prices.
Recorded beside: tau on A and on B, each bucket's cost terms on A and B (where a miss comes
from), lossless, and the canned-output check of the target's answers (core/diversity.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _env import environment  # noqa: E402

NAMES = ("greedy", "chain")


def _prompts(tok, a) -> tuple[list, list]:
    from eagle3kit.data.long_prompts import long_prompts, parse_lengths

    lengths = parse_lengths(a.lengths)
    out = []
    for which in ("A", "B"):
        ps, _ = long_prompts(
            tok,
            lengths,
            a.prompts,
            which=which,
            seed=a.seed,
            new_tokens=a.max_new,
            max_positions=2048,
        )
        out.append(ps)
    return out[0], out[1]


def _half(runs, order, which: str, prompts) -> list:
    """The runs of one half, their prompt index renumbered into that half's prompt list."""
    idx = {id(p): i for i, p in enumerate(prompts)}
    mine = [x for x in runs if order[x.prompt][0] == which]
    return [replace(x, prompt=idx[id(order[x.prompt][1])]) for x in mine]


def _summary(tm, d, runs, prompts, a, cfg) -> dict:
    """What `bench --context-lengths --json` writes for these runs (measure/bench.py)."""
    from eagle3kit.measure import bench as MB

    ids = [list(p.ids) for p in prompts]
    lengths = [p.length for p in prompts]
    doc = MB._summarise(runs, list(NAMES), ids, a.repeats, cfg)
    doc["method"] = d.method
    doc["by_length"] = MB.by_length(
        tm, d, ids, runs, names=list(NAMES), cfg=cfg, lengths=lengths, levels=(1,)
    )
    doc["lengths"] = sorted(set(lengths))
    return doc


def _terms(entry: dict) -> dict:
    """A bucket's cost terms, as the plan reads them (where a miss comes from)."""
    lv = entry["costs"]["levels"][0]
    rows = {m["name"]: m for m in entry["methods"]}
    return {
        "plain_ms": lv["plain_ms"],
        "verify_ms": lv["verify_ms"],
        "pass_ms": lv["pass_ms"],
        "overhead_ms": lv["overhead_ms"],
        "cycle_ms": rows["chain"]["cycle_ms"],
        "prefill_ms": entry["costs"]["prefill_ms"],
        "spec_prefill_ms": rows["chain"]["prefill_ms"],
        "new_tokens": entry["costs"]["new_tokens"],
        "tau": rows["chain"]["tau_online"],
    }


def _rows(plan: dict, doc_b: dict, doc_a: dict) -> list[dict]:
    out = []
    for p, eb, ea in zip(plan["by_length"], doc_b["by_length"], doc_a["by_length"], strict=True):
        rows = {m["name"]: m for m in eb["methods"]}
        for name, key in (
            ("greedy", "baseline_request_tokens_per_s"),
            ("chain", "request_tokens_per_s"),
        ):
            meas = rows[name]["tokens_per_s_pooled"]
            out.append(
                {
                    "context_length": p["context_length"],
                    "method": name,
                    "predicted_tokens_per_s": p[key],
                    "measured_tokens_per_s": meas,
                    "error": meas / p[key] - 1,
                    "tau_A": p["tau"] if name == "chain" else 1.0,
                    "tau_B": rows[name].get("tau_online", 1.0),
                    "same_tokens_as_greedy": rows[name].get("same_tokens_as_greedy", True),
                }
            )
        out[-1]["terms_A"], out[-1]["terms_B"] = _terms(ea), _terms(eb)
        out[-1]["target_diversity_B"] = eb["target_diversity"]
        out[-1]["target_diversity_A"] = ea["target_diversity"]
    return out


def run(a) -> dict:
    import torch

    from eagle3kit.measure import timing as T
    from eagle3kit.model.loading import load_pair
    from eagle3kit.plan.by_length import plan_by_length, read_lengths
    from eagle3kit.zoo.shipping import shipped

    torch.set_num_threads(a.threads)
    tm, d = load_pair(a.member, str(shipped(a.drafter)))
    A, B = _prompts(tm.tokenizer, a)
    eos = tm.tokenizer.eos_token_id
    cfg = {
        "max_new_tokens": a.max_new,
        "depth": a.depth,
        "tree": None,
        "tree_depth": 0,
        "lookup": 0,
    }
    runners = {
        "greedy": T.plain_runner(tm, a.max_new, eos),
        "chain": T.spec_runner(tm, d, a.max_new, eos, a.depth, None),
    }
    for r in runners.values():  # warm-up at the longest length, discarded
        r(list(A[-1].ids))
    order = []  # A0 and B0 at 128, A0 and B0 at 512, ..., A1 and B1 at 128, ...
    for i in range(a.prompts):
        for n in sorted({p.length for p in A}):
            order += [
                (w, p)
                for w, half in (("A", A), ("B", B))
                for p in half
                if p.index == i and p.length == n
            ]
    t0 = time.perf_counter()
    runs = T.time_methods(runners, [list(p.ids) for _, p in order], a.repeats, label="bench")
    seconds = time.perf_counter() - t0
    doc_a = _summary(tm, d, _half(runs, order, "A", A), A, a, cfg)
    doc_b = _summary(tm, d, _half(runs, order, "B", B), B, a, cfg)
    file_a = a.out / f"by_length-{a.member}{a.tag}-A.json"  # as `bench --context-lengths` writes
    file_a.parent.mkdir(parents=True, exist_ok=True)
    file_a.write_text(json.dumps(doc_a, indent=1))
    plan = plan_by_length(read_lengths(file_a)).to_json()
    rows = _rows(plan, doc_b, doc_a)
    worst = max(abs(r["error"]) for r in rows)
    return {
        "member": a.member,
        "drafter": a.drafter,
        "settings": {k: v for k, v in vars(a).items() if k not in ("json", "out")},
        "harness_seconds": seconds,
        "plan_input": file_a.name,
        "plan": plan,
        "rows": rows,
        "max_abs_error": worst,
        "within_10pct": worst <= 0.10,
        "lossless": all(r["same_tokens_as_greedy"] for r in rows),
        "tau_by_length_A": {str(e["context_length"]): e["tau"] for e in plan["by_length"]},
        "tau_by_length_B": {
            str(e["context_length"]): next(
                m["tau_online"] for m in e["methods"] if m["name"] == "chain"
            )
            for e in doc_b["by_length"]
        },
        "canned_B": any(e["target_diversity"]["canned"] for e in doc_b["by_length"]),
    }


def report(doc: dict) -> None:
    print(f"plan by length from {doc['plan_input']} (prompts A), measured on prompts B")
    print(
        f"  {'context':>7} {'method':8} {'predicted':>10} {'measured':>10} {'error':>7}"
        f" {'tau A':>6} {'tau B':>6}"
    )
    for r in doc["rows"]:
        print(
            f"  {r['context_length']:>7} {r['method']:8} {r['predicted_tokens_per_s']:>10.1f} "
            f"{r['measured_tokens_per_s']:>10.1f} {100 * r['error']:>+6.1f}% "
            f"{r['tau_A']:>6.3f} {r['tau_B']:>6.3f}"
        )
    for r in doc["rows"][1::2]:
        d = r["target_diversity_B"]
        print(
            f"  {r['context_length']:>7}: B's answers {d['distinct_outputs']}/{d['outputs']} "
            f"distinct, pooled distinct-4 {d['pooled_distinct4']}, canned {d['canned']}"
        )
    print(f"  {doc['plan']['pays_up_to']['answer']}")
    print(
        f"max |error| {100 * doc['max_abs_error']:.1f}%; within 10%: {doc['within_10pct']}; "
        f"lossless: {doc['lossless']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--member", default="dsv3-v1")
    ap.add_argument("--drafter", default="k2-drafter", help="a drafter shipped with the zoo")
    ap.add_argument("--lengths", default="128,512,1024,1984")
    ap.add_argument("--prompts", type=int, default=8, help="per length and half (A and B)")
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--tag", default="", help="in the name of half A's bench file")
    ap.add_argument("--json", type=Path, help="write the result file here")
    a = ap.parse_args()
    print("environment: " + environment())
    doc = run(a)
    doc["load_avg_end"] = os.getloadavg()
    report(doc)
    if a.json:
        from _results import write_result

        write_result(a.json, "eagle3kit.bench_by_length", doc)


if __name__ == "__main__":
    main()
