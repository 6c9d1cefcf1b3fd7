"""The names of the training losses (train/losses.py computes them), torch-free: a config is
checked, and a dry run planned, without importing torch."""

from __future__ import annotations

from eagle3kit.core.errors import Eagle3Error

LOSSES = ("kl", "rkl", "jsd", "tv", "ce", "lk", "lk-hybrid")
TOKEN_LOSSES = ("kl", "ce")  # the losses a one-hot teacher (the data token) trains with


def check_loss(name: str, *, token: str | None = None) -> str:
    """`name` if it is one of LOSSES, else Eagle3Error naming them. `token`: the option that
    made the teacher the data token (a one-hot law), with which only TOKEN_LOSSES are
    defined (reverse KL, JSD, TV and LK of a one-hot law read log 0 off the token, or are CE
    again)."""
    if name not in LOSSES:
        raise Eagle3Error(f"--loss: expected one of {', '.join(LOSSES)}, found {name!r}")
    if token is not None and name not in TOKEN_LOSSES:
        raise Eagle3Error(
            f"--loss: expected kl or ce with {token} (the data token is the teacher: both are "
            f"its cross entropy), found {name!r}; the others need the target's law as teacher"
        )
    return name
