"""Sliding-window drafters per engine release: which window each engine runs (torch-free).

A drafter trained with a window W must run with the same one: a window the engine drops
lets the drafter see keys it never saw in training, one it adds hides keys it learned from.
Window W means a query at position p sees keys at positions > p - W (W keys counting its own:
transformers' convention; vLLM's backends pass `(W - 1, 0)` to flash attention,
v1/attention/backends/flash_attn.py; SGLang's RadixAttention stores `window_left` = W - 1,
speculative/dflash_utils.py "HF sliding windows include the current token").

The rows (`WINDOW_RULES`, `MethodRule` data like engines/methods.py's METHOD_RULES; the EAGLE-3
and DFlash checkpoint parts declare theirs as `ENGINE_RULES`, which `method_rules()` reads),
each with the file it was read from:

EAGLE-3 (key `window-mha` / `window-mla`, value: how the engine learns the window)
- "config": vLLM 0.32/0.33 build the drafter layer with models/llama.py `LlamaAttention`,
  which gives a layer `per_layer_sliding_window = sliding_window` when
  `layer_types[layer_idx - target_layer_count]` is "sliding_attention" (llama_eagle3.py sets
  `target_layer_count`); qwen3_eagle3.py reads the same two keys.
- "launch-flag": SGLang 0.5.23's `LlamaForCausalLMEagle3` reads no window key from the
  config; `--speculative-draft-window-size N` sets every draft layer's `sliding_window_size`
  (= window_left, so N = W - 1), on the Triton and FlashInfer draft backends
  (arg_groups/fields/spec.py, models/llama_eagle3.py).
- "ignored": MLA drafters: vLLM 0.33 models/deepseek_eagle3.py reads no window; SGLang 0.5.23's
  flag help says MLA-based EAGLE-3 drafters ignore it.

DFlash (key `window`, value: the engine's per-layer rule, `engine_windows`)
- "vllm" (0.32, 0.33 qwen3_dflash.py `_resolve_layer_attention`): layer i slides when
  `layer_types[i]` is "sliding_attention", or every layer when `dflash_config.use_swa` and no
  layer_types (or an all-full one); the window is `dflash_config.swa_window_size`, else
  `sliding_window`.
- "sglang" (0.5.23 speculative/dflash_utils.py `get_dflash_layer_types`,
  `get_dflash_attention_sliding_window_size`): `layer_types` only (`use_swa` is not read,
  `swa_window_size` only for Nemotron 3.5 drafters); the window is `sliding_window`.
A release with no row was not checked: compat says so instead of guessing.
"""

from __future__ import annotations

from typing import Any

from eagle3kit.checkpoint.engines.methods import MethodRule

SLIDING = "sliding_attention"

WINDOW_RULES = (  # EAGLE-3 rows first, then DFlash's (`rows_for`)
    MethodRule(
        "vllm",
        "eagle3",
        "window-mha",
        "config",
        (0, 32),
        None,
        "vllm 0.32/0.33 model_executor/models/llama.py LlamaAttention (layer_types, "
        "sliding_window), llama_eagle3.py target_layer_count",
    ),
    MethodRule(
        "vllm",
        "eagle3",
        "window-mla",
        "ignored",
        (0, 32),
        None,
        "vllm 0.33 model_executor/models/deepseek_eagle3.py (reads no window)",
    ),
    MethodRule(
        "sglang",
        "eagle3",
        "window-mha",
        "launch-flag",
        (0, 5, 23),
        None,
        "sglang 0.5.23 models/llama_eagle3.py (speculative_draft_window_size only), "
        "arg_groups/fields/spec.py",
    ),
    MethodRule(
        "sglang",
        "eagle3",
        "window-mla",
        "ignored",
        (0, 5, 23),
        None,
        "sglang 0.5.23 arg_groups/fields/spec.py (MLA-based EAGLE-3 drafters ignore the window)",
    ),
    MethodRule(
        "vllm",
        "dflash",
        "window",
        "vllm",
        (0, 32),
        None,
        "vllm 0.32/0.33 model_executor/models/qwen3_dflash.py _resolve_layer_attention",
    ),
    MethodRule(
        "sglang",
        "dflash",
        "window",
        "sglang",
        (0, 5, 23),
        None,
        "sglang 0.5.23 speculative/dflash_utils.py get_dflash_layer_types, "
        "get_dflash_attention_sliding_window_size",
    ),
)


def rows_for(method: str) -> tuple[MethodRule, ...]:
    """The window rows of one method (its checkpoint part's `ENGINE_RULES`)."""
    return tuple(r for r in WINDOW_RULES if r.method == method)


def sglang_window_flag(window: int) -> str:
    """The SGLang launch option that runs an EAGLE-3 drafter with window W (window_left)."""
    return f"--speculative-draft-window-size {window - 1}"


def engine_windows(
    rule: str, config: dict[str, Any], layout: str, n: int
) -> tuple[int | None, ...]:
    """Each layer's window (None: full attention) as an engine runs a DFlash config under
    `rule` (module docstring)."""
    layer = config.get("transformer_layer_config") if layout == "speculators" else config
    layer = layer if isinstance(layer, dict) else {}
    types = layer.get("layer_types")
    if rule == "sglang":
        if not isinstance(types, list):
            return (None,) * n
        return tuple(layer.get("sliding_window") if t == SLIDING else None for t in types[:n])
    dfc = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    size = dfc.get("swa_window_size", layer.get("sliding_window"))
    use_swa = bool(dfc.get("use_swa", False))
    any_sliding = isinstance(types, list) and SLIDING in types
    if not isinstance(types, list) or (use_swa and not any_sliding):
        return (size if use_swa else None,) * n
    return tuple(size if t == SLIDING else None for t in types[:n])


def spec_windows(spec: Any) -> tuple[int | None, ...]:
    """Each layer's window as the drafter was trained (a DFlashSpec)."""
    types = spec.layer_types or ()
    return tuple(
        spec.sliding_window if i < len(types) and types[i] == SLIDING else None
        for i in range(spec.num_hidden_layers)
    )


def eagle3_window_findings(sel: Any, spec: Any) -> list[Any]:
    """What `compat` says about an EAGLE-3 drafter's window on engine release `sel`: nothing
    for a full-attention drafter or an engine that reads the config's window; the launch flag
    SGLang needs; an error where the release runs full attention; a warning for a release
    with no row."""
    from eagle3kit.checkpoint.engines.methods import method_rule
    from eagle3kit.checkpoint.findings import error, warning

    w = spec.sliding_window
    if w is None:
        return []
    att = getattr(spec, "attention", "mha")
    rule = method_rule(sel.name, sel.version, "eagle3", f"window-{att}")
    if rule is None:
        return [
            warning(
                "sliding-window",
                f"sliding_window {w}: not checked on {sel.label} (rules from vLLM 0.32, "
                "SGLang 0.5.23); pass --engine ENGINE@VERSION of a checked release",
                sel.name,
            )
        ]
    if rule.value == "config":
        return []
    if rule.value == "launch-flag":
        return [
            warning(
                "sliding-window",
                f"sliding_window {w}: {sel.label} reads no window from the config; launch with "
                f"{sglang_window_flag(w)} (Triton or FlashInfer draft backend), else it runs "
                f"full attention ({rule.source})",
                sel.name,
            )
        ]
    return [
        error(
            "sliding-window",
            f"sliding_window {w}: {sel.label} runs this {att.upper()} drafter with full "
            f"attention, not the window it was trained with ({rule.source})",
            sel.name,
        )
    ]


def dflash_window_findings(sel: Any, spec: Any, config: dict[str, Any]) -> list[Any]:
    """A DFlash drafter's per-layer windows as trained against those release `sel` runs."""
    from eagle3kit.checkpoint.engines.methods import method_rule
    from eagle3kit.checkpoint.findings import error, warning

    trained = spec_windows(spec)
    rule = method_rule(sel.name, sel.version, "dflash", "window")
    if rule is None:
        if not any(trained):
            return []
        return [
            warning(
                "dflash-window",
                f"sliding layers: not checked on {sel.label} (rules from vLLM 0.32, SGLang 0.5.23)",
                sel.name,
            )
        ]
    runs = engine_windows(rule.value, config, spec.layout, spec.num_hidden_layers)
    if runs == trained:
        return []
    word = lambda w: "full" if w is None else f"window {w}"  # noqa: E731
    diff = [
        f"layer {i}: trained {word(a)}, run {word(b)}"
        for i, (a, b) in enumerate(zip(trained, runs, strict=True))
        if a != b
    ]
    return [error("dflash-window", f"{'; '.join(diff)} by {sel.label} ({rule.source})", sel.name)]
