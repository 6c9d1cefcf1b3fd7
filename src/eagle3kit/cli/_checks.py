"""Option checks shared by the CLI verbs: each refuses with one line naming the option.

They run before any model is loaded or file written, so a refused command costs nothing and
leaves everything as it was. Numeric ranges use typer's own ``min=``/``max=`` (click names the
option in its usage error); what a range cannot say lives here.
"""

from __future__ import annotations

from pathlib import Path

import typer

from eagle3kit.core.errors import bad


def check_device(value: str | None) -> str | None:
    """A typer callback for ``--device``: a device string torch understands (cpu, cuda:1, mps)."""
    if value is None or value == "cpu":
        return value
    import torch

    try:
        dev = torch.device(value)
    except (RuntimeError, ValueError):
        raise bad("--device", f"expected cpu, cuda, cuda:N, mps ..., found {value!r}") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise bad("--device", f"{value}: no CUDA device here (torch {torch.__version__})")
        if dev.index is not None and dev.index >= n:
            raise bad("--device", f"{value}: this machine has {n} CUDA device(s), 0..{n - 1}")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise bad("--device", f"{value}: MPS is not available here")
    return value


def check_output(output: str | Path, option: str, *inputs: str | Path | None, kind: str) -> None:
    """``output`` is not one of ``inputs`` nor inside one of them, and has the right kind.

    ``kind``: "dir" (a directory we create or resume; an existing file is refused) or "file"
    (an existing directory is refused).
    """
    out = Path(output).expanduser()
    if kind == "dir" and out.is_file():
        raise bad(f"{option} {output}", "expected a directory, found a file")
    if kind == "file" and out.is_dir():
        raise bad(f"{option} {output}", "expected a file, found a directory")
    res = out.resolve()
    for i in inputs:
        if i is None or not Path(i).expanduser().exists():
            continue
        src = Path(i).expanduser().resolve()
        if res == src or (src.is_dir() and src in res.parents):
            where = "is" if res == src else "is inside"
            raise bad(f"{option} {output}", f"{where} the input {i}; write it elsewhere")


def above_zero(param: typer.CallbackParam, value: float | None) -> float | None:
    """A typer callback: a number > 0 (typer's ``min=`` cannot say "open at 0")."""
    if value is not None and not value > 0:
        raise bad(max(param.opts, key=len), f"expected a number > 0, found {value}")
    return value


def top_p(param: typer.CallbackParam, value: float) -> float:
    """A typer callback for ``--top-p``: 0 < p <= 1."""
    if not 0 < value <= 1:
        raise bad(max(param.opts, key=len), f"expected 0 < p <= 1, found {value}")
    return value


def heldout_amount(value: str | None) -> float | int | None:
    """A typer callback for ``--heldout``: a count of samples ("2": int) or a fraction of them
    ("0.05", "1.0": float), as `data.prepared.split_ids` takes them."""
    if value is None:
        return None
    text = str(value).strip()
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is not None:
        if n < 1:
            raise bad("--heldout", f"expected a count >= 1 or a fraction in (0, 1], found {text}")
        return n
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if not 0.0 < x <= 1.0:
        raise bad(
            "--heldout", f"expected a count (8) or a fraction in (0, 1] (0.05), found {text!r}"
        )
    return x
