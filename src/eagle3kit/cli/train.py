"""CLI verb: `eagle3kit train` — train an EAGLE-3 drafter with training-time test (eagle3kit.train).

Also runs under torchrun: `torchrun --nproc-per-node N -m eagle3kit train ...` (FSDP2).
"""

from __future__ import annotations

import dataclasses
import os

import typer

from eagle3kit.cli._command import command
from eagle3kit.train.config import TrainOptions


def _warnings(progress, main_rank: bool):
    """Print the library's "warning" events on stderr (also under --json); pass the rest on."""
    from eagle3kit.cli._render import err

    def on_event(e) -> None:
        if e.stage == "warning":
            if main_rank:
                err().print(
                    "warning: " + e.info["message"], markup=False, highlight=False, soft_wrap=True
                )
        elif progress is not None:
            progress(e)

    return on_event


def train(o: TrainOptions) -> None:
    """Train a drafter (training-time test); keeps RUN/best by the walked accept length.
    --method eagle3.1 / peagle train those EAGLE variants (docs/train.md), dflash a DFlash
    block drafter (docs/dflash.md), mtp fine-tunes the target's own MTP head (docs/mtp.md).
    --config FILE reads the options from a file; --dry-run prints the run's plan."""
    from eagle3kit.core import registry

    method = o.method
    trained = registry.names(can="train")
    if method not in (None, *trained):
        raise typer.BadParameter(
            f"expected one of {', '.join(trained)}, found {method!r}", param_hint="--method"
        )
    if o.dry_run:  # headers only: no method part (torch) unless a step is measured
        _dry_run(o)
        return
    part = registry.part(method or registry.DEFAULT, "train")
    options = dataclasses.asdict(o)
    cfg = part.config(options)
    _run(cfg, resume=o.resume, threads=o.threads, json_=o.json_, part=part, options=options)
    if os.environ.get("RANK", "0") == "0":
        _provenance(o)


INPUTS = ("data", "features", "vocab", "init_from", "reference_features")  # digested


def _provenance(o: TrainOptions) -> None:
    """RUN/config.toml and RUN/provenance.json (core/provenance.py), after the run. A resumed
    run's config is the one it was started with (RUN/state), this invocation's -o and
    --device on top."""
    import json
    from pathlib import Path

    from eagle3kit.cli._command import argv
    from eagle3kit.core import provenance

    state = Path(o.out) / "state" / "state.json"
    if o.resume and state.is_file():
        saved = json.loads(state.read_text()).get("config") or {}
        keep = {f.name for f in dataclasses.fields(TrainOptions)} - {"out", "device"}
        o = dataclasses.replace(o, **{k: v for k, v in saved.items() if k in keep})
    inputs = {name: getattr(o, name) for name in INPUTS}
    provenance.write(o.out, o, command=argv(), device=o.device, inputs=inputs)


def register(app: typer.Typer) -> None:
    app.command("train")(command(TrainOptions, train))


def _dry_run(o: TrainOptions) -> None:
    """--dry-run: the plan (train/dry_run.py), printed or as JSON; nothing written."""
    from eagle3kit.cli._render import emit_json, out
    from eagle3kit.train.dry_run import plan, plan_lines

    doc = plan(o)
    if o.json_:
        emit_json(doc)
        return
    for line in plan_lines(doc):
        out().print(line, markup=False, highlight=False)


def _run(cfg, *, resume: bool, threads: int | None, json_: bool, part, options: dict) -> None:
    """The run of `cfg` (the settings the method's train part made of the options), its
    provenance (RUN/config.toml, RUN/provenance.json) and its summary (rank 0)."""
    import torch

    from eagle3kit.cli._checks import check_device
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json, out

    check_device(cfg.device)  # one line for cuda on a machine without it, before any work
    if threads:
        torch.set_num_threads(threads)
    main_rank = os.environ.get("RANK", "0") == "0"
    with bar(not json_ and main_rank) as progress:
        summary = part.run(cfg, options, resume=resume, progress=_warnings(progress, main_rank))
    if not main_rank:
        return
    if json_:
        emit_json(summary)
        return
    for line in part.summary_lines(summary):
        out().print(line, markup=False, highlight=False)
