"""Load a target and a drafter that fit together (aux layers, vocabulary, hidden size)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eagle3kit.core.errors import bad


def resolve_target(name_or_path: str) -> str:
    """A model dir, a hub id, or a zoo member name (``dsv3-v2``, ``llama-v1-tiny``)."""
    if Path(name_or_path).expanduser().exists():
        return name_or_path
    from eagle3kit import zoo

    names = zoo.names()
    if name_or_path in names:
        return str(zoo.get(name_or_path))
    if name_or_path.endswith("-tiny") and name_or_path[: -len("-tiny")] in names:
        return str(zoo.get(name_or_path[: -len("-tiny")], size="tiny"))
    return name_or_path


def load_pair(
    target: str,
    drafter: str | None,
    *,
    device: str = "cpu",
    dtype: Any = "float32",
    trust_remote_code: bool = False,
) -> tuple[Any, Any]:
    """(TargetModel, Eagle3Drafter | None) on one device and dtype.

    The target captures the drafter's aux layers when its checkpoint records them; the drafter
    gets the target's input embedding when its checkpoint has none. Shapes that do not fit
    (vocabulary, hidden size of the aux states) are refused with the field named.
    """
    from eagle3kit.model.drafter import Eagle3Drafter
    from eagle3kit.model.target import TargetModel, _parse_dtype

    dt = _parse_dtype(dtype)
    d = None
    if drafter is not None:
        d = Eagle3Drafter.from_pretrained(drafter, device=device, dtype=dt)
    aux = d.spec.aux_layers if d is not None else None
    tm = TargetModel.from_pretrained(
        resolve_target(target),
        device=device,
        dtype=dt,
        aux_layers=aux,
        trust_remote_code=trust_remote_code,
    )
    if d is None:
        return tm, None
    if d.spec.vocab_size != tm.vocab_size:
        raise bad(
            f"{drafter}/config.json",
            f"vocab_size: expected the target's {tm.vocab_size}, found {d.spec.vocab_size}",
        )
    if d.spec.target_hidden_size != tm.hidden_size:
        raise bad(
            f"{drafter}/config.json",
            f"target_hidden_size: expected the target's {tm.hidden_size}, found {d.spec.target_hidden_size}",
        )
    if not d.embed_loaded:
        d.set_embedding(tm.embed_tokens.weight)
    return tm, d.eval()
