"""`plan` by context length checked on prompts it was not made from: per bucket, the tok/s
predicted from run A's costs and acceptance against the tok/s measured on disjoint prompts B.

    python benchmarks/bench_by_length.py [--member dsv3-v1] [--drafter k2-drafter]
        [--lengths 128,512,1024,1984] [--prompts 12] [--max-new 64] [--repeats 2]
        [--json benchmarks/results/by_length-full.json]

Prompts are built to each context length from the zoo's held-out stdlib files
(data/long_prompts.py): set A and set B are the two disjoint halves of the files (seed 0), each
prompt the same request after 128 to 1984 tokens of context (1984 + 64 new tokens reach the
full members' 2048 positions). Plain greedy decoding and the drafter's chain decode every prompt
of A and B in one process, in ABBA groups (`_schedule`): prompt i of A and prompt i of B at
the same length run seconds apart for each method, so the host's drift (other jobs on a shared
machine) hits A and B alike, and each half and method takes each place in a group equally
often (the first run of a group follows another length's run; `places` records what each
place costs). The 1-minute load average is sampled after every group and recorded. (Run 1 of
by_length-full-dsv3-v1.json took A0 at every length before B0 at every length: A's costs at 128
came out 10-11% slower than B's, all terms alike, and the check missed by 11.2% there.)

A's runs are summarised as `eagle3kit bench --context-lengths --json` summarises them (per
length: the methods' rows and the costs at concurrency 1: plain step, verify of n tokens, one
drafter pass, the loop's overhead, both prefills) and written to the result directory (B's
beside them); `plan` by length (plan/by_length.py, as `plan --from FILE` reads it) prices each
bucket: one request of N new tokens, N / (prefill + (N - 1) / tau * cycle), for the chain and
N / (prefill + (N - 1) * step) for plain decoding. B's runs give the measured tok/s per bucket,
pooled (all its new tokens / all their wall seconds, prefill included), the rate the model
prices. Recorded beside: tau on A and on B, each bucket's cost terms on A and B, lossless, the
canned-output check of the target's answers (core/diversity.py), and where a miss comes from
(`_attribution`): plan on B's own terms, on A's costs with B's tau, on B's costs with A's tau.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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


def _schedule(A: list, B: list, repeats: int) -> list[tuple[str, object, str]]:
    """(half, prompt, method) in the order they run. Per repeat r, prompt index i and length
    j, an ABBA group: X.m1, Y.m1, Y.m2, X.m2, where (X, Y) is (A, B) or (B, A) and (m1, m2)
    the methods in one order or the other, the four combinations taken in turn (c = r * n + i
    + j mod 4: X by c's low bit, m1 by its high bit). Each prompt of A runs beside its partner
    in B (same length, same index) for every method, seconds apart, so the host's drift (load
    from other jobs) hits A and B alike; and at every length each half and method takes each
    of the four places in a group equally often (the first run of a group follows another
    length's: it must not fall on one half more than the other)."""
    a_at = {(p.index, p.length): p for p in A}
    b_at = {(p.index, p.length): p for p in B}
    lengths = sorted({p.length for p in A})
    indices = sorted({p.index for p in A})
    out = []
    for r in range(repeats):
        for i in indices:
            for j, n in enumerate(lengths):
                c = (r * len(indices) + i + j) % 4
                x, y = (("A", a_at[i, n]), ("B", b_at[i, n]))[:: 1 - 2 * (c & 1)]
                m1, m2 = NAMES[:: 1 - (c & 2)]
                out += [(*x, m1), (*y, m1), (*y, m2), (*x, m2)]
    return out


def _places(runs: list, order: list) -> dict:
    """Per place in a group (1-4): the mean of each run's wall time over the mean of its
    (length, method)'s runs (above 1: that place runs slower), and per half and place how
    many runs took it (the schedule's balance)."""
    import collections

    key = [(order[x.prompt][1].length, x.method) for x in runs]
    mean = collections.defaultdict(list)
    for k, x in zip(key, runs, strict=True):
        mean[k].append(x.s)
    ratio = collections.defaultdict(list)
    count = collections.Counter()
    for n, (k, x) in enumerate(zip(key, runs, strict=True)):
        ratio[n % 4 + 1].append(x.s / statistics.fmean(mean[k]))
        count[f"{order[x.prompt][0]}.{x.method}@{n % 4 + 1}"] += 1
    return {
        "relative_wall_time": {str(q): statistics.fmean(v) for q, v in sorted(ratio.items())},
        "runs_per_half_method_place": dict(sorted(count.items())),
    }


def _harness(runners: dict, A: list, B: list, repeats: int) -> tuple[list, list, list]:
    """Every (half, prompt, method) of `_schedule` decoded once per repeat: (the Timed runs
    numbered into `order`, `order` = [(half, prompt)], the 1-minute load average sampled
    after every group)."""
    order: list = []
    index: dict = {}
    runs, loads = [], []
    sched = _schedule(A, B, repeats)
    per_repeat = len(sched) // repeats
    t0 = time.perf_counter()
    for k, (half, p, m) in enumerate(sched):
        key = (half, id(p))
        if key not in index:
            index[key] = len(order)
            order.append((half, p))
        t = runners[m](list(p.ids))
        t.method, t.repeat, t.prompt = m, k // per_repeat, index[key]
        runs.append(t)
        if k % 4 == 3:
            loads.append(os.getloadavg()[0])
            done = (k + 1) / len(sched)
            el = time.perf_counter() - t0
            print(
                f"  {k + 1}/{len(sched)} runs, {el:.0f} s, load {loads[-1]:.2f}, "
                f"about {el / done - el:.0f} s left",
                file=sys.stderr,
                flush=True,
            )
    return runs, order, loads


def _write_bench(doc: dict, a, half: str) -> Path:
    """One half's runs as `bench --context-lengths --json` writes them, in the result dir."""
    path = a.out / f"by_length-{a.member}{a.tag}-{half}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    return path


def _attribution(file_a: Path, file_b: Path, rows: list[dict]) -> list[dict]:
    """Where each bucket's miss comes from, priced by `plan` itself (plan/by_length.py; the
    acceptance of one file on the costs of another is `plan --from A --acceptance-file B`):
    per length and method, the tok/s of the model on B's own terms (model_B: the model's
    accounting, measured B against it), on A's costs with B's acceptance (acceptance: tau on
    other prompts) and on B's costs with A's acceptance (costs: the host between A's runs and
    B's, prefill, verify, drafter pass, plain step), each as a share of the prediction."""
    from eagle3kit.plan.by_length import plan_by_length, read_lengths

    fa, fb = read_lengths(file_a), read_lengths(file_b)
    plans = {
        "model_B": plan_by_length(fb),
        "acceptance_B": plan_by_length(fa, fb),
        "costs_B": plan_by_length(fb, fa),
    }
    keys = {"greedy": "baseline_request_tokens_per_s", "chain": "request_tokens_per_s"}
    out = []
    for r in rows:
        got = {}
        for name, plan in plans.items():
            e = next(x for x in plan.points if x.length == r["context_length"]).to_json()
            got[name] = e[keys[r["method"]]] / r["predicted_tokens_per_s"] - 1
        got["measured_vs_model_B"] = (1 + r["error"]) / (1 + got["model_B"]) - 1
        out.append({"context_length": r["context_length"], "method": r["method"], **got})
    return out


def run(a) -> dict:
    import torch

    from eagle3kit.measure import timing as T
    from eagle3kit.model.loading import load_pair
    from eagle3kit.plan.by_length import plan_by_length, read_lengths

    torch.set_num_threads(a.threads)
    tm, d = load_pair(a.member, _drafter_path(a.drafter))
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
    t0 = time.perf_counter()
    runs, order, loads = _harness(runners, A, B, a.repeats)
    seconds = time.perf_counter() - t0
    doc_a = _summary(tm, d, _half(runs, order, "A", A), A, a, cfg)
    doc_b = _summary(tm, d, _half(runs, order, "B", B), B, a, cfg)
    file_a, file_b = _write_bench(doc_a, a, "A"), _write_bench(doc_b, a, "B")
    plan = plan_by_length(read_lengths(file_a)).to_json()
    rows = _rows(plan, doc_b, doc_a)
    worst = max(abs(r["error"]) for r in rows)
    return {
        "member": a.member,
        "drafter": a.drafter,
        "settings": {k: v for k, v in vars(a).items() if k not in ("json", "out")},
        "order": "ABBA groups, A and B at each length and prompt index seconds apart, "
        "each half and method in each place of a group equally often (_schedule)",
        "harness_seconds": seconds,
        "load_avg_1m_during": {
            "samples": len(loads),
            "median": statistics.median(loads),
            "min": min(loads),
            "max": max(loads),
        },
        "plan_input": file_a.name,
        "check_input": file_b.name,
        "plan": plan,
        "rows": rows,
        "attribution": _attribution(file_a, file_b, rows),
        "places": _places(runs, order),
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


def _drafter_path(name: str) -> str:
    """A drafter shipped with the zoo (its name), else a drafter directory."""
    from eagle3kit.zoo.shipping import shipped

    return name if Path(name).is_dir() else str(shipped(name))


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
    print("  where a miss comes from (share of the prediction; plan/by_length.py prices each):")
    print(
        f"  {'context':>7} {'method':8} {'B model':>8} {'tau of B':>8} {'costs of B':>10}"
        f" {'meas/B model':>12}"
    )
    for t in doc["attribution"]:
        print(
            f"  {t['context_length']:>7} {t['method']:8} {100 * t['model_B']:>+7.1f}% "
            f"{100 * t['acceptance_B']:>+7.1f}% {100 * t['costs_B']:>+9.1f}% "
            f"{100 * t['measured_vs_model_B']:>+11.1f}%"
        )
    ld = doc["load_avg_1m_during"]
    print(
        f"  load average (1 min) during the runs: median {ld['median']:.2f}, "
        f"{ld['min']:.2f}..{ld['max']:.2f}"
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
    ap.add_argument("--prompts", type=int, default=12, help="per length and half (A and B)")
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
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
