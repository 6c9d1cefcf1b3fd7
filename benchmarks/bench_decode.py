"""Speculative decoding on the zoo's FULL targets: lossless, speed, offline vs online, plan.

    python benchmarks/bench_decode.py [--drafter-dsv3 DIR] [--drafter-llama DIR]
        [--lossless-members dsv3-v1,dsv3-v2,llama-v1,llama-v2] [--lossless-prompts 50]
        [--speed-members dsv3-v2,llama-v2] [--prompts 8] [--tokens 128] [--repeats 3]
        [--depth 4] [--threads 2] [--json results.json]

1. Lossless: on each member, `--lossless-prompts` held-out chat prompts (the zoo's held-out
   stdlib functions: "Write the Python function ..." rendered with the chat template) x
   exactly `--tokens` tokens (decoding goes on through EOS): transformers'
   `generate(do_sample=False)` against eagle3kit chain and tree (greedy); counts prompts whose
   outputs are identical token for token. A member without
   a trained drafter for its architecture gets a random one (losslessness must hold anyway).
2. Speed (`eagle3kit.measure.bench.bench`): greedy, prompt lookup, chain, tree on the same prompts,
   rotating order, tok/s median/min/max over `--repeats`, speedup, tau, ideal bound and the
   fraction of it reached.
3. Offline simulated tau (the chain cycles walked teacher-forced on held-out conversations
   whose answers are the target's own greedy output) vs online chain tau at the same depth on
   their prompts; beside it, offline tau on the same prompts with the corpus's own answers
   (DATA before regeneration) and training's every-position tau.
4. `eval --json` piped into `plan --from`: plan's predicted tok/s per request (prefill, then
   (N-1)/tau cycles) against the measured tok/s of the same online run and of the bench run
   (a separate run on the same prompts); plan's decode-phase tau / cycle_ms beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import transformers  # noqa: F401  (so that the environment line names it)

sys.path.insert(0, str(Path(__file__).parent))
from _env import environment, environment_info  # noqa: E402

from eagle3kit import zoo  # noqa: E402
from eagle3kit.decode import TreeShape, greedy_generate, speculative_generate  # noqa: E402
from eagle3kit.measure.bench import bench, default_prompts  # noqa: E402
from eagle3kit.measure.evaluate import EvalData, evaluate, evaluate_offline, load_eval_data  # noqa: E402
from eagle3kit.model.target import TargetModel  # noqa: E402


def load(member: str, drafter_dir: str | None, size: str = "full"):
    """(target, drafter, 'trained' | 'random') for a full member."""
    from eagle3kit.model.drafter import Eagle3Drafter
    from eagle3kit.model.loading import load_pair

    if drafter_dir:
        tm, d = load_pair(str(zoo.get(member, size=size)), drafter_dir)
        return tm, d, "trained"
    tm = TargetModel.from_pretrained(zoo.get(member, size=size))
    torch.manual_seed(0)
    d = Eagle3Drafter.for_target(tm)
    return tm, d.eval(), "random"


def hf_greedy(tm, ids: list[int], n: int) -> list[int]:
    """transformers' greedy `generate`: exactly n tokens, through EOS (no stop token)."""
    cfg = tm.model.generation_config
    saved, cfg.eos_token_id = cfg.eos_token_id, None
    try:
        with torch.no_grad():
            out = tm.model.generate(
                torch.tensor([ids]),
                do_sample=False,
                max_new_tokens=n,
                min_new_tokens=0,
                eos_token_id=None,
                pad_token_id=0,
            )
    finally:
        cfg.eos_token_id = saved
    return out[0, len(ids) :].tolist()


def lossless(tm, d, prompts, n: int, depth: int, tree: TreeShape) -> dict:
    """Each prompt decodes exactly n tokens, through EOS, so every comparison covers n."""
    same = {"chain": 0, "tree": 0}
    taus = {"chain": [], "tree": []}
    tokens = 0
    for ids in prompts:
        want = hf_greedy(tm, ids, n)
        assert len(want) == n
        tokens += len(want)
        for name, shape in (("chain", None), ("tree", tree)):
            g = speculative_generate(tm, d, ids, max_new_tokens=n, depth=depth, tree=shape)
            same[name] += g.tokens == want
            taus[name].append(g.stats.tau_online)
    return {
        "prompts": len(prompts),
        "tokens": tokens,
        "identical": same,
        "mean_tau": {k: sum(v) / len(v) for k, v in taus.items()},
    }


def self_conversations(tm, prompts, n: int) -> EvalData:
    """Held-out prompts with the target's own greedy answers (the data a drafter is trained
    on after regeneration): samples for offline eval, prompts for online."""
    eos = tm.tokenizer.eos_token_id
    samples = []
    for ids in prompts:
        ans = greedy_generate(tm, ids, max_new_tokens=n, eos_token_id=eos).tokens + [eos]
        seq = torch.tensor(ids + ans)  # [T]
        mask = torch.zeros(len(seq), dtype=torch.bool)
        mask[len(ids) :] = True
        samples.append((seq, mask))
    return EvalData("self", samples, [list(p) for p in prompts])


def original_conversations(tm, n_prompts: int) -> EvalData:
    """The same held-out prompts with the corpus's own answers (the functions' source), as a
    user's DATA would hold before regeneration."""
    import tempfile

    from eagle3kit.zoo.corpus import chat_samples, files, spaced

    convs = spaced(chat_samples(files("lib", held_out=True)), n_prompts)
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "original.jsonl"
        p.write_text("".join(json.dumps(c) + "\n" for c in convs))
        return load_eval_data(p, tm.tokenizer)


def offline_online_plan(
    tm, d, prompts, n: int, depth: int, repeats: int, bench_chain_tps: float
) -> dict:
    from eagle3kit import plan

    data = self_conversations(tm, prompts, n)
    r = evaluate(tm, d, data, depth, online=True, max_new_tokens=n, repeats=repeats, limit=None)
    orig = evaluate_offline(tm, d, original_conversations(tm, len(prompts)), depth)
    p = plan.plan(
        decode_ms=r["decode_ms"],
        cycle_ms=r["cycle_ms"],
        tau=r["tau_online"],
        depth=depth,
        new_tokens=r["new_tokens"],
        prefill_ms=r["prefill_ms"],
    )
    return {
        "depth": depth,
        "offline_tau": r["offline"]["tau_walk"],
        "online_tau": r["tau_online"],
        "gap": r["offline_online_gap"],
        "offline_tau_all_positions": r["offline"]["all_positions"]["tau_every_position"],
        "offline_tau_original_answers": orig["tau_walk"],
        "gap_original_answers": orig["tau_walk"] / r["tau_online"] - 1,
        "offline_per_position": r["offline"]["per_position_acceptance"],
        "online_per_position": r["per_position_acceptance"],
        "measured_tps": r["tokens_per_s"],
        "plan_predicted_tps": p.request.tps,
        "plan_error": p.request.tps / r["tokens_per_s"] - 1,
        "plan_decode_phase_tps": p.throughput_tps,
        "plan_decode_phase_error": p.throughput_tps / r["tokens_per_s"] - 1,
        "bench_chain_tps": bench_chain_tps,
        "plan_error_vs_bench_run": p.request.tps / bench_chain_tps - 1,
        "prefill_ms": r["prefill_ms"],
        "new_tokens": r["new_tokens"],
        "decode_ms": r["decode_ms"],
        "cycle_ms": r["cycle_ms"],
        "baseline_tps": r["baseline_tokens_per_s"],
        "lossless": r["lossless"],
    }


def _print_speed(member: str, kind: str, r: dict) -> None:
    print(
        f"\n## speed: {member} ({kind} drafter), {r['prompts']} prompts x {r['max_new_tokens']}"
        f" tokens, {r['repeats']} repeats; decode step {r['decode_ms']:.2f} ms;"
        f" target greedy distinct-4 {r['target_distinct4']:.2f}"
    )
    print(
        f"{'method':14} {'tok/s med':>9} {'min':>7} {'max':>7} {'speedup':>8} {'tok/fwd':>7}"
        f" {'upper':>6} {'bound':>6} {'of bound':>8}  draft/verify ms"
    )
    for m in r["methods"]:
        t = m["tokens_per_s"]
        upper = f"{m['upper_bound']:.2f}x" if "upper_bound" in m else "-"
        bound = f"{m['bound_with_draft_cost']:.2f}x" if "bound_with_draft_cost" in m else "-"
        frac = f"{100 * m['fraction_of_bound']:.0f}%" if "fraction_of_bound" in m else "-"
        dv = f"{m['draft_ms']:.1f}/{m['verify_ms']:.1f}" if "draft_ms" in m else ""
        print(
            f"{m['name']:14} {t['median']:9.1f} {t['min']:7.1f} {t['max']:7.1f} "
            f"{m['speedup']:7.2f}x {m['tokens_per_forward']:7.2f} "
            f"{upper:>6} {bound:>6} {frac:>8}  {dv}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--drafter-dsv3")
    ap.add_argument("--drafter-llama")
    ap.add_argument("--lossless-members", default="dsv3-v1,dsv3-v2,llama-v1,llama-v2")
    ap.add_argument("--lossless-prompts", type=int, default=50)
    ap.add_argument("--speed-members", default="dsv3-v2,llama-v2")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--tree-depth", type=int, default=5)
    ap.add_argument("--topk", type=int, default=4)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--size", default="full", help="tiny: a smoke test of this script")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    drafters = {"dsv3": a.drafter_dsv3, "llama": a.drafter_llama}
    tree = TreeShape(a.topk, a.budget)
    out: dict = {
        "environment": environment_info(),
        "args": vars(a),
        "lossless": {},
        "speed": {},
        "offline_online": {},
    }
    print(environment())
    for member in filter(None, a.lossless_members.split(",")):
        tm, d, kind = load(member, drafters[member.split("-")[0]], a.size)
        prompts = default_prompts(tm.tokenizer, a.lossless_prompts)
        t0 = time.perf_counter()
        r = lossless(tm, d, prompts, a.tokens, a.depth, tree)
        r.update(drafter=kind, seconds=time.perf_counter() - t0)
        out["lossless"][member] = r
        print(
            f"lossless {member} ({kind} drafter): chain {r['identical']['chain']}/{r['prompts']},"
            f" tree {r['identical']['tree']}/{r['prompts']} identical to HF generate"
            f" ({r['tokens']} tokens; tau chain {r['mean_tau']['chain']:.2f}, tree"
            f" {r['mean_tau']['tree']:.2f};"
            f" {r['seconds']:.0f} s)",
            flush=True,
        )
    for member in filter(None, a.speed_members.split(",")):
        tm, d, kind = load(member, drafters[member.split("-")[0]], a.size)
        prompts = default_prompts(tm.tokenizer, a.prompts)
        r = bench(
            tm,
            d,
            prompts,
            repeats=a.repeats,
            max_new_tokens=a.tokens,
            depth=a.depth,
            tree=tree,
            tree_depth=a.tree_depth,
            methods=("greedy", "hf-greedy", "lookup", "lookup-hf", "chain", "tree"),
        )
        r["drafter"] = kind
        out["speed"][member] = r
        _print_speed(member, kind, r)
        chain = next(m for m in r["methods"] if m["name"] == "chain")
        o = offline_online_plan(
            tm, d, prompts, a.tokens, a.depth, a.repeats, chain["tokens_per_s"]["median"]
        )
        out["offline_online"][member] = o
        print(
            f"offline simulated tau {o['offline_tau']:.2f} vs online chain tau "
            f"{o['online_tau']:.2f} at depth {a.depth}: gap {100 * o['gap']:+.1f}% (answers the "
            f"target wrote; every position as a cycle start: {o['offline_tau_all_positions']:.2f});"
            f" on the corpus's own answers {o['offline_tau_original_answers']:.2f}, gap "
            f"{100 * o['gap_original_answers']:+.1f}%"
        )
        print(
            f"plan --from eval: predicted {o['plan_predicted_tps']:.1f} tok/s per request "
            f"({o['new_tokens']:.0f} tokens, prefill {o['prefill_ms']:.1f} ms) vs measured "
            f"{o['measured_tps']:.1f} in the eval run ({100 * o['plan_error']:+.1f}%) and "
            f"{o['bench_chain_tps']:.1f} in the bench run above "
            f"({100 * o['plan_error_vs_bench_run']:+.1f}%); decode-phase tau/cycle "
            f"{o['plan_decode_phase_tps']:.1f} ({100 * o['plan_decode_phase_error']:+.1f}%); "
            f"decode {o['decode_ms']:.2f} ms, cycle {o['cycle_ms']:.2f} ms",
            flush=True,
        )
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
