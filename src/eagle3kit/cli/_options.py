"""Option declarations shared by several verbs, as `typing.Annotated` aliases (typer's style):
`json_: JsonFlag = False`. The default goes after `=` in the command's signature.

Each alias is one option with one help text; a verb whose option says something else
declares its own.
"""

from __future__ import annotations

from typing import Annotated

import typer

from eagle3kit.cli._checks import check_device

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document.")]
Device = Annotated[str, typer.Option("--device", callback=check_device)]
Seed = Annotated[int, typer.Option("--seed")]
TrustRemoteCode = Annotated[bool, typer.Option("--trust-remote-code")]
