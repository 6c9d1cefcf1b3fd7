"""`eagle3kit compat`: is this drafter compatible with that drafter (fine-tuning) or target
(serving)? The entry point; the two questions live in compat_drafters.py and
compat_target.py, the drafter-alone checks in checker.py, the result in findings.py.
"""

from __future__ import annotations

from eagle3kit.checkpoint.eagle3.compat_drafters import compare_drafters
from eagle3kit.checkpoint.eagle3.compat_target import MEANS, check_against_target
from eagle3kit.checkpoint.engines import rules as E
from eagle3kit.checkpoint.findings import CompatResult, Finding
from eagle3kit.checkpoint.inspection import is_drafter
from eagle3kit.checkpoint.io.hub_files import open_checkpoint
from eagle3kit.checkpoint.method_compat import check_method_against_target
from eagle3kit.checkpoint.methods import method_header_of
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.spec import DraftSpec

ENGINES = E.ENGINES
__all__ = ["MEANS", "CompatResult", "Finding", "captured_layers", "compat"]


def captured_layers(
    engine: str,
    spec: DraftSpec,
    layout: str,
    num_layers: int,
    *,
    family: str = "llama",
    version: E.Version | None = None,
) -> tuple[list[int], str]:
    """h-indices `engine` (at `version`, None = latest) captures for a drafter described only by
    its DraftSpec: ids as the file wrote them (SGLang layout: nested; vLLM: top-level)."""
    raw = spec.aux_layers_raw
    ids = {"top": raw if layout == "vllm" else None, "nested": raw if layout == "sglang" else None}
    cap = E.capture(engine, version, family, ids, num_layers)
    return cap.captures, cap.why


def compat(
    a: str, b: str, engine: str = "both", num_speculative_tokens: int | None = None
) -> CompatResult:
    """Compare two drafters (fine-tuning) or a drafter and a target (serving, per engine release).

    `engine`: sglang | vllm | both, each optionally @VERSION (`sglang@0.5.12`), or a comma list.
    `num_speculative_tokens`: the K to serve a DFlash drafter with (checked against its block)."""
    engines = E.parse_engines(engine)
    ca, cb = open_checkpoint(a), open_checkpoint(b)  # a target may be partial
    ma, mb = method_header_of(ca), method_header_of(cb)
    if ma and mb:
        raise Eagle3Error(
            f"{a} and {b}: a {ma.method} and a {mb.method} drafter; compat checks a "
            f"{ma.method} drafter against its target (comparing two is not supported)"
        )
    if ma or mb:
        head, target = (ma, cb) if ma else (mb, ca)
        if is_drafter(target):
            raise Eagle3Error(
                f"{target.source}: a drafter; compat checks a {head.method} drafter against "
                "its target (comparing it with another drafter is not supported)"
            )
        return check_method_against_target(head, target, engines, num_speculative_tokens)
    da, db = is_drafter(ca), is_drafter(cb)
    if da and db:
        return compare_drafters(ca, cb)
    if da or db:
        return (
            check_against_target(ca, cb, engines) if da else check_against_target(cb, ca, engines)
        )
    raise Eagle3Error(f"{a} and {b}: both are target models; compat needs at least one drafter")
