"""The report's inputs: every JSON under the run directories (or given as a file), sorted by
its ``"kind"`` (core/artifacts.py). A file the report does not render is named in
``Found.skipped`` with the reason; nothing is recognised by the keys it happens to hold.

Rendered: probe, probe-live, bench (in-process), bench-live, train (RUN/summary.json, with
RUN/metrics.jsonl, RUN/state/state.json, RUN/provenance.json and RUN/config.toml beside it),
plan and eval. Read but not rendered:
convert (it names the converted drafter a live bench may serve, report/story.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.core.artifacts import kind_of
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.retired import current, current_row

MAX_JSON_BYTES = 20 * 2**20
# JSON that lives in run directories but is not ours to classify (model and tokenizer files)
OTHER_JSON = {
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "model.safetensors.index.json",
}
RENDERED = ("probe", "probe-live", "bench", "bench-live", "train", "plan", "eval")


@dataclass
class Found:
    """The artefacts of the run directories, each with its citation (relative path)."""

    probes: list[tuple[str, dict]] = field(default_factory=list)
    benches: list[tuple[str, dict]] = field(default_factory=list)
    runs: list[tuple[str, dict, list[dict], dict]] = field(
        default_factory=list
    )  # summary, metrics, config
    plans: list[tuple[str, dict]] = field(default_factory=list)
    lives: list[tuple[str, dict]] = field(default_factory=list)  # bench --url --json
    evals: list[tuple[str, dict]] = field(default_factory=list)
    probe_lives: list[tuple[str, dict]] = field(default_factory=list)  # probe --url --json
    converts: list[tuple[str, dict]] = field(default_factory=list)
    length_benches: list[tuple[str, dict]] = field(default_factory=list)  # bench with by_length
    # a train run's cite -> (RUN/provenance.json, RUN/config.toml's text), each None if absent
    provenance: dict[str, tuple[dict | None, str | None]] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)  # cite -> its start, else mtime
    given: dict[str, int] = field(default_factory=dict)  # cite -> its place on the command line
    skipped: list[str] = field(default_factory=list)  # "path: why" of JSON not rendered
    other: list[str] = field(default_factory=list)  # model and tokenizer files passed over

    def any_rendered(self) -> bool:
        return any(
            (
                self.probes,
                self.benches,
                self.runs,
                self.plans,
                self.lives,
                self.evals,
                self.probe_lives,
            )
        )


def read_json(p: Path) -> tuple[Any, str | None]:
    """(the document, None) or (None, why it cannot be read)."""
    try:
        if p.stat().st_size > MAX_JSON_BYTES:
            return None, f"larger than {MAX_JSON_BYTES >> 20} MiB"
        return current(json.loads(p.read_text())), None  # today's keys (core/retired.py)
    except (OSError, UnicodeDecodeError) as e:
        return None, f"unreadable ({type(e).__name__})"
    except ValueError as e:
        return None, f"invalid JSON ({e})"


def metrics_rows(path: Path) -> list[dict]:
    rows = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(current_row(json.loads(line)))
            except ValueError:
                continue  # a torn last line of a killed run
    return rows


def lookup_summary(doc: dict) -> dict | None:
    """The row of a model-free method a bench ran beside the drafter (prompt lookup: its
    decoder is core/registry.py's `decoders` of a method without a drafter), else None."""
    from eagle3kit.core import registry

    for m in doc.get("methods") or []:
        rec = registry.of_decoder(m.get("name")) if isinstance(m, dict) else None
        if rec is not None and rec.model_free and "tau_online" in m:
            return {
                "label": rec.display,
                "spec_tps": m["tokens_per_s"]["median"],
                "speedup": m["speedup"],
                "tau_online": m["tau_online"],
            }
    return None


def bench_summary(doc: dict) -> dict | None:
    """The report's bench keys from an `eagle3kit bench --json` document (greedy + chain/tree)."""
    rows = {m.get("name"): m for m in doc.get("methods") or [] if isinstance(m, dict)}
    g, c = rows.get("greedy"), rows.get("chain") or rows.get("tree")
    if not g or not c or "tau_online" not in c:
        return None
    return {
        "label": c["name"],
        "baseline_tps": g["tokens_per_s"]["median"],
        "spec_tps": c["tokens_per_s"]["median"],
        "speedup": c["speedup"],
        "tau_online": c["tau_online"],
        "cycle_ms": c["cycle_ms"],
        "depth": c["depth"],
        "per_position_acceptance": c["per_position_acceptance"],
    }


def _files(src: str | Path) -> tuple[Path, list[Path]]:
    """(the root citations are relative to, the JSON files): a run directory or one file."""
    root = Path(src)
    if root.is_file():
        return root.parent, [root]
    if not root.is_dir():
        raise Eagle3Error(
            f"report: {src}: expected a run directory or a JSON file, found no such directory"
        )
    return root, sorted(root.rglob("*.json"))


def collect(sources: list[str | Path]) -> Found:
    """Find the JSON artefacts under ``sources`` and sort them by kind."""
    f = Found()
    for i, src in enumerate(sources):
        root, paths = _files(src)
        for p in paths:
            _classify(f, p, str(p.relative_to(root)))
        if Path(src).is_file():
            f.given[str(Path(src).relative_to(root))] = i
    order = {"stale": 0, "finetuned": 1, "scratch": 2}  # then in the order they were run
    f.benches.sort(key=lambda cb: (order.get(cb[1].get("role"), 3), f.times.get(cb[0]), cb[0]))
    if not f.any_rendered():
        why = f" (skipped: {'; '.join(f.skipped[:3])})" if f.skipped else ""
        raise Eagle3Error(
            f"report: {', '.join(map(str, sources))}: no probe, bench, train or plan JSON "
            f"found (nor eval or live JSON){why}"
        )
    return f


def _train_state(f: Found, p: Path, cite: str) -> bool:
    """RUN/state/state.json is read with RUN/summary.json (the batch size): True when ``p`` is
    one (named as skipped when its run has no summary yet)."""
    if p.name != "state.json" or p.parent.name != "state":
        return False
    if not (p.parent.parent / "summary.json").is_file():
        f.skipped.append(f"{cite}: a train run's state without its summary.json (not finished)")
    return True


def _classify(f: Found, p: Path, cite: str) -> None:
    """Add the artefact at ``p`` to its list by its kind; name it in f.skipped otherwise."""
    doc, unreadable = read_json(p)
    kind = kind_of(doc)
    if kind in (None, "train_state") and _train_state(f, p, cite):
        return
    if kind == "provenance":
        if not (p.parent / "summary.json").is_file():
            f.skipped.append(f"{cite}: a train run's provenance without its summary.json")
        return  # read with its run's summary.json
    if kind is None:
        if p.name in OTHER_JSON:
            f.other.append(cite)
        else:
            why = unreadable or ("not a JSON object" if not isinstance(doc, dict) else "")
            f.skipped.append(f"{cite}: {why or 'no eagle3kit kind'}")
        return
    f.times[cite] = _started(doc) or p.stat().st_mtime
    _add(f, kind, doc, p, cite)


def _started(doc: dict) -> float | None:
    """The run's own start time (bench --url writes "started", UTC), else None: the file's."""
    import calendar
    import time

    try:
        return float(calendar.timegm(time.strptime(doc["started"], "%Y-%m-%dT%H:%M:%SZ")))
    except (KeyError, TypeError, ValueError):
        return None


def _add(f: Found, kind: str, doc: dict, p: Path, cite: str) -> None:
    if kind == "bench":
        summary = doc if "spec_tps" in doc else bench_summary(doc)
        if summary is None:
            f.skipped.append(f"{cite}: a bench without a speculative method")
        else:
            f.benches.append((cite, {**summary, "lookup": lookup_summary(doc)}))
            if doc.get("by_length"):
                f.length_benches.append((cite, doc))
    elif kind == "train":
        state = read_json(p.parent / "state" / "state.json")[0] or {}
        f.runs.append(
            (cite, doc, metrics_rows(p.parent / "metrics.jsonl"), state.get("config") or {})
        )
        prov = read_json(p.parent / "provenance.json")[0]
        try:
            config = (p.parent / "config.toml").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            config = None
        if prov is not None or config is not None:
            f.provenance[cite] = (prov if isinstance(prov, dict) else None, config)
    else:
        lists = {
            "probe": f.probes,
            "plan": f.plans,
            "bench-live": f.lives,
            "eval": f.evals,
            "probe-live": f.probe_lives,
            "convert": f.converts,
        }
        if kind in lists:
            lists[kind].append((cite, doc))
        if kind not in RENDERED:
            reason = (
                "read only to name the converted drafter a live bench serves"
                if kind == "convert"
                else "not part of the report"
            )
            f.skipped.append(f"{cite}: kind eagle3kit.{kind}: {reason}")
