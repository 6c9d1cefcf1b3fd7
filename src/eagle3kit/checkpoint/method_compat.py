"""compat for a drafter its method's part reads (DFlash, P-EAGLE, ...) against a target, per
engine release: what every such drafter is checked for, then its part's own rules.

The rules are data (checkpoint/engines/methods.py;
docs/formats.md "Newer methods: engine rules"); each method's checkpoint part applies them
(`target_findings`, `engine_findings`). As
for EAGLE-3, anything that makes an engine run the drafter other than as it was trained
(other layers, other causality, other slot count) is an error: it costs acceptance silently;
so is a configuration the engine refuses at load.
"""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.engines import methods as M
from eagle3kit.checkpoint.engines import rules as E
from eagle3kit.checkpoint.findings import CompatResult, Finding, error, info
from eagle3kit.checkpoint.inspection import TargetInfo, target_info
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.checkpoint.methods import MethodHeader, tensor_findings
from eagle3kit.core import registry


def common_findings(target_hidden: int, mask: int, ti: TargetInfo, what: str) -> list[Finding]:
    """The drafter reads the target's hidden states and masks with a token of its vocabulary:
    both must fit the target."""
    out = []
    if target_hidden != ti.hidden_size:
        out.append(
            error(
                "hidden-size",
                f"{what}: the target's hidden_size is {ti.hidden_size}, "
                f"the drafter expects {target_hidden}",
            )
        )
    if mask >= ti.vocab_size:
        out.append(
            error(
                "mask-token",
                f"mask_token_id: expected a row of the target's embedding "
                f"(< {ti.vocab_size}), found {mask}",
            )
        )
    return out


def engine_entry(sel: E.EngineSel, trained_on: Any, sources: list[str]) -> dict[str, Any]:
    """An engine's row of the report (captures and why are added once known)."""
    return {
        "label": sel.label,
        "version": sel.version_text,
        "trained_on": list(trained_on),
        "sources": sources,
    }


def not_served(sel: E.EngineSel, entry: dict, why: str, message: str) -> tuple[dict, list]:
    """The row and the one error of an engine that does not serve this drafter."""
    entry.update(captures=[], why=why)
    return entry, [error("not-served", message, sel.name)]


def check_method_against_target(
    head: MethodHeader, t: Checkpoint, engines: list[E.EngineSel], k: int | None = None
) -> CompatResult:
    """The serving question for a drafter its method's part reads, on target `t`."""
    part = registry.part(head.method, "checkpoint")
    ti = target_info(t)
    res = CompatResult("drafter-target", head.source, t.source)
    res.findings += tensor_findings(head) + [
        info("method", f"{head.method} drafter, {head.layout} layout")
    ]
    res.findings += [info("note", n) for n in head.notes]
    res.findings += part.target_findings(head, ti, k)
    family = E.target_family(t.config)
    for sel in engines:
        lacks = M.release_lacks(sel.name, sel.version, sel.label, head.method)
        if lacks:  # a release before the method's first: nothing else of it is read
            entry, found = not_served(sel, engine_entry(sel, [], []), "predates the method", lacks)
        else:
            entry, found = part.engine_findings(sel, head, ti, family)
        res.engines[sel.name] = entry
        res.findings += found
    return res
