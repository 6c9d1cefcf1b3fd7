"""What a running server is and says about itself: engine, version, speculative settings,
and its spec-decode counters (vLLM `/metrics`), read so that a run can diff them.

Detection, in order: SGLang's `GET /server_info` (or the older `/get_server_info`) is a flat
JSON of its ServerArgs with `speculative_algorithm`, `internal_states` and `version`; vLLM's
`/v1/models` cards say `owned_by: "vllm"` (SGLang's say `"sglang"`), `GET /version` gives
vLLM's version, and `/metrics` names start with `vllm:` or `sglang:`. vLLM exposes no
speculative config outside dev mode, so its speculation is read from `/metrics`: the
`vllm:spec_decode_*` counters exist only when a speculative config is set, with one
`position` label value per speculative token (vllm/v1/spec_decode/metrics.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from eagle3kit.core import registry
from eagle3kit.live.client import Deadline, ServerFault, get_json, get_text

VLLM_SPEC = "vllm:spec_decode_"
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text exposition -> {sample name: [(labels, value)]}; comments skipped."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        out.setdefault(m.group(1), []).append((labels, value))
    return out


@dataclass
class SpecCounters:
    """vLLM's cumulative spec-decode counters, summed over the `engine` (DP rank) label."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: list[float] = field(default_factory=list)

    def minus(self, before: SpecCounters) -> SpecCounters:
        k = max(len(self.per_pos), len(before.per_pos))
        a = self.per_pos + [0.0] * (k - len(self.per_pos))
        b = before.per_pos + [0.0] * (k - len(before.per_pos))
        return SpecCounters(
            self.drafts - before.drafts,
            self.draft_tokens - before.draft_tokens,
            self.accepted - before.accepted,
            [x - y for x, y in zip(a, b, strict=True)],
        )

    def plus(self, other: SpecCounters) -> SpecCounters:
        neg = SpecCounters(-other.drafts, -other.draft_tokens, -other.accepted)
        neg.per_pos = [-x for x in other.per_pos]
        return self.minus(neg)


def _total(samples, name: str) -> float:
    return sum(v for _, v in samples.get(name, []))


def vllm_counters(text: str) -> SpecCounters | None:
    """The spec-decode counters of one `/metrics` scrape; None when there are none."""
    s = parse_prometheus(text)
    drafts = VLLM_SPEC + "num_drafts_total"
    if drafts not in s:
        return None
    per: dict[int, float] = {}
    for labels, v in s.get(VLLM_SPEC + "num_accepted_tokens_per_pos_total", []):
        if labels.get("position", "").isdigit():
            i = int(labels["position"])
            per[i] = per.get(i, 0.0) + v
    return SpecCounters(
        _total(s, drafts),
        _total(s, VLLM_SPEC + "num_draft_tokens_total"),
        _total(s, VLLM_SPEC + "num_accepted_tokens_total"),
        [per.get(i, 0.0) for i in range(max(per) + 1)] if per else [],
    )


@dataclass
class ServerInfo:
    url: str
    engine: str  # "sglang" | "vllm" | "unknown"
    version: str | None = None
    model: str | None = None
    speculative: dict[str, Any] | None = None  # algorithm, steps, topk, draft tokens, draft path
    has_metrics: bool = False
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "engine": self.engine,
            "version": self.version,
            "model": self.model,
            "speculative": self.speculative,
            "metrics_endpoint": self.has_metrics,
            "notes": list(self.notes),
        }


def _sglang_info(url: str, deadline: Deadline) -> dict | None:
    for path in ("/server_info", "/get_server_info"):
        doc = get_json(url, path, deadline)
        if isinstance(doc, dict) and ("speculative_algorithm" in doc or "internal_states" in doc):
            return doc
    return None


def sglang_method(algo: str, draft: str | None, model: str | None) -> str | None:
    """eagle3kit's method name for SGLang's `speculative_algorithm` (docs/live.md; the map is
    core/registry.py's): NEXTN is rewritten to EAGLE at startup and a DeepSeek-style target's
    draft path defaults to its model path, so EAGLE/EAGLE3 drafting from the model itself is its
    MTP head."""
    found = registry.from_engine("sglang", algo, draft_is_target=bool(draft) and draft == model)
    return found.name if found else None


def vllm_method(spec: dict) -> str | None:
    """eagle3kit's method name for vLLM's `speculative_config` (`"method"`, and
    `"parallel_drafting": true` for P-EAGLE; older MTP names end in `_mtp`), by
    core/registry.py's map."""
    flags = {"parallel_drafting": spec.get("parallel_drafting")}
    found = registry.from_engine("vllm", str(spec.get("method") or ""), flags)
    return found.name if found else None


def sglang_speculative(doc: dict) -> dict[str, Any] | None:
    """The speculative settings in SGLang's server info (None: no speculation)."""
    algo = doc.get("speculative_algorithm")
    if not algo:
        return None
    draft = doc.get("speculative_draft_model_path")
    return {
        "algorithm": algo,
        "method": sglang_method(str(algo), draft, doc.get("model_path")),
        "num_steps": doc.get("speculative_num_steps"),
        "topk": doc.get("speculative_eagle_topk"),
        "num_draft_tokens": doc.get("speculative_num_draft_tokens"),
        "draft_model": draft,
        "source": "server_info",
    }


def sglang_life_tau(doc: dict) -> float | None:
    """Mean of `internal_states[].avg_spec_accept_length`: CUMULATIVE over the server's life
    (every request since start), never this run's tau."""
    vals = [
        s["avg_spec_accept_length"]
        for s in doc.get("internal_states") or []
        if isinstance(s, dict) and isinstance(s.get("avg_spec_accept_length"), int | float)
    ]
    return sum(vals) / len(vals) if vals else None


def _model_card(url: str, deadline: Deadline) -> tuple[str | None, str | None]:
    doc = get_json(url, "/v1/models", deadline)
    cards = doc.get("data") if isinstance(doc, dict) else None
    if not cards or not isinstance(cards[0], dict):
        return None, None
    return cards[0].get("id"), cards[0].get("owned_by")


def _vllm_speculative(metrics: str | None, k_hint: int | None) -> dict[str, Any] | None:
    c = vllm_counters(metrics) if metrics else None
    if c is None:
        return None
    return {
        "algorithm": "on (vllm:spec_decode_* counters present)",
        "num_steps": len(c.per_pos) or k_hint,  # num_speculative_tokens
        "topk": 1,
        "num_draft_tokens": None,
        "draft_model": None,
        "source": "/metrics",
    }


def _vllm_dev_config(url: str, deadline: Deadline) -> dict[str, Any] | None:
    """`speculative_config` from `/server_info?config_format=json`, which vLLM serves only
    with VLLM_SERVER_DEV_MODE=1 (method, num_speculative_tokens, model)."""
    doc = get_json(url, "/server_info?config_format=json", deadline)
    cfg = doc.get("vllm_config") if isinstance(doc, dict) else None
    spec = cfg.get("speculative_config") if isinstance(cfg, dict) else None
    if not isinstance(spec, dict) or not spec.get("num_speculative_tokens"):
        return None
    k = spec["num_speculative_tokens"]
    return {
        "algorithm": spec.get("method"),
        "method": vllm_method(spec),
        "parallel_drafting": bool(spec.get("parallel_drafting")),
        "num_steps": k,
        "topk": 1,
        "num_draft_tokens": None,
        "draft_model": spec.get("model"),
        "source": "/server_info (VLLM_SERVER_DEV_MODE)",
    }


def detect(url: str, deadline: Deadline) -> ServerInfo:
    """Engine, version, model and speculative settings of the server at `url`."""
    model, owner = _model_card(url, deadline)
    doc = None if owner == "vllm" else _sglang_info(url, deadline)
    metrics = get_text(url, "/metrics", deadline)
    if doc is not None or owner == "sglang":
        info = ServerInfo(url, "sglang", model=model, has_metrics=metrics is not None)
        if doc is not None:
            info.version = doc.get("version")
            info.model = info.model or doc.get("model_path")
            info.speculative = sglang_speculative(doc)
        else:
            info.notes.append("no /server_info or /get_server_info: speculative settings unknown")
        return info
    engine = "vllm" if owner == "vllm" or (metrics and "vllm:" in metrics) else "unknown"
    info = ServerInfo(url, engine, model=model, has_metrics=metrics is not None)
    if engine == "vllm":
        ver = get_json(url, "/version", deadline)
        info.version = ver.get("version") if isinstance(ver, dict) else None
        info.speculative = _vllm_dev_config(url, deadline) or _vllm_speculative(metrics, None)
        if metrics is None:
            info.notes.append("no /metrics: speculation and run counters unknown")
    if model is None:
        raise ServerFault(f"{url}: no model listed at /v1/models (not an OpenAI server?)")
    return info


def sglang_state(url: str, deadline: Deadline) -> dict | None:
    """SGLang's server info now (for the cumulative acceptance before/after a run)."""
    return _sglang_info(url, deadline)
