"""compat for DFlash and P-EAGLE drafters against a target, per engine release.

The rules are engines_methods.py's (docs/formats.md "Newer methods: engine rules"). As for
EAGLE-3, anything that makes an engine run the drafter other than as it was trained (other
layers, other causality, other slot count) is an error: it costs acceptance silently; so is a
configuration the engine refuses at load.
"""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.engines import methods as M
from eagle3kit.checkpoint.engines import rules as E
from eagle3kit.checkpoint.findings import CompatResult, Finding, error, info, warning
from eagle3kit.checkpoint.inspection import TargetInfo, target_info
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.checkpoint.methods import MethodHeader
from eagle3kit.core.method_spec import DFlashSpec, PEagleSpec


def tensor_findings(head: MethodHeader) -> list[Finding]:
    """Required tensors present, shapes as the config says (the drafter on its own)."""
    spec, ckpt, out = head.spec, head.ckpt, []
    expected = spec.expected_shapes()
    for name in spec.required_tensors():
        if name not in head.names:
            out.append(error("missing-tensor", f"{name}: missing (a servable drafter needs it)"))
    for canon, stored in head.names.items():
        shape = tuple(ckpt.tensors[stored].shape)
        want = expected.get(canon)
        if canon == "mask_hidden" and want and _numel(shape) == _numel(want):
            continue  # any view of n_aux x H_target values (vLLM loads it with view(1, -1))
        if want is not None and shape != want:
            out.append(
                error(
                    "shape", f"{stored}: expected {list(want)} from the config, found {list(shape)}"
                )
            )
    return out


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _common_findings(hidden: int, target_hidden: int, mask: int, ti: TargetInfo, what: str):
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


def _engine_entry(sel: E.EngineSel, trained_on, sources: list[str]) -> dict[str, Any]:
    """An engine's row of the report (captures and why are added once known)."""
    return {
        "label": sel.label,
        "version": sel.version_text,
        "trained_on": list(trained_on),
        "sources": sources,
    }


def _not_served(sel: E.EngineSel, entry: dict, why: str, message: str) -> tuple[dict, list]:
    """The row and the one error of an engine that does not serve this drafter."""
    entry.update(captures=[], why=why)
    return entry, [error("not-served", message, sel.name)]


def _dflash_engine(sel: E.EngineSel, head: MethodHeader, ti: TargetInfo) -> tuple[dict, list]:
    spec = head.spec
    assert isinstance(spec, DFlashSpec)
    rule = M.dflash_id_rule(sel.name, sel.version, spec.layout)
    entry = _engine_entry(sel, spec.aux_layers, [rule.source])
    if rule.capture == "not_served":
        return _not_served(
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
    spec = head.spec
    assert isinstance(spec, DFlashSpec)
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


def _peagle_load_findings(sel: E.EngineSel, head: MethodHeader, served: str) -> list[Finding]:
    """What a vLLM release that serves P-EAGLE refuses at load: the config form, the
    architecture, a mask_hidden of the wrong width."""
    spec = head.spec
    assert isinstance(spec, PEagleSpec)
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
    if spec.layout == "vllm" and arch not in M.peagle_archs(sel.version):
        out.append(
            error(
                "architecture",
                f"architectures: {sel.label} registers "
                f"{list(M.peagle_archs(sel.version))}, found {arch!r}",
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
    spec = head.spec
    assert isinstance(spec, PEagleSpec)
    served = M.method_rule(sel.name, sel.version, "peagle", "served")
    entry = _engine_entry(sel, spec.draft.aux_layers or [], [served.source] if served else [])
    if served is None or served.value == "no":
        return _not_served(
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


def check_method_against_target(
    head: MethodHeader, t: Checkpoint, engines: list[E.EngineSel], k: int | None = None
) -> CompatResult:
    """The serving question for a DFlash or P-EAGLE drafter on target `t`."""
    ti = target_info(t)
    res = CompatResult("drafter-target", head.source, t.source)
    res.findings += tensor_findings(head) + [
        info("method", f"{head.method} drafter, {head.layout} layout")
    ]
    res.findings += [info("note", n) for n in head.notes]
    spec = head.spec
    if isinstance(spec, DFlashSpec):
        res.findings += _common_findings(
            spec.hidden_size, spec.target_hidden_size, spec.mask_token_id, ti, "hidden_size"
        )
        res.findings += _layers_findings(spec, ti, head.ckpt.config) + _k_findings(spec, k)
    else:
        assert isinstance(spec, PEagleSpec)
        res.findings += _common_findings(
            spec.draft.hidden_size,
            spec.draft.target_hidden_size,
            spec.mask_token_id,
            ti,
            "target_hidden_size",
        )
    family = E.target_family(t.config)
    for sel in engines:
        if isinstance(spec, DFlashSpec):
            entry, found = _dflash_engine(sel, head, ti)
        else:
            entry, found = _peagle_engine(sel, head, ti, family)
        res.engines[sel.name] = entry
        res.findings += found
    return res
