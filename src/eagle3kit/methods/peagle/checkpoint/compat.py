"""compat of a P-EAGLE drafter against a target, per engine release: which configs each
release serves, the architectures it registers, mask_hidden's width, the aux layers it
captures (the rules are data in checkpoint/engines/methods.py;
docs/formats.md "Newer methods: engine rules")."""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.engines import methods as M
from eagle3kit.checkpoint.engines import rules as E
from eagle3kit.checkpoint.findings import Finding, error
from eagle3kit.checkpoint.inspection import TargetInfo
from eagle3kit.checkpoint.method_compat import common_findings, engine_entry, not_served
from eagle3kit.checkpoint.methods import MethodHeader
from eagle3kit.methods.peagle.checkpoint.spec import PEagleSpec


def target_findings(head: MethodHeader, ti: TargetInfo, k: int | None) -> list[Finding]:
    """The drafter against the target alone: hidden size and mask token."""
    d = head.spec.draft
    return common_findings(d.target_hidden_size, head.spec.mask_token_id, ti, "target_hidden_size")


def engine_findings(
    sel: E.EngineSel, head: MethodHeader, ti: TargetInfo, family: str
) -> tuple[dict[str, Any], list[Finding]]:
    """One engine release's row and findings."""
    return _peagle_engine(sel, head, ti, family)


def _peagle_load_findings(sel: E.EngineSel, head: MethodHeader, served: str) -> list[Finding]:
    """What a vLLM release that serves P-EAGLE refuses at load: the config form, the
    architecture, a mask_hidden of the wrong width."""
    spec: PEagleSpec = head.spec
    out = []
    if spec.layout == "speculators" and served == "native":
        out.append(
            error(
                "peagle-config",
                f"speculators_model_type 'peagle': {sel.label} has no "
                "such speculators algorithm; convert it with --to vllm",
                sel.name,
            )
        )
    arch = (head.ckpt.config.get("architectures") or ["?"])[0]
    looked = M.flat_config_arch(arch)
    if spec.layout == "vllm" and looked not in M.peagle_archs(sel.version):
        renamed = (
            f" (a flat config's {arch!r} is looked up as {looked!r}: EAGLEConfig's "
            "prefix, vllm transformers_utils/configs/eagle.py)"
            if looked != arch
            else ""
        )
        out.append(
            error(
                "architecture",
                f"architectures: {sel.label} registers "
                f"{list(M.peagle_archs(sel.version))}, found {arch!r}{renamed}; "
                "convert it with --to vllm",
                sel.name,
            )
        )
    d = spec.draft
    full = d.draft_vocab_size == d.vocab_size
    refuses = sel.name == "vllm" and E.vllm_refuses_full_vocab_d2t(sel.version)
    if "d2t" in head.names and full and refuses:
        out.append(
            error(
                "engine-refuses",
                f"d2t: a full-vocabulary drafter ({d.vocab_size} of {d.vocab_size}) carrying "
                f"d2t fails to load in {sel.label} (no draft_id_to_target_id parameter then; "
                f"{E.VLLM_FULL_VOCAB_D2T_SOURCE})",
                sel.name,
            )
        )
    width = M.method_rule(sel.name, sel.version, "peagle", "mask_hidden_width")
    if width and width.value == "draft3" and spec.mask_hidden_size != 3 * spec.draft.hidden_size:
        out.append(
            error(
                "mask-hidden",
                f"mask_hidden: {sel.label} allocates 3 x hidden_size = "
                f"{3 * spec.draft.hidden_size} values, the drafter has "
                f"{spec.mask_hidden_size} ({width.source})",
                sel.name,
            )
        )
    return out


def _peagle_engine(sel: E.EngineSel, head: MethodHeader, ti: TargetInfo, family: str):
    spec: PEagleSpec = head.spec
    served = M.method_rule(sel.name, sel.version, "peagle", "served")
    entry = engine_entry(sel, spec.draft.aux_layers or [], [served.source] if served else [])
    if served is None or served.value == "no":
        return not_served(
            sel,
            entry,
            "does not serve P-EAGLE",
            f"{sel.label} does not serve P-EAGLE (parallel "
            f"drafting; {served.source if served else 'no rule'})",
        )
    out = _peagle_load_findings(sel, head, served.value)
    ids = {
        "top": spec.draft.aux_layers_raw if spec.layout == "vllm" else spec.draft.aux_layers,
        "nested": None,
    }
    cap = E.capture(sel.name, sel.version, family, ids, ti.num_layers)
    entry.update(captures=cap.captures, why=cap.why)
    if spec.draft.aux_layers and cap.captures != list(spec.draft.aux_layers):
        out.append(
            error(
                "aux-mismatch",
                f"{sel.label} captures h{cap.captures}, the drafter was "
                f"trained on h{list(spec.draft.aux_layers)}",
                sel.name,
            )
        )
    return entry, out
