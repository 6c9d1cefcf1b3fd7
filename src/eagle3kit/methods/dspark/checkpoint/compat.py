"""compat of a DSpark drafter against a target, per engine release (docs/dspark.md "Serving";
the rules are `MethodRule` rows, `ENGINE_RULES`, each with its source, read in the released
wheels vLLM 0.24.0-0.33.0 and SGLang 0.5.15.post1-0.5.23). A release before DSpark's first is
answered before this part is asked (core/registry.py `since`: vLLM 0.25.0, SGLang 0.5.16)."""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.engines import methods as M
from eagle3kit.checkpoint.engines import rules as E
from eagle3kit.checkpoint.engines.methods import MethodRule
from eagle3kit.checkpoint.findings import Finding, error
from eagle3kit.checkpoint.inspection import TargetInfo
from eagle3kit.checkpoint.method_compat import engine_entry, not_served
from eagle3kit.checkpoint.methods import MethodHeader
from eagle3kit.methods.dflash.checkpoint.compat import target_findings as dflash_target
from eagle3kit.methods.dspark.checkpoint.spec import LAYOUTS, DSparkSpec

_V = "vllm 0.33.0 "
_S = "sglang 0.5.23 "
_ALGOS = "transformers_utils/configs/speculators/algos.py update_dspark"
_SG_CFG = "srt/speculative/dspark_components/dspark_config.py"


def _row(engine, key, value, since, until, source) -> MethodRule:
    return MethodRule(engine, "dspark", key, value, since, until, source)


ENGINE_RULES = (
    # which layout each engine reads ("deepspec": neither of ours, the heads top-level in a
    # Qwen3 config or its dspark_config)
    _row(
        "vllm",
        "layout",
        "speculators",
        None,
        None,
        "vllm 0.25.0-0.33.0 " + _ALGOS + "; model_executor/models/qwen3_dspark.py reads "
        "markov_rank top-level (SpecForge nests it in dflash_config)",
    ),
    _row(
        "sglang",
        "layout",
        "deepspec",
        None,
        (0, 5, 23),
        "sglang 0.5.16-0.5.22 " + _SG_CFG + " parse_dspark_draft_config (markov_rank from "
        "dspark_config or the top level; a SpecForge file's dflash_config heads read as rank 0, "
        "refused: 'DSpark draft requires markov_rank > 0')",
    ),
    _row(
        "sglang",
        "layout",
        "specforge",
        (0, 5, 23),
        None,
        _S + _SG_CFG + " _get_dspark_config (dflash_config, then dspark_config; a speculators "
        "config has neither)",
    ),
    # the Markov head types it builds (a tensor of another fails the load)
    _row(
        "vllm",
        "heads",
        "vanilla",
        None,
        None,
        "vllm 0.25.0-0.33.0 model_executor/models/qwen3_dspark.py DSparkMarkovHead (markov_w1, "
        "markov_w2 only; AutoWeightsLoader raises on gate_proj/joint_proj)",
    ),
    _row(
        "sglang",
        "heads",
        "vanilla gated rnn",
        None,
        None,
        "sglang 0.5.16-0.5.23 srt/models/dspark.py VanillaMarkov, GatedMarkovHead, RNNHead",
    ),
    # the draft vocabulary it serves: "any" (lm_head + d2t), "target" (the target's lm_head)
    _row(
        "vllm",
        "vocab",
        "any",
        None,
        None,
        _V + "qwen3_dspark.py load_weights (a reduced vocabulary needs lm_head and d2t)",
    ),
    _row(
        "sglang",
        "vocab",
        "target",
        None,
        None,
        _S + "srt/models/dspark.py (base logits from the target's lm_head; markov_w2 must "
        "cover its vocabulary)",
    ),
    # which layer ids it captures: "as_is" (h[a] from aux_hidden_state_layer_ids), "plus1"
    _row(
        "vllm",
        "captures",
        "as_is",
        None,
        None,
        _V + _ALGOS + " (eagle_aux_hidden_state_layer_ids = aux ids)",
    ),
    _row(
        "sglang",
        "captures",
        "plus1",
        None,
        None,
        _S + "srt/models/qwen3.py set_dflash_layers_to_capture (target_layer_ids + 1)",
    ),
    # sample_from_anchor: "true"/"false" what a config that does not state it is read as;
    # "always true"/"always false": the file's key is not read
    _row(
        "vllm",
        "anchor",
        "always false",
        None,
        (0, 27),
        "vllm 0.25.0/0.26.0 " + _ALGOS + " (dspark_bonus_anchor = True: the 1+N block)",
    ),
    _row(
        "vllm",
        "anchor",
        "false",
        (0, 27),
        None,
        "vllm 0.27.0-0.33.0 " + _ALGOS + " (config_dict.get('sample_from_anchor', False))",
    ),
    _row(
        "sglang",
        "anchor",
        "always true",
        None,
        (0, 5, 19),
        "sglang 0.5.16-0.5.18 srt/speculative/dspark_components/dspark_draft.py (a block of "
        "gamma rows from the anchor; no sample_from_anchor read)",
    ),
    _row(
        "sglang",
        "anchor",
        "true",
        (0, 5, 19),
        None,
        "sglang 0.5.19-0.5.23 " + _SG_CFG + " get_dspark_sample_from_anchor (default True)",
    ),
)
_SLIDING = "sliding_attention"


def _rule(sel: E.EngineSel, key: str) -> MethodRule | None:
    return M.method_rule(sel.name, sel.version, "dspark", key)


def target_findings(head: MethodHeader, ti: TargetInfo, k: int | None) -> list[Finding]:
    """The drafter against the target alone (hidden size, mask token, layers, K): DFlash's."""
    return dflash_target(head, ti, k)


def engine_findings(
    sel: E.EngineSel, head: MethodHeader, ti: TargetInfo, family: str
) -> tuple[dict[str, Any], list[Finding]]:
    """One engine release's row and findings."""
    spec: DSparkSpec = head.spec
    layout = _rule(sel, "layout")
    entry = engine_entry(sel, spec.aux_layers, [layout.source] if layout else [])
    if layout is None or layout.value != spec.layout:
        other = layout.value if layout else "none"
        fix = f"convert it with --to {other}" if other in LAYOUTS else "no layout eagle3kit writes"
        return not_served(
            sel,
            entry,
            "does not read this layout",
            f"{sel.label} does not serve a {spec.layout}-layout DSpark drafter, it reads the "
            f"{other} layout ({layout.source if layout else 'no rule'}); {fix}",
        )
    cap = _captures(sel, spec)
    entry.update(captures=cap, why=f"{_rule(sel, 'captures').value} of the file's ids")
    out = []
    if cap != list(spec.aux_layers):
        out.append(
            error(
                "dspark-ids",
                f"{sel.label} captures h{cap}, the drafter was trained on "
                f"h{list(spec.aux_layers)} ({_rule(sel, 'captures').source})",
                sel.name,
            )
        )
    return entry, out + _load(sel, spec) + _semantics(sel, head)


def _captures(sel: E.EngineSel, spec: DSparkSpec) -> list[int]:
    rule = _rule(sel, "captures")
    ids = spec.speculators_ids if spec.layout == "speculators" else spec.target_layer_ids
    return [i + 1 for i in ids] if rule.value == "plus1" else list(ids)


def _load(sel: E.EngineSel, spec: DSparkSpec) -> list[Finding]:
    """What the release refuses at load: a head type it does not build, a vocabulary it
    cannot serve."""
    out = []
    heads = _rule(sel, "heads")
    if spec.markov_rank > 0 and spec.markov_head_type not in heads.value.split():
        out.append(
            error(
                "engine-refuses",
                f"markov_head_type {spec.markov_head_type!r}: {sel.label} builds "
                f"{heads.value.replace(' ', ', ')} only; the load fails ({heads.source})",
                sel.name,
            )
        )
    vocab = _rule(sel, "vocab")
    if vocab.value == "target" and spec.has_vocab_map:
        out.append(
            error(
                "engine-refuses",
                f"draft_vocab_size {spec.draft_vocab_size} of {spec.vocab_size}: {sel.label} "
                f"serves the target's vocabulary only ({vocab.source})",
                sel.name,
            )
        )
    return out


def _semantics(sel: E.EngineSel, head: MethodHeader) -> list[Finding]:
    """Per-layer causality and sample_from_anchor as the release runs them."""
    spec: DSparkSpec = head.spec
    out = []
    runs = engine_causality(head.ckpt.config, spec)
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
                f"per-layer causality: {'; '.join(diff)} by {sel.label} (its DSpark config "
                "sets no causal flag: is_causal, else sliding layers causal)",
                sel.name,
            )
        )
    return out + _anchor(sel, head)


def _anchor(sel: E.EngineSel, head: MethodHeader) -> list[Finding]:
    """sample_from_anchor as the release reads it (the `anchor` rule) against the file's."""
    spec: DSparkSpec = head.spec
    rule = _rule(sel, "anchor")
    stated = "sample_from_anchor" in head.ckpt.config
    runs = rule.value.endswith("true")
    if runs == spec.sample_from_anchor or (stated and not rule.value.startswith("always")):
        return []
    always = rule.value.startswith("always")
    how = (
        f"does not read it and runs the block as {str(runs).lower()}"
        if always
        else f"reads a missing one as {str(runs).lower()}"
    )
    fix = "a later release reads the file's" if always else "state it in config.json"
    return [
        error(
            "sample-from-anchor",
            f"sample_from_anchor: the drafter's is {str(spec.sample_from_anchor).lower()}; "
            f"{sel.label} {how} ({rule.source}): every slot is read one position off ({fix})",
            sel.name,
        )
    ]


def engine_causality(config: dict[str, Any], spec: DSparkSpec) -> tuple[bool, ...]:
    """Each layer as vLLM's and SGLang's DSpark models run it: `is_causal`, else sliding
    layers causal (vLLM 0.33 qwen3_dflash.py `_dflash_layer_causal` with no
    dflash_config.causal set by update_dspark; SGLang models/dflash.py)."""
    n = spec.num_hidden_layers
    layer = config.get("transformer_layer_config") if spec.layout == "speculators" else config
    layer = layer if isinstance(layer, dict) else {}
    if layer.get("is_causal") is not None:
        return (bool(layer["is_causal"]),) * n
    types = layer.get("layer_types") or [None] * n
    return tuple(t == _SLIDING for t in types[:n])
