"""Option declarations shared by several verbs, as `typing.Annotated` aliases (typer's style):
`json_: JsonFlag = False`. The default goes after `=` in the command's signature.

Each alias is one option with one help text; a verb whose option says something else
declares its own. The verbs built from an options object (cli/_command.py) share help texts
from here instead (`BY_LENGTH_HELP` ...).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from eagle3kit.cli._checks import check_device

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]
Device = Annotated[str, typer.Option("--device", callback=check_device)]
Seed = Annotated[int, typer.Option("--seed")]
TrustRemoteCode = Annotated[bool, typer.Option("--trust-remote-code")]

# Context length as a dimension (eval --by-length, bench --context-lengths, probe --by-length):
# the help of the options objects' fields (cli/decode_options.py, cli/probe_options.py)
BY_LENGTH = "--by-length"
BY_LENGTH_HELP = "Per context bucket: lengths like 128,512,1K,2K (the option alone: those four)."
CONTEXT_LENGTHS_HELP = (
    "Prompts built to each context length (e.g. 128,512,1K,2K); every figure per length."
)
DOCUMENTS_HELP = (
    "With --by-length/--context-lengths: long documents or conversations (JSONL) cut to each "
    "length. Default: the zoo's held-out stdlib files, then a request."
)
PROMPT_SET_HELP = (
    "all, A or B: the documents' disjoint halves (seeded by --seed), to check a prediction on "
    "prompts it was not made from."
)


def optional_value(args: list[str], option: str, value: str) -> list[str]:
    """`option` given with no value (last, or before another option) takes `value`."""
    out: list[str] = []
    for i, a in enumerate(args):
        out.append(a)
        if a == option and (i + 1 == len(args) or args[i + 1].startswith("-")):
            out.append(value)
    return out


class LengthsCommand(TyperCommand):
    """A verb whose `--by-length` may come without a value (then the default lengths)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, optional_value(list(args), BY_LENGTH, "default"))
