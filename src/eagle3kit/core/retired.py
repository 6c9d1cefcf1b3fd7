"""Files written before the accept lengths got one name each (docs/ARCHITECTURE.md,
"Glossary") are still read: `current(doc)` gives a loaded artefact today's keys, by its kind,
and `current_row` does the same for a line of RUN/metrics.jsonl. The readers of files a user
keeps (`plan --from`, `report`, `probe --bench`, `train --resume`) call them once, right after
loading; nothing writes an old key.

Old key -> today's, per artefact (an old key is only read where today's is absent):

    train (summary, metrics line)  sim_accept_len -> tau_every_position,
                                   sim_accept_len_by_depth -> tau_every_position_by_depth,
                                   walk_accept_len -> tau_walk
    train_state meta               best_sim_accept_len -> best_tau_every_position
    eval offline                   accept_len -> tau_walk,
                                   all_positions.accept_len -> all_positions.tau_every_position
    eval online                    accept_len -> tau_online (its offline parts as offline)
    bench                          methods[].accept_len -> tokens_per_forward,
                                   methods[].tau -> tau_online; the demo's bench summary:
                                   accept_len -> tau_online
    bench-live                     accept_len -> tau_online (top level; per level: its
                                   acceptance, counters, per_request, suites),
                                   server_life_accept_len -> server_life_tau
    probe                          accept_len.{target,reference} -> tau_every_position.*,
                                   accept_len.online(.*.accept_len) -> tau_online(.*.tau_online),
                                   (aux.)acceptance.*.accept_len -> tau_every_position,
                                   aux.chosen.margin_accept_len -> margin_tau_every_position,
                                   break_even.break_even_accept_len -> break_even_tau,
                                   break_even.{target,reference}.accept_len -> tau
    probe-live                     accept_len -> tau_online; its bench as bench-live
    plan                           accept_len -> tau, break_even_accept_len -> break_even_tau,
                                   ideal_accept_len -> ideal_tau,
                                   best_depth_accept_len -> best_depth_tau
"""

from __future__ import annotations

from typing import Any

from eagle3kit.core.artifacts import kind_of

TRAIN = {
    "sim_accept_len": "tau_every_position",
    "sim_accept_len_by_depth": "tau_every_position_by_depth",
    "walk_accept_len": "tau_walk",
    "best_sim_accept_len": "best_tau_every_position",
}
PLAN = {
    "accept_len": "tau",
    "break_even_accept_len": "break_even_tau",
    "ideal_accept_len": "ideal_tau",
    "best_depth_accept_len": "best_depth_tau",
}


def _rename(d: Any, old: str, new: str) -> None:
    """Drop `old` from the dict `d`, its value kept as `new` unless `d` already has `new`."""
    if isinstance(d, dict) and old in d:
        value = d.pop(old)
        d.setdefault(new, value)


def _renames(d: Any, table: dict[str, str]) -> None:
    for old, new in table.items():
        _rename(d, old, new)


def current_row(row: dict[str, Any]) -> dict[str, Any]:
    """A RUN/metrics.jsonl line (or train summary, or train state meta) with today's keys."""
    _renames(row, TRAIN)
    return row


def _eval(doc: dict[str, Any]) -> None:
    online = doc.get("mode") == "online"
    _rename(doc, "accept_len", "tau_online" if online else "tau_walk")
    _rename(doc.get("all_positions"), "accept_len", "tau_every_position")
    for part in ("offline", "offline_same_answers"):
        if isinstance(doc.get(part), dict):
            _rename(doc[part], "accept_len", "tau_walk")
            _rename(doc[part].get("all_positions"), "accept_len", "tau_every_position")


def _bench(doc: dict[str, Any]) -> None:
    for m in doc.get("methods") or []:
        _rename(m, "accept_len", "tokens_per_forward")
        _rename(m, "tau", "tau_online")
    _rename(doc, "accept_len", "tau_online")  # the demo's bench summary


def _acceptance(acc: Any) -> None:
    _rename(acc, "accept_len", "tau_online")
    if isinstance(acc, dict):
        _rename(acc.get("counters"), "accept_len", "tau_online")
        _rename(acc.get("per_request"), "accept_len", "tau_online")


def _live(doc: dict[str, Any]) -> None:
    _rename(doc, "accept_len", "tau_online")
    for d in doc.get("deployments") or []:
        if not isinstance(d, dict):
            continue
        _rename(d, "server_life_accept_len", "server_life_tau")
        for lv in [x for x in d.get("levels") or [] if isinstance(x, dict)]:
            _acceptance(lv.get("acceptance"))
            for s in (lv.get("suites") or {}).values():
                _rename(s, "accept_len", "tau_online")


def _probe(doc: dict[str, Any]) -> None:
    old = doc.pop("accept_len", None)
    if isinstance(old, dict):
        doc.setdefault("tau_every_position", {k: old.get(k) for k in ("target", "reference")})
        online = old.get("online")
        for run in (online or {}).values() if isinstance(online, dict) else []:
            _rename(run, "accept_len", "tau_online")
        doc.setdefault("tau_online", online)
    aux = doc.get("aux") if isinstance(doc.get("aux"), dict) else {}
    for a in [*(doc.get("acceptance") or {}).values(), *(aux.get("acceptance") or {}).values()]:
        _rename(a, "accept_len", "tau_every_position")
    _rename(aux.get("chosen"), "margin_accept_len", "margin_tau_every_position")
    be = doc.get("break_even")
    _rename(be, "break_even_accept_len", "break_even_tau")
    for name in ("target", "reference"):
        _rename((be or {}).get(name), "accept_len", "tau")


def _probe_live(doc: dict[str, Any]) -> None:
    _rename(doc, "accept_len", "tau_online")  # {"new", "reference"}
    if isinstance(doc.get("bench"), dict):
        _live(doc["bench"])


def _plan(doc: dict[str, Any]) -> None:
    _renames(doc, PLAN)
    for row in (doc.get("targets") or []) + (doc.get("depths") or []):
        _rename(row, "accept_len", "tau")


_BY_KIND = {
    "eval": _eval,
    "bench": _bench,
    "bench-live": _live,
    "probe": _probe,
    "probe-live": _probe_live,
    "plan": _plan,
    "train": current_row,
}


def current(doc: Any) -> Any:
    """`doc` (a loaded eagle3kit JSON artefact) with today's keys, changed in place."""
    fix = _BY_KIND.get(kind_of(doc) or "")
    if fix is not None:
        fix(doc)
    return doc
