"""One zoo recipe trial measured against the zoo bar (signed and unsigned requests).

    python lab/zoo_trial.py MEMBER --keep DIR [--set field=value ...] [--parent DIR]
                            [--threads N] [--requests 64] [--seed S] [--json OUT.json]

Builds MEMBER's current recipe with the ``--set`` overrides (values are Python literals)
into DIR through the build's own code (``zoo.builder.build_into``) at ``--threads`` torch
threads (the zoo's own count is fixed per size; two trials at 1 thread each share 2 cores),
then measures it with ``benchmarks/zoo_bar.py`` (held-out requests, signed and in phrasings
no recipe trains on). A v2 continues from ``--parent DIR`` (a v1 trial's dir).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _env import environment  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("member")
    ap.add_argument("--keep", type=Path, required=True)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--parent", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--requests",
        type=int,
        default=64,
        help="held-out requests a style (64: round 8 found 32 too noisy to compare recipes)",
    )
    ap.add_argument("--size", default="full")
    ap.add_argument("--seed", type=int, default=None, help="the member's seed (default: its own)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--bf16-only", action="store_true", help="measure the bf16 round trip only")
    ap.add_argument(
        "--measure-only", action="store_true", help="measure the member already built in --keep"
    )
    ap.add_argument(
        "--save-trained",
        type=Path,
        default=None,
        help="also save the model after the likelihood phase (before unlikelihood) here: a "
        "later trial of the unlikelihood phase alone continues from it with --parent DIR "
        "--set steps=0 (same seed, so the same arithmetic as a full build)",
    )
    args = ap.parse_args()

    import torch

    from eagle3kit import zoo
    from eagle3kit.zoo import members
    from eagle3kit.zoo.builder import build_into

    torch.set_num_threads(args.threads)
    members.BUILD_THREADS[args.size] = args.threads
    print("environment: " + environment(), flush=True)
    overrides = {k: ast.literal_eval(v) for k, v in (s.split("=", 1) for s in args.set)}
    m = zoo.member(args.member)
    if args.seed is not None:  # a second seed of a recipe: the same member, other draws
        m = replace(m, seed=args.seed)
    recipe = replace(zoo.recipe(args.member, args.size), **overrides)

    def progress(ev):
        if (
            getattr(ev, "done", 0) in (1, getattr(ev, "total", None))
            or (getattr(ev, "done", 0) or 0) % 50 == 0
        ):
            print(time.strftime("%H:%M:%S"), ev, flush=True)

    def save_trained(phase, model, tok, special, data):
        if phase == "training" and args.save_trained is not None:
            import shutil

            model.save_pretrained(str(args.save_trained))
            for f in args.keep.glob("*.json"):  # the tokenizer files (no zoo.json yet)
                shutil.copy(f, args.save_trained / f.name)

    t0 = time.time()
    if not args.measure_only:
        build_into(m, args.size, recipe, args.keep, args.parent, progress, on_phase=save_trained)
        print(f"built in {time.time() - t0:.1f} s", flush=True)
    import zoo_bar

    rows = []
    for bf16 in (True,) if args.bf16_only else (False, True):
        row = zoo_bar.measure(args.keep, args.requests, 128, bf16)
        row["overrides"] = overrides
        rows.append(row)
        keys = ("names_function", "distinct_openings", "distinct_answers", "pooled_distinct4")
        print(
            json.dumps({"bf16": bf16, **{s: {k: row[s][k] for k in keys} for s in zoo_bar.STYLES}}),
            flush=True,
        )
    if args.json:
        from _results import write_result

        write_result(args.json, "eagle3kit.zoo_bar", {"rows": rows})


if __name__ == "__main__":
    main()
