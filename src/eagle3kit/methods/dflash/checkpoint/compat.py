"""compat of a DFlash drafter against a target, per engine release: the layer ids each
release captures, sample_from_anchor, per-layer causality (the rules are data in
checkpoint/engines/methods.py; docs/formats.md "Newer methods: engine rules")."""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.engines import methods as M
from eagle3kit.checkpoint.engines import rules as E
from eagle3kit.checkpoint.engines.windows import dflash_window_findings
from eagle3kit.checkpoint.findings import Finding, error, warning
from eagle3kit.checkpoint.inspection import TargetInfo
from eagle3kit.checkpoint.method_compat import common_findings, engine_entry, not_served
from eagle3kit.checkpoint.methods import MethodHeader
from eagle3kit.methods.dflash.checkpoint.spec import DFlashSpec


def target_findings(head: MethodHeader, ti: TargetInfo, k: int | None) -> list[Finding]:
    """The drafter against the target alone: hidden size, mask token, layer ids, K."""
    spec = head.spec
    out = common_findings(spec.target_hidden_size, spec.mask_token_id, ti, "hidden_size")
    return out + _layers_findings(spec, ti, head.ckpt.config) + _k_findings(spec, k)


def engine_findings(
    sel: E.EngineSel, head: MethodHeader, ti: TargetInfo, family: str
) -> tuple[dict[str, Any], list[Finding]]:
    """One engine release's row and findings."""
    return _dflash_engine(sel, head, ti)


def _layers_findings(spec: DFlashSpec, ti: TargetInfo, config: dict[str, Any]) -> list[Finding]:
    out = []
    if spec.layout == "zlab" and "target_layer_ids" not in (config.get("dflash_config") or {}):
        out.append(
            warning(
                "dflash-no-ids",
                "dflash_config.target_layer_ids: missing; engines and eagle3kit guess "
                f"{list(spec.target_layer_ids)} (z-lab's default), which need not be the "
                "layers fc was trained on (sglang issue #37475)",
            )
        )
    too_far = [h for h in spec.aux_layers if h > ti.num_layers]
    if too_far:
        out.append(
            error(
                "layers-out-of-range",
                f"target_layer_ids {list(spec.target_layer_ids)}: h{too_far} past the "
                f"target's {ti.num_layers} layers",
            )
        )
    if spec.num_target_layers and spec.num_target_layers != ti.num_layers:
        out.append(
            warning(
                "num-target-layers",
                f"num_target_layers: the drafter was made for {spec.num_target_layers}"
                f" layers, the target has {ti.num_layers}",
            )
        )
    return out


def _k_findings(spec: DFlashSpec, k: int | None) -> list[Finding]:
    if k is None or k <= spec.num_proposals:
        return []
    return [
        error(
            "num-speculative-tokens",
            f"num_speculative_tokens: the drafter proposes {spec.num_proposals} per pass "
            f"(block {spec.block_size}{', sample_from_anchor' * spec.sample_from_anchor}),"
            f" found {k}",
        )
    ]


def _dflash_engine(sel: E.EngineSel, head: MethodHeader, ti: TargetInfo) -> tuple[dict, list]:
    spec: DFlashSpec = head.spec
    rule = M.dflash_id_rule(sel.name, sel.version, spec.layout)
    entry = engine_entry(sel, spec.aux_layers, [rule.source])
    if rule.capture == "not_served":
        return not_served(
            sel,
            entry,
            "does not serve this layout",
            f"{sel.label} does not serve a {spec.layout}-layout "
            f"DFlash drafter ({rule.source}); convert it with --to zlab",
        )
    ids = spec.target_layer_ids if spec.layout == "zlab" else spec.speculators_ids
    cap = M.dflash_captures(sel.name, sel.version, spec.layout, ids) or []
    key = (
        "dflash_config.target_layer_ids" if spec.layout == "zlab" else "aux_hidden_state_layer_ids"
    )
    how = "id x -> h[x+1]" if rule.capture == "plus1" else "id x -> h[x]"
    entry.update(captures=cap, why=f"{key} {list(ids)}, {how}")
    out = []
    if cap != list(spec.aux_layers):
        out.append(
            error(
                "dflash-ids",
                f"{key} {list(ids)}: {sel.label} captures h{cap}, the "
                f"drafter was trained on h{list(spec.aux_layers)} ({rule.source})",
                sel.name,
            )
        )
    return entry, out + _dflash_semantics(sel, head)


def _dflash_semantics(sel: E.EngineSel, head: MethodHeader) -> list[Finding]:
    spec: DFlashSpec = head.spec
    out = []
    anchor = M.method_rule(sel.name, sel.version, "dflash", "sample_from_anchor")
    if spec.sample_from_anchor and anchor:
        verb = (
            "refuses it at load"
            if anchor.value == "refused"
            else ("does not read it and drafts B - 1 tokens from the mask slots, one position late")
        )
        out.append(
            error(
                "sample-from-anchor",
                f"sample_from_anchor: true (B = "
                f"{spec.block_size} proposals); {sel.label} {verb} ({anchor.source})",
                sel.name,
            )
        )
    crule = M.method_rule(sel.name, sel.version, "dflash", "causal")
    if crule:
        runs = M.engine_causality(
            crule.value, head.ckpt.config, spec.layout, spec.num_hidden_layers
        )
        if runs != spec.causal:
            word = lambda c: ["bidirectional", "causal"][c]  # noqa: E731
            diff = [
                f"layer {i}: trained {word(a)}, run {word(b)}"
                for i, (a, b) in enumerate(zip(spec.causal, runs, strict=True))
                if a != b
            ]
            out.append(
                error(
                    "dflash-causality",
                    f"per-layer causality: {'; '.join(diff)} by {sel.label} ({crule.source})",
                    sel.name,
                )
            )
    out += dflash_window_findings(sel, spec, head.ckpt.config)
    types = spec.layer_types or ()
    mixed = 0 < sum(t == "sliding_attention" for t in types) < len(types)
    if mixed and sel.name == "vllm" and M.in_range(sel.version, (0, 33), None):
        out.append(
            warning(
                "v2-runner",
                "mixed sliding/full draft layers: vLLM needs "
                "VLLM_USE_V2_MODEL_RUNNER=1 (qwen3_dflash.py _resolve_layer_attention)",
                sel.name,
            )
        )
    return out
