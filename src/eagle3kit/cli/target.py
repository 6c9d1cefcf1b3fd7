"""CLI verbs: `eagle3kit target slim` — the part of a target the engine route needs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eagle3kit.cli._options import JsonFlag

Target = Annotated[
    str,
    typer.Argument(
        metavar="TARGET",
        help="A model dir (whole or partial: index + the shards holding the embedding, final "
        "norm and lm_head), a Hub id (only those shards are fetched), or a zoo member.",
    ),
]
Out = Annotated[Path, typer.Option("-o", "--output", help="The directory to write.")]
Overwrite = Annotated[
    bool, typer.Option("--overwrite", help="Replace OUT when it exists and is not empty.")
]


def slim(
    target: Target, output: Out, overwrite: Overwrite = False, json_: JsonFlag = False
) -> None:
    """Write config, tokenizer and one safetensors file holding only the input embedding, final
    norm and lm_head (stored bytes, unchanged): what `data capture --engine vllm`, `train
    --features`, `eval --features` and `convert --embed-from` read of a target."""
    from eagle3kit.checkpoint.target_slim import slim_target
    from eagle3kit.cli._render import emit_json, out
    from eagle3kit.model.loading import resolve_target

    doc = slim_target(resolve_target(target), output, overwrite=overwrite)
    if json_:
        emit_json(doc)
        return
    roles = ", ".join(f"{r} {n}" for r, n in doc["tensors"].items())
    out().print(f"[bold]{doc['output']}[/]: {roles} ({doc['bytes'] / 2**20:.1f} MiB)")
    out().print(f"  files: {', '.join(doc['files'])}; read from {', '.join(doc['shards_read'])}")


def register(app: typer.Typer) -> None:
    target_app = typer.Typer(
        help="A target's own files: `slim` keeps what the engine route reads of it.",
        no_args_is_help=True,
    )
    app.add_typer(target_app, name="target")
    target_app.command("slim")(slim)
