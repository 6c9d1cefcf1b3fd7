"""P-EAGLE's decode speed beside EAGLE-3's: both fine-tuned from the K2 drafter, one timing run.

    python benchmarks/peagle_decode.py [--size full] [--samples 320] [--epochs 2] \
        [--min-steps 80] [--batch 8] [--max-len 128] [--lr 1e-3] [--ttt-steps 3] \
        [--seed 0] [--prompts 8] [--max-new 64] [--repeats 3] [--reuse] \
        [--json benchmarks/results/peagle-decode-full.json]

The two arms of benchmarks/bench_peagle.py (`fine_tune`: the shipped K2 drafter fine-tuned on
dsv3-v2 as EAGLE-3 and as P-EAGLE, same data, steps, schedule and seed; --reuse keeps runs
already in --work), then ONE timing run (measure/timing.py `time_methods`, the harness `bench`
uses: every prompt decoded by every method in rotated order, repeat after repeat) of four
methods on one loaded target: plain greedy, prompt lookup (methods/lookup/decode.py, 10 tokens),
the EAGLE-3 fine-tune's chain (K sequential draft steps per cycle) and the P-EAGLE fine-tune's
chain (K drafts from one drafter pass), both at depth K = --ttt-steps. Prompts: --prompts
requests from the held-out files of dsv3-v2's slice (its chat template). Each row: tok/s
(median/min/max over repeats), speedup over greedy, online τ, per-position acceptance, draft
and verify ms per cycle, and whether every output equals greedy's (`bench`'s summary,
measure/bench.py). The canned-output check runs on the greedy outputs of the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _drafter_runs as R  # noqa: E402
from _env import environment  # noqa: E402
from bench_peagle import add_options, fine_tune  # noqa: E402

ARMS = ("eagle3", "peagle")


def arms(a: argparse.Namespace, target: str, k2: str) -> dict[str, dict]:
    """{method: fine_tune row} (trained now, or read back with --reuse)."""
    out = {}
    common = {**R.train_settings(a, target), "data": str(R.training_data(a))}
    for m in ARMS:
        run = Path(a.work) / f"{m}-s{a.seed}"
        if a.reuse and (run / "summary.json").is_file():
            s = json.loads((run / "summary.json").read_text())
            out[m] = {"method": m, "seed": a.seed, "steps": s["steps"], "reused": True}
            out[m]["validation_tau_walk"] = s["tau_walk"]
            continue
        out[m] = fine_tune(a, k2, common, m, a.seed)
        print(json.dumps(out[m]), file=sys.stderr, flush=True)
    return out


def timing(a: argparse.Namespace, target: str) -> dict:
    """One interleaved timing run of greedy, lookup and both chains; `bench`'s summary of
    each (the EAGLE-3 chain and the P-EAGLE chain summarised against the same greedy runs)."""
    from eagle3kit.measure import timing as T
    from eagle3kit.measure.bench import _summarise
    from eagle3kit.model.loading import load_drafter, load_pair

    tm, e3 = load_pair(target, str(Path(a.work) / f"eagle3-s{a.seed}" / "best"))
    pe = load_drafter(str(Path(a.work) / f"peagle-s{a.seed}" / "best")).drafter
    if tuple(pe.spec.aux_layers) != tuple(e3.spec.aux_layers):
        raise SystemExit("the two fine-tunes capture different target layers")
    pe.set_embedding(tm.embed_tokens.weight)
    e3.eval().requires_grad_(False), pe.eval().requires_grad_(False)
    eos = getattr(tm.tokenizer, "eos_token_id", None)
    prompts = R.held_out_requests(target, tm.tokenizer, a.prompts)
    k, n = a.ttt_steps, a.max_new
    runners = {
        "greedy": T.plain_runner(tm, n, eos),
        "lookup": T.lookup_runner(tm, n, eos, 10),
        "chain": T.spec_runner(tm, e3, n, eos, k, None),
        "chain-peagle": T.spec_runner(tm, pe, n, eos, k, None),
    }
    runs = T.time_methods(runners, prompts, a.repeats)
    cfg = {"max_new_tokens": n, "depth": k, "lookup": 10, "tree_depth": k}
    doc = _summarise(
        [x for x in runs if x.method != "chain-peagle"], list(runners)[:3], prompts, a.repeats, cfg
    )
    for x in runs:  # the P-EAGLE runs as the chain of a second summary over the same greedy
        x.method = {"chain": "chain-eagle3", "chain-peagle": "chain"}.get(x.method, x.method)
    pdoc = _summarise(
        [x for x in runs if x.method in ("greedy", "chain")],
        ["greedy", "chain"],
        prompts,
        a.repeats,
        cfg,
    )
    rows = {r["name"]: r for r in doc["methods"]}
    rows["chain"]["method"] = rows["chain"]["label"] = "eagle3"
    peagle = next(r for r in pdoc["methods"] if r["name"] == "chain")
    peagle.update(name="chain-peagle", method="peagle", label="peagle")
    doc["methods"].append(peagle)
    tm.close()
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_options(ap, "/tmp/e3k_bench/peagle-decode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--reuse", action="store_true", help="keep fine-tunes already in --work")
    a = ap.parse_args()
    import torch

    from eagle3kit import zoo
    from eagle3kit.demo.steps import k2_drafter

    torch.set_num_threads(a.threads)
    print("environment: " + environment())
    target = str(zoo.get(a.member, size=a.size))
    k2 = str(k2_drafter(a.size))
    doc = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()}}
    doc.update(k2_drafter=k2, arms=arms(a, target, k2), bench=timing(a, target))
    b = doc["bench"]
    print(R.check_line(b["target_diversity"]))
    for r in b["methods"]:
        tau = f", tau {r['tau_online']:.3f}" if "tau_online" in r else ""
        same = r.get("same_tokens_as_greedy")
        print(
            f"{r['name']}: {r['tokens_per_s']['median']:.1f} tok/s, speedup "
            f"{r['speedup']:.3f}{tau}, same as greedy: {same}"
        )
    if a.json:
        from _results import write_result

        write_result(a.json, "eagle3kit.peagle_decode", doc)


if __name__ == "__main__":
    main()
