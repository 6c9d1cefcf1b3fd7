"""Error types. Exit codes (docs/ARCHITECTURE.md, conventions): 0 ok, 1 failed, 2 bad input."""

from __future__ import annotations


class Eagle3Error(Exception):
    """Bad input or usage: the CLI prints the message as one line on stderr and exits 2.

    Messages name the file and field, what was expected and what was found.
    """

    exit_code = 2


def bad(where: str, what: str) -> Eagle3Error:
    """`bad("ckpt/config.json", "hidden_size: expected an int, found 'abc'")`."""
    return Eagle3Error(f"{where}: {what}")
