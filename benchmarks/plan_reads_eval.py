"""Does `plan` price the tau that `eval` measured? (issue 32)

    python benchmarks/plan_reads_eval.py [--json benchmarks/results/plan_reads_eval-tiny.json]

On the zoo's tiny llama-v1, a drafter trained briefly on the target's own greedy text (the
tests' recipe, tests/decode_helpers.py) is scored by the real `eagle3kit eval --json`
(offline, depth 3, on held-out chat conversations); that file is then given as is to
`eagle3kit plan --acceptance-file` and to `plan --from`. eval writes per-position acceptance
cumulative, P(a >= i); the result records eval's tau, the two planned taus, and the tau the
old reading gave (the cumulative rates taken as conditional: 1 + sum_i prod_{j<=i} P(a >= j)).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from _results import write_result  # noqa: E402


def _cli(*args: str) -> dict:
    from typer.testing import CliRunner

    from eagle3kit.cli import app

    r = CliRunner().invoke(app, list(args))
    if r.exit_code not in (0, 1):
        raise SystemExit(f"eagle3kit {' '.join(args)}: exit {r.exit_code}: {r.output[-500:]}")
    return json.loads(r.stdout)


def run(tmp: Path) -> dict:
    import torch
    from decode_helpers import chat_jsonl, save_drafter_dir, self_text, train_drafter

    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.manual_seed(0)
    torch.set_num_threads(1)
    target = str(zoo.get("llama-v1", size="tiny"))
    tm = TargetModel.from_pretrained(target)
    d = save_drafter_dir(train_drafter(tm, self_text(tm, n=16)[:6], steps=30), tmp / "drafter")
    data = chat_jsonl(tmp / "conv.jsonl", n=8)
    ev = _cli("eval", "--target", target, "--drafter", d, "--data", data, "--depth", "3", "--json")
    (tmp / "eval.json").write_text(json.dumps(ev))
    speeds = ("--baseline-tps", "80", "--cycle-ms", "25")
    acc = _cli("plan", *speeds, "--acceptance-file", str(tmp / "eval.json"), "--json")
    frm = _cli("plan", "--from", str(tmp / "eval.json"), *speeds, "--json")
    old, surv = 1.0, 1.0
    for c in ev["per_position_acceptance"]:
        surv *= c
        old += surv
    return {
        "eval": {
            k: ev[k]
            for k in (
                "mode",
                "depth",
                "tau_walk",
                "per_position_acceptance",
                "conditional_acceptance",
                "cycles",
                "samples",
            )
        },
        "plan_acceptance_file_tau": acc["tau"],
        "plan_from_tau": frm["tau"],
        "old_reading_tau": old,
        "abs_diff_acceptance_file": abs(acc["tau"] - ev["tau_walk"]),
        "abs_diff_from": abs(frm["tau"] - ev["tau_walk"]),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=None, help="write the result file here")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as t:
        doc = run(Path(t))
    print(json.dumps(doc, indent=2))
    if a.json:
        write_result(a.json, "eagle3kit.benchmark.plan_reads_eval", doc)


if __name__ == "__main__":
    main()
