"""A zoo recipe trial: build one member with recipe overrides, measure it after each phase.

    python lab/zoo_phases.py MEMBER [--set field=value ...] [--seed N] [--keep DIR]
                             [--parent DIR] [--json lab/results/zoo_chat-trialN-X.json]

Builds MEMBER's current recipe (``eagle3kit.zoo.recipe``) with the ``--set`` overrides
(``dataclasses.replace`` on the ``Recipe``; values are Python literals) into a temp dir, or
``--keep DIR``, through the build's own code (``zoo.builder.build_into``), and measures the
held-out chat requests after likelihood training and after the unloop phase (the build's
``on_phase`` hook), with the build's held-out loss and greedy distinct-4 at the end: where
conditioning is lost. ``--seed N`` builds from another seed (the same recipe, another draw):
how far one build's figures move by chance. A v2 continues from ``--parent DIR`` (a v2
trial's own v1 trial) or the cached v1. The zoo's cache is never written (the old
``--phases`` without overrides built into it through ``zoo.build``). Trials that needed
code changes ran with that code uncommitted; each result file's ``trial`` field or ``dirty``
flag says so (lab/README.md). Formerly ``benchmarks/bench_zoo_chat.py --phases``; the result
kind is unchanged.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # _env, _results
from _env import environment  # noqa: E402


def _parse_set(items: list[str]) -> dict:
    out = {}
    for it in items:
        k, v = it.split("=", 1)
        out[k] = ast.literal_eval(v)
    return out


def phases(
    name: str,
    overrides: dict,
    keep: Path | None = None,
    parent: Path | None = None,
    seed: int | None = None,
):
    """Build ``name``'s recipe with ``overrides`` (and another ``seed``, if given: the same
    recipe from another draw) into ``keep`` (kept) or a temp dir, continuing from ``parent``
    (a v2 candidate's own v1 candidate) or the cached parent; the figures after each phase."""
    from eagle3kit import zoo
    from eagle3kit.zoo.builder import build_into, chat_eval

    m = zoo.member(name)
    if seed is not None:
        m = replace(m, seed=seed)
    recipe = replace(zoo.recipe(name), **overrides)
    if m.parent and parent is None:
        parent = zoo.get(m.parent)
    rows: dict = {}

    def on_phase(phase, model, tok, special, d):
        t = time.time()
        fig, _ = chat_eval(model, tok, special, d.requests, recipe.gen_tokens)
        fig["seconds"] = round(time.time() - t, 1)
        rows[phase] = fig
        print(f"{name} after {phase}: {fig}", flush=True)

    t0, c0 = time.time(), _cpu()
    with tempfile.TemporaryDirectory() as tmp:
        out = keep or Path(tmp) / name
        build_into(m, "full", recipe, out, parent, None, on_phase)
        doc = json.loads((out / zoo.MANIFEST).read_text())
    met = doc["metrics"]
    return {
        "member": name,
        "overrides": overrides,
        "seed": m.seed,
        "recipe_digest": doc.get("recipe_digest"),
        "phases": rows,
        "final_chat": {k: v for k, v in met["chat"].items() if k != "sample"},
        "chat_sample": met["chat"]["sample"],
        "heldout_loss": met["heldout_loss"],
        "heldout_loss_other_slice": met["heldout_loss_other_slice"],
        "distinct4_mean": met["distinct4_mean"],
        "distinct4_other_slice_mean": met["distinct4_other_slice_mean"],
        "build_seconds": round(time.time() - t0, 1),
        "build_cpu_seconds": round(_cpu() - c0, 1),
        "stage_seconds": doc["stage_seconds"],
    }


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("member", help="the zoo member to build, e.g. dsv3-v1")
    ap.add_argument("--set", action="append", default=[], help="recipe override field=value")
    ap.add_argument("--keep", type=Path, default=None, help="build into this dir (kept)")
    ap.add_argument("--parent", type=Path, default=None, help="a v2's parent dir")
    ap.add_argument("--seed", type=int, default=None, help="another seed for the member")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(2)
    print("environment: " + environment())
    row = phases(args.member, _parse_set(args.set), args.keep, args.parent, args.seed)
    print(json.dumps(row, indent=1))
    if args.json:
        from _results import write_result

        home = os.environ.get("EAGLE3KIT_HOME")
        write_result(args.json, "eagle3kit.bench_zoo_chat", {"eagle3kit_home": home, "rows": [row]})


if __name__ == "__main__":
    main()
