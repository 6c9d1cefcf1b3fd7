"""What `eagle3kit compat` answers: a CompatResult holding its findings (Finding).

A finding carries its severity, a stable code, a message naming the field, the expected and
the found value, and as fields (never as a message prefix) the engine it concerns (`engine`,
None for all) and, comparing two drafters, the drafter it concerns (`drafter`: "A" | "B").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eagle3kit.core.artifacts import stamp


@dataclass
class Finding:
    """One thing compat or convert found: severity (error | warning | info), a stable code,
    a message `field: expected ..., found ...`, the engine it concerns (None: every engine),
    the drafter it concerns in a drafter-drafter comparison ("A" | "B"), and the file it is
    about (`where`, for convert's one error line; not part of the JSON)."""

    severity: str
    code: str
    message: str
    engine: str | None = None
    drafter: str | None = None
    where: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "engine": self.engine,
        }
        if self.drafter is not None:
            doc["drafter"] = self.drafter
        return doc


def error(code: str, message: str, engine: str | None = None, where: str | None = None):
    return Finding("error", code, message, engine, where=where)


def warning(code: str, message: str, engine: str | None = None) -> Finding:
    return Finding("warning", code, message, engine)


def info(code: str, message: str, engine: str | None = None) -> Finding:
    return Finding("info", code, message, engine)


PROBE = "`eagle3kit probe` measures acceptance under each reading and settles it"


@dataclass
class CompatResult:
    mode: str  # drafter-drafter | drafter-target
    a: str
    b: str
    findings: list[Finding] = field(default_factory=list)
    config_diff: list[dict[str, Any]] = field(default_factory=list)
    tensors: list[dict[str, Any]] = field(default_factory=list)
    engines: dict[str, Any] = field(default_factory=dict)
    writer: dict[str, Any] | None = None
    drop_in: bool = False

    @property
    def compatible(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def errors_for(self, engine: str) -> int:
        """Errors that concern `engine`: its own and those concerning every engine."""
        return sum(f.severity == "error" and f.engine in (None, engine) for f in self.findings)

    @property
    def verdict(self) -> str:
        n_err = sum(f.severity == "error" for f in self.findings)
        if self.mode == "drafter-drafter":
            if self.drop_in and self.compatible:
                return "drop-in compatible for fine-tuning"
            return f"not compatible for fine-tuning ({n_err} error{'s' * (n_err != 1)})"
        parts = []
        for eng, e in self.engines.items():
            n = self.errors_for(eng)
            amb = any(f.code == "aux-ambiguous" and f.engine == eng for f in self.findings)
            ok = "serves it correctly" + (
                " only under one reading of its ids (run `eagle3kit probe`)" if amb else ""
            )
            ok = ok if not n else f"incompatible ({n} error{'s' * (n != 1)})"
            parts.append(f"{e['label']}: {ok}")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        doc = {
            "compatible": self.compatible,
            "verdict": self.verdict,
            "mode": self.mode,
            "a": self.a,
            "b": self.b,
            "findings": [f.to_json() for f in self.findings],
            "config_diff": self.config_diff,
            "tensors": self.tensors,
            "engines": self.engines,
            "writer": self.writer,
        }
        return stamp(doc, "compat")


def trained_on_words(t: list[int] | dict[str, list[int]] | None) -> str:
    """The h-indices a drafter was trained on (an engine entry's `trained_on`), in words; with
    an unknown writer both readings: its ids are layer outputs, h[x+1], or h-indices, h[x]."""
    if t is None:
        return "unknown (no ids)"
    if isinstance(t, dict):
        return (
            f"h{t['layer_output']} if its ids are layer outputs, h{t['h_index']} if they are "
            "h-indices (writer unknown)"
        )
    return str(t)
