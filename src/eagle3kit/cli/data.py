"""CLI verbs: `eagle3kit data prepare|vocab` (eagle3kit.data); `regenerate` and `capture`
come from cli/data_jobs.py, registered on the same `data` group.

torch/transformers are imported inside the commands only (`eagle3kit --help` stays fast).
"""

from __future__ import annotations

from typing import Annotated

import typer

from eagle3kit.cli._command import command
from eagle3kit.cli._options import JsonFlag
from eagle3kit.cli.data_options import PrepareOptions


def _render_prepare(r: dict) -> None:
    from rich.table import Table

    from eagle3kit.cli._render import err, out

    t = Table(title=f"prepared {r['out']} (loss mask: {r['mask_method']})")
    for col in ("samples", "tokens", "loss tokens", "truncated", "skipped"):
        t.add_column(col, justify="right")
    t.add_row(
        *(str(r[k]) for k in ("samples", "tokens", "loss_tokens", "truncated")),
        str(len(r["skipped"])),
    )
    out().print(t)
    shown = r["skipped"][:20]
    for s in shown:
        err().print(
            f"skipped {s['file']}:{s['line']}: {s['reason']}", markup=False, highlight=False
        )
    if len(r["skipped"]) > len(shown):
        err().print(f"... and {len(r['skipped']) - len(shown)} more (--json lists them all)")


def _render_vocab(r: dict) -> None:
    from rich.table import Table

    from eagle3kit.cli._render import out

    t = Table(
        title=f"draft vocab {r['out']}: {r['draft_vocab_size']} of {r['vocab_size']} ids, "
        f"from {r['loss_tokens']} loss tokens"
    )
    t.add_column("draft vocab size", justify="right")
    t.add_column("loss tokens covered", justify="right")
    for n, share in r["coverage"].items():
        mark = " <- chosen" if n == r["draft_vocab_size"] else ""
        t.add_row(f"{n}{mark}", f"{100 * share:.2f}%")
    out().print(t)


def prepare(o: PrepareOptions) -> None:
    """Tokenise conversations with the target's chat template; loss mask = assistant tokens +
    EOT."""
    from pathlib import Path

    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json
    from eagle3kit.core.errors import Eagle3Error
    from eagle3kit.data.prepare import parse_template_kwargs
    from eagle3kit.data.prepare import prepare as run_prepare
    from eagle3kit.model.loading import resolve_target

    tpl = None
    if o.chat_template is not None:
        try:
            tpl = Path(o.chat_template).read_text(encoding="utf-8")
        except OSError as e:
            raise Eagle3Error(
                f"{o.chat_template}: cannot read the chat template ({e.strerror or e})"
            ) from e
    kwargs = parse_template_kwargs(o.template_kwargs)
    with bar(not o.json_) as progress:
        r = run_prepare(
            o.inputs,
            resolve_target(o.target),  # zoo names, local dirs, hub ids
            o.output,
            max_length=o.max_length,
            strict=o.strict,
            chat_template=tpl,
            template_kwargs=kwargs,
            trust_remote_code=o.trust_remote_code,
            progress=progress,
        )
    if o.json_:
        emit_json(r)
    else:
        _render_prepare(r)


DataDir = Annotated[str, typer.Argument(help="A DATA directory written by `data prepare`.")]
DraftVocabSize = Annotated[
    int,
    typer.Option("--draft-vocab-size", min=1, help="N: how many target ids the drafter predicts."),
]
VocabOutput = Annotated[
    str,
    typer.Option("-o", "--output", help="The vocab file to write (safetensors: d2t, t2d)."),
]


def vocab(
    data: DataDir,
    draft_vocab_size: DraftVocabSize,
    output: VocabOutput,
    json_: JsonFlag = False,
) -> None:
    """Draft vocab = the N most frequent loss tokens (ties: lower id); d2t/t2d + coverage
    table."""
    from eagle3kit.cli._checks import check_output
    from eagle3kit.cli._render import emit_json
    from eagle3kit.data.vocab_counts import draft_vocab

    check_output(output, "-o", data, kind="file")
    r = draft_vocab(data, draft_vocab_size, output)
    if json_:
        emit_json(r)
    else:
        _render_vocab(r)


def register(app: typer.Typer) -> None:
    data_app = typer.Typer(
        help="Training data: prepare (chat template + loss masks), vocab, regenerate, capture.",
        no_args_is_help=True,
    )
    app.add_typer(data_app, name="data")
    data_app.command("prepare")(command(PrepareOptions, prepare))
    data_app.command("vocab")(vocab)

    from eagle3kit.cli import data_jobs

    data_jobs.register(data_app)
