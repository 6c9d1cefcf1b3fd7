"""Reading one typed field of a config.json, refused in one line naming the file and field."""

from __future__ import annotations

from typing import Any

from eagle3kit.core.errors import bad


def config_value(
    cfg: dict[str, Any], key: str, where: str, typ: type | tuple[type, ...], default: Any = ...
) -> Any:
    """`cfg[key]` checked as `typ` (a positive int for int fields other than token ids); its
    `default` when absent, else one line naming `where` and the field."""
    if key not in cfg or cfg[key] is None:
        if default is ...:
            tname = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
            raise bad(where, f"{key}: missing (expected {tname})")
        return default
    v = cfg[key]
    ok = isinstance(v, typ) and not (isinstance(v, bool) and typ in (int, float, (int, float)))
    if not ok:
        tname = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise bad(where, f"{key}: expected {tname}, found {v!r}")
    if typ is int and v <= 0 and key not in ("pad_token_id", "bos_token_id", "eos_token_id"):
        raise bad(where, f"{key}: expected a positive int, found {v}")
    return v
