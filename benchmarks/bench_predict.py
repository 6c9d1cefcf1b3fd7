"""Predictions checked on prompts they were not made from: offline τ -> online τ, plan -> tok/s.

    python benchmarks/bench_predict.py [--member dsv3-v1] [--size full|tiny] [--prompts 16]
        [--depth 3] [--max-new 64] [--repeats 3] [--json benchmarks/results/predict-full.json]

Chat requests of the member's held-out files are split in two disjoint halves by order:
A (where every prediction is made) and B (where it is checked). The drafter is the demo's
K2 drafter (trained on dsv3-v1; `demo.steps.k2_drafter`) unless --drafter names one.

On A only:
- the target's greedy answers (plain decoding, the regenerated data a user would capture);
- offline τ: the drafter walked over those answers (`measure.evaluate.evaluate_offline`,
  `tau_walk` at --depth), per answer, pooled over A as accepted tokens / cycles;
- costs: the plain decode step (median), the speculative cycle, prefill and answer length,
  from timed runs of both methods on A (`measure.timing`, alternating order).
- the prediction for B: τ = offline τ of A; tok/s and speedup of one request from
  `plan.forecast.plan` with those costs (`request`: prefill + (N - 1) / τ cycles).
On B: the same timed runs measure online τ (the decoder's own count), tok/s and speedup,
and B's own costs beside them (to see which of A's moved). Each half's timing starts after
one discarded run of each method.

Intervals: 95% bootstrap over answers (A) or prompts (B), --boot resamples, seeded; the
predicted tok/s interval carries only τ's uncertainty (the costs are taken as measured).
Wall-clock figures on a shared 2-CPU machine move by several percent between runs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _drafter_runs as R  # noqa: E402
from _env import environment  # noqa: E402


def _interval(xs: list[float]) -> list[float]:
    xs = sorted(xs)
    return [xs[int(0.025 * (len(xs) - 1))], xs[int(0.975 * (len(xs) - 1))]]


def _pooled_boot(pairs: list[tuple[float, float]], boot: int, seed: int) -> list[float]:
    """Bootstrap of sum(tokens) / sum(cycles) over (tokens, cycles) units."""
    rng = random.Random(seed)
    out = []
    for _ in range(boot):
        draw = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        out.append(sum(t for t, _ in draw) / max(1e-9, sum(c for _, c in draw)))
    return out


def _timed(tm, d, prompts, a):
    from eagle3kit.measure import timing as T

    eos = getattr(tm.tokenizer, "eos_token_id", None)
    methods = {
        "base": T.plain_runner(tm, a.max_new, eos),
        "spec": T.spec_runner(tm, d, a.max_new, eos, a.depth, None),
    }
    for m in methods.values():  # warm-up, discarded: the first runs of a process are slower
        m(prompts[0])
    return T.time_methods(methods, prompts, a.repeats, label="timing")


def _costs(runs, depth: int) -> dict:
    from eagle3kit.measure import timing as T

    spec = T.pooled(runs, "spec", depth)
    stats = [x.stats for x in T.of(runs, "spec")]
    return {
        "decode_ms": 1e3 * statistics.median(T.step_times(runs, "base")),
        "cycle_ms": spec.mean_ms("cycle_s"),
        "prefill_ms": 1e3 * statistics.fmean(s.prefill_s for s in stats),
        "new_tokens": statistics.fmean(s.new_tokens for s in stats),
    }


def _measured(runs, depth: int, a) -> dict:
    from eagle3kit.measure import timing as T

    first = [x for x in T.of(runs, "spec") if x.repeat == 0]  # same tokens every repeat
    pairs = [(sum(c.accepted + 1 for c in x.stats.cycles), len(x.stats.cycles)) for x in first]
    spec, base = T.tokens_per_s(runs, "spec"), T.tokens_per_s(runs, "base")
    return {
        "tau_online": T.pooled(runs, "spec", depth).tau_online,
        "tau_online_interval": _interval(_pooled_boot(pairs, a.boot, 1)),
        "tokens_per_s": statistics.median(spec),
        "tokens_per_s_spread": T.spread(spec),
        "speedup": statistics.median(spec) / statistics.median(base),
        "lossless": T.same_tokens(runs, "spec", "base"),
        "costs": _costs(runs, depth),  # B's own, to see which of A's costs moved
    }


def _offline(tm, d, runs, prompts, depth: int) -> list[tuple[float, float]]:
    """(tokens, cycles) of the drafter walked over each of A's greedy answers."""
    import torch

    from eagle3kit.measure import timing as T
    from eagle3kit.measure.evaluate import EvalData, evaluate_offline

    answers = {x.prompt: x.tokens for x in T.of(runs, "base") if x.repeat == 0}
    pairs = []
    for i, p in enumerate(prompts):
        ids = torch.tensor(p + answers[i])
        mask = torch.zeros(len(ids), dtype=torch.bool)
        mask[len(p) :] = True
        r = evaluate_offline(tm, d, EvalData("A", [(ids, mask)], [p]), depth)
        pairs.append((r["tau_walk"] * r["cycles"], r["cycles"]))
    return pairs


def _predict(costs: dict, taus: list[float], depth: int) -> dict:
    from eagle3kit.plan.forecast import plan

    def one(tau: float):
        kw = dict(new_tokens=costs["new_tokens"], prefill_ms=costs["prefill_ms"], depth=depth)
        spec = plan(decode_ms=costs["decode_ms"], cycle_ms=costs["cycle_ms"], tau=tau, **kw)
        base = plan(decode_ms=costs["decode_ms"], cycle_ms=costs["decode_ms"], tau=1, **kw)
        return spec.request.tps, spec.request.tps / base.request.tps

    tps = [one(t) for t in taus]
    return {
        "tokens_per_s_interval": _interval([x for x, _ in tps]),
        "speedup_interval": _interval([s for _, s in tps]),
    }


def run(a: argparse.Namespace) -> dict:
    import torch

    from eagle3kit import zoo
    from eagle3kit.demo.steps import k2_drafter
    from eagle3kit.measure import timing as T
    from eagle3kit.model.loading import load_pair

    torch.set_num_threads(a.threads)
    target = str(zoo.get(a.member, size=a.size))
    drafter = a.drafter or str(k2_drafter(a.size))
    prompts = R.held_out_set(a, target, "req", max_length=512).prompts
    tm, d = load_pair(target, drafter)
    A, B = prompts[: a.prompts], prompts[a.prompts : 2 * a.prompts]
    runs_a = _timed(tm, d, A, a)
    pairs = _offline(tm, d, runs_a, A, a.depth)
    costs = _costs(runs_a, a.depth)
    tau = sum(t for t, _ in pairs) / sum(c for _, c in pairs)
    taus = _pooled_boot(pairs, a.boot, 0)
    pred = {"tau": tau, "tau_interval": _interval(taus), **_predict(costs, taus, a.depth)}
    mid = _predict(costs, [tau], a.depth)
    pred["tokens_per_s"] = mid["tokens_per_s_interval"][0]
    pred["speedup"] = mid["speedup_interval"][0]
    runs_b = _timed(tm, d, B, a)
    meas = _measured(runs_b, a.depth, a)
    tm.close()
    answers = [x.tokens for runs in (runs_a, runs_b) for x in T.of(runs, "base") if x.repeat == 0]
    return {
        "settings": {k: v for k, v in vars(a).items() if k != "json"},
        "drafter": drafter,
        "prompts": {
            "A": len(A),
            "B": len(B),
            "disjoint": not set(map(tuple, A)) & set(map(tuple, B)),
        },
        "costs_from_A": costs,
        "predicted_for_B": pred,
        "measured_on_B": meas,
        # the canned-output check on the target's greedy answers to A and B (issue 33)
        "target_diversity": R.answers_check(answers, a.max_new),
        "gap": {
            "tau": meas["tau_online"] / tau - 1,
            "tokens_per_s": meas["tokens_per_s"] / pred["tokens_per_s"] - 1,
            "speedup": meas["speedup"] / pred["speedup"] - 1,
        },
    }


def report(doc: dict) -> None:
    p, m = doc["predicted_for_B"], doc["measured_on_B"]

    def iv(x):
        return f"[{x[0]:.3f}..{x[1]:.3f}]"

    print(
        f"prompts: A {doc['prompts']['A']} (predict), B {doc['prompts']['B']} (check), "
        f"disjoint: {doc['prompts']['disjoint']}; 95% bootstrap intervals"
    )
    print(
        f"tau      predicted {p['tau']:.3f} {iv(p['tau_interval'])}   measured "
        f"{m['tau_online']:.3f} {iv(m['tau_online_interval'])}"
    )
    print(
        f"tok/s    predicted {p['tokens_per_s']:.1f} {iv(p['tokens_per_s_interval'])}   "
        f"measured {m['tokens_per_s']:.1f} (min {m['tokens_per_s_spread']['min']:.1f}, "
        f"max {m['tokens_per_s_spread']['max']:.1f})"
    )
    print(
        f"speedup  predicted {p['speedup']:.3f} {iv(p['speedup_interval'])}   measured "
        f"{m['speedup']:.3f}; lossless {m['lossless']}"
    )
    print(R.check_line(doc["target_diversity"]))
    print(
        "gap (measured / predicted - 1): "
        + ", ".join(f"{k} {100 * v:+.1f}%" for k, v in doc["gap"].items())
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--member", default="dsv3-v1")
    ap.add_argument("--size", default="full", help="zoo size of the member: full or tiny")
    ap.add_argument("--drafter", default=None, help="default: the demo's K2 drafter")
    ap.add_argument("--work", default="/tmp/e3k_bench/predict")
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--prompts", type=int, default=16, help="per half (A and B)")
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--boot", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, help="write the result file here")
    a = ap.parse_args()
    print("environment: " + environment())
    doc = run(a)
    report(doc)
    if a.json:
        from _results import write_result

        write_result(a.json, "eagle3kit.bench_predict", doc)


if __name__ == "__main__":
    main()
