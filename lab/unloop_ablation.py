"""Ablation: a zoo member built with and without its sequence-level unlikelihood phase.

    python lab/unloop_ablation.py [--members llama-v1,dsv3-v1]

For each member, builds (or reuses) the real member, then builds the same recipe with
``unloop_steps=0`` into a temp dir (same seed, data, threads; a v2 continues from the real
v1), and prints both sets of quality metrics from the builds' own evaluation: held-out loss,
distinct-4 of 128-token greedy continuations of held-out prompts (own slice, other slice),
and greedy answers to held-out chat requests. Minutes per member on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # _env, _results
from _env import environment  # noqa: E402


def metrics(doc: dict) -> dict:
    m = doc["metrics"]
    return {
        "heldout_loss": m["heldout_loss"],
        "unigram_loss": m["unigram_loss"],
        "distinct4_mean": m["distinct4_mean"],
        "distinct4_min": m["distinct4_min"],
        "distinct4_other_slice_mean": m["distinct4_other_slice_mean"],
        "chat_distinct4_mean": m["chat"]["distinct4_mean"],
        "chat_ended": m["chat"]["ended"],
        "build_seconds": doc["build_seconds"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", default="llama-v1,dsv3-v1")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch  # noqa: F401  (so that the environment line names it)

    from eagle3kit import zoo
    from eagle3kit.zoo.builder import build_into

    print("environment: " + environment())
    rows = []
    for name in args.members.split(","):
        m = zoo.member(name)
        with_ = json.loads((zoo.get(name) / zoo.MANIFEST).read_text())
        parent = zoo.get(m.parent) if m.parent else None
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / name
            build_into(m, "full", replace(zoo.recipe(name), unloop_steps=0), out, parent, True)
            without = json.loads((out / zoo.MANIFEST).read_text())
        rows.append({"member": name, "with": metrics(with_), "without": metrics(without)})

    print(
        "\n| member | unloop | held-out loss | distinct-4 mean (min) | other slice | chat (ended) "
        "| build s |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        for key in ("without", "with"):
            q = r[key]
            print(
                f"| {r['member']} | {key} | {q['heldout_loss']} "
                f"| {q['distinct4_mean']} ({q['distinct4_min']}) "
                f"| {q['distinct4_other_slice_mean']} "
                f"| {q['chat_distinct4_mean']} ({q['chat_ended']}) | {q['build_seconds']} |"
            )
    if args.json:
        args.json.write_text(json.dumps({"environment": environment(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
