"""Does `plan --from bench.json` predict a second live run? Measured against the test fakes.

    python benchmarks/live_fake_ab.py [--engine vllm] [--member llama-v1] [--size tiny]
        [--max-tokens 48] [--repeats 3] [--json benchmarks/results/live-fake-ab-full.json]

Starts the tests' fake engine twice on 127.0.0.1 (tests/fake_engine.py: a zoo target with
real speculative decoding; a plain one as the baseline) with a drafter trained briefly on
the target's own greedy text (tests/decode_helpers.py). Run A is `bench --url ...
--baseline-url ...` on prompt set A; `plan --from` run A's JSON predicts the speculative
decode rate (tau / cycle at the measured depth), checked on run B's pooled decode rate (all
decoded tokens / their time: what a cycle model of mean costs predicts); run B is the same
command on prompt set B (other prompts). Both runs' distinct answers and distinct-4 are kept
(the canned-output check). Prints and writes both runs' tau and decode tok/s, the prediction and its
error, for the decode rate and for the speedup over the interleaved plain deployment (on a
shared machine the absolute rate drifts between runs; the interleaved ratio does not). The
fake serves one request at a time on CPU: this checks the bookkeeping end to end, not an
engine's speed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _env import environment  # noqa: E402

SET_A = ["def ", "import ", "class ", "for i in ", "    return ", "x = [", "if __name__", "# "]
SET_B = ["def main(", "    while ", "try:\n", "from ", "with open(", "print(", "self.", "raise "]


def _run(spec, base, prompts, args) -> dict:
    from eagle3kit.live.bench import LiveConfig, run_live_bench
    from eagle3kit.live.suites import Prompt

    cfg = LiveConfig(
        prompts=[Prompt("code", str(i), (p,)) for i, p in enumerate(prompts)],
        max_tokens=args.max_tokens,
        repeats=args.repeats,
        endpoint="completions",
        timeout=1800,
    )
    return run_live_bench([spec.url], base.url, cfg)


def _level(doc: dict) -> dict:
    dep = next(d for d in doc["deployments"] if d["role"] == "speculative")
    return dep["levels"][0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", default="vllm", choices=["vllm", "sglang"])
    ap.add_argument("--member", default="llama-v1")
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from decode_helpers import self_text, train_drafter
    from fake_engine import FakeEngine

    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel
    from eagle3kit.plan import plan
    from eagle3kit.plan.from_file import plan_args_from_file

    tm = TargetModel.from_pretrained(zoo.get(args.member, size=args.size))
    drafter = train_drafter(tm, self_text(tm, n=32), steps=60)
    endpoint_kw = {"engine": args.engine, "lifetime": 3600}
    with FakeEngine(tm, drafter, **endpoint_kw) as spec, FakeEngine(tm, None, **endpoint_kw) as b:
        a = _run(spec, b, SET_A, args)
        second = _run(spec, b, SET_B, args)
    tmp = Path("live-fake-ab.run-a.json")
    tmp.write_text(json.dumps(a))
    f = plan_args_from_file(tmp, {})
    tmp.unlink()
    res = plan(
        cycle_ms=f["cycle_ms"],
        tau=f["tau"],
        depth=f["depth"],
        decode_ms=f["decode_ms"],
    )
    pred = res.throughput_tps
    la, lb = _level(a), _level(second)
    got = lb["decode_tokens_per_s_pooled"]  # what the cycle model predicts: mean cycle costs

    def run(lv: dict) -> dict:
        keep = (
            "decode_tokens_per_s",
            "decode_tokens_per_s_pooled",
            "distinct_answers",
            "answers",
            "distinct4",
        )
        return {"tau_online": lv["acceptance"]["tau_online"], **{k: lv.get(k) for k in keep}}

    out = {
        "member": f"{args.member} ({args.size})",
        "run_a": run(la),
        "run_b": run(lb),
        "plan_from_run_a_tps": pred,
        "run_b_measured_tps": got,
        "prediction_error": pred / got - 1,
        "plan_from_run_a_speedup": res.speedup,
        "run_b_measured_speedup": second["comparison"][0]["decode_speedup"],
        "speedup_prediction_error": res.speedup / second["comparison"][0]["decode_speedup"] - 1,
    }
    print("environment: " + environment())
    print(json.dumps(out, indent=2))
    if args.json:
        from _results import write_result

        write_result(args.json, "eagle3kit.benchmark.live-fake-ab", out)


if __name__ == "__main__":
    main()
