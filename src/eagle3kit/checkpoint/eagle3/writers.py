"""Who wrote this drafter, and therefore what its aux-layer ids mean.

The same list `eagle_aux_hidden_state_layer_ids = [x1, x2, x3]` is written with two meanings
(docs/formats.md "Aux layer ids"):

    layer_output: x names the output of decoder layer x, i.e. h[x + 1]
                  (SpecForge, NVIDIA ModelOpt, TorchSpec's native export)
    h_index:      x is the h-index itself, h[x]
                  (speculators, original EAGLE, TorchSpec's --vllm export for kimi_k2)

Nothing in the engines' keys says which, so the writer is inferred from the file's other
markers, with the evidence and a confidence. eagle3kit's own writers record the h-indices in
`"eagle3kit": {"aux_layers_hf": [...]}` beside the engines' keys, so our files are never
ambiguous. When no marker names the writer, both readings are reported and `eagle3kit probe`
(acceptance under each reading, from data) settles it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.core.errors import bad
from eagle3kit.core.spec import default_aux_layers

READINGS = ("layer_output", "h_index")
OUR_KEY = "eagle3kit"  # config.json: {"eagle3kit": {"aux_layers_hf": [...]}}
# ModelOpt's export template puts these beside the ids in eagle_config
# (modelopt/torch/export/plugins/hf_spec_export.py, llama/kimik2 templates)
MODELOPT_KEYS = (
    "use_input_layernorm_in_first_layer",
    "use_last_layernorm",
    "use_mtp_layernorm",
    "next_layer_regular",
    "parallel_draft_step",
    "parallel_draft_heads_num_layers",
)
# TorchSpec's tools/convert_to_hf.py writes `_torchspec_version` into config.json
TORCHSPEC_KEY = "_torchspec_version"
# speculators' config keys (vllm-project/speculators, Eagle3SpeculatorConfig)
SPECULATORS_KEYS = ("speculators_config", "speculators_model_type", "speculators_version")
# SpecForge saves training_state.pt beside the drafter's config (scripts/train_eagle3.py)
SPECFORGE_FILES = ("training_state.pt",)


@dataclass(frozen=True)
class Writer:
    """The tool that wrote a drafter and how it meant its ids."""

    name: str  # eagle3kit | speculators | TorchSpec | ModelOpt | SpecForge | EAGLE | unknown
    reading: str | None  # layer_output | h_index | explicit (our key) | None (unknown)
    evidence: list[str] = field(default_factory=list)
    confidence: str = "none"  # certain | high | medium | low | none

    @property
    def known(self) -> bool:
        return self.reading is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "reading": self.reading,
            "evidence": list(self.evidence),
            "confidence": self.confidence,
        }


def our_aux_layers(config: dict[str, Any], where: str) -> tuple[int, ...] | None:
    """The h-indices eagle3kit recorded (`eagle3kit.aux_layers_hf`, or the older
    `eagle3kit_aux_layers` of our EAGLE layout), or None."""
    ours = config.get(OUR_KEY)
    v, key = (
        (ours.get("aux_layers_hf"), f"{OUR_KEY}.aux_layers_hf")
        if isinstance(ours, dict)
        else (None, "")
    )
    if v is None:
        v, key = config.get("eagle3kit_aux_layers"), "eagle3kit_aux_layers"
    if v is None:
        return None
    if (
        not isinstance(v, list)
        or not v
        or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v)
    ):
        raise bad(where, f"{key}: expected a list of non-negative h-indices, found {v!r}")
    return tuple(v)


def _local_files(source: str | None) -> set[str]:
    if not source:
        return set()
    p = Path(source)
    d = p if p.is_dir() else p.parent if p.is_file() else None
    return {f.name for f in d.iterdir()} if d is not None else set()


def _layer_prefix(names: set[str]) -> str:
    if any(n.startswith(("layers.0.", "model.layers.0.")) for n in names):
        return "layers.0."
    return "midlayer."


def infer_writer(
    config: dict[str, Any], tensor_names: set[str], where: str, source: str | None = None
) -> Writer:
    """Infer the writer from config keys, tensor names and (local) sibling files."""
    ours = our_aux_layers(config, where)
    if isinstance(config.get(OUR_KEY), dict) and ours is not None:
        return Writer(
            "eagle3kit", "explicit", [f"{OUR_KEY}.aux_layers_hf = {list(ours)}"], "certain"
        )
    if ours is not None:
        return Writer("eagle3kit", "explicit", [f"eagle3kit_aux_layers = {list(ours)}"], "certain")
    found = [k for k in SPECULATORS_KEYS if k in config]
    if found or "Eagle3Speculator" in (config.get("architectures") or []):
        return Writer(
            "speculators",
            "h_index",
            [f"config keys {found or ['architectures: Eagle3Speculator']}"],
            "high",
        )
    if TORCHSPEC_KEY in config:
        return _torchspec(config, tensor_names)
    nested = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    mo = [k for k in MODELOPT_KEYS if k in nested]
    if mo:
        return Writer(
            "ModelOpt",
            "layer_output",
            [f"eagle_config keys {mo} (ModelOpt's export template)"],
            "high",
        )
    if "eagle3kit_verifier" in config:  # our SGLang writer before the explicit key: ids = h - 1
        return Writer(
            "eagle3kit",
            "layer_output",
            ["eagle3kit_verifier (eagle3kit's SGLang writer writes h - 1)"],
            "high",
        )
    sf = sorted(_local_files(source) & set(SPECFORGE_FILES))
    if sf:
        return Writer(
            "SpecForge",
            "layer_output",
            [f"{sf[0]} beside config.json (SpecForge's training checkpoint)"],
            "medium",
        )
    return _by_shape(config, tensor_names)


def _torchspec(config: dict[str, Any], names: set[str]) -> Writer:
    """TorchSpec: native export keeps layer-output ids; `--vllm` (layers.0.* names) adds 1 to
    the ids only for model_type kimi_k2 (tools/convert_to_hf.py _fixup_export_config)."""
    ev = [f"{TORCHSPEC_KEY} = {config[TORCHSPEC_KEY]!r}"]
    if _layer_prefix(names) == "midlayer.":
        return Writer("TorchSpec", "layer_output", ev + ["midlayer.* names: native export"], "high")
    if config.get("model_type") == "kimi_k2":
        return Writer(
            "TorchSpec",
            "h_index",
            ev + ["layers.0.* names and model_type kimi_k2: --vllm export (ids + 1)"],
            "high",
        )
    return Writer(
        "TorchSpec",
        "layer_output",
        ev + ["layers.0.* names: --vllm export, which shifts ids only for kimi_k2"],
        "medium",
    )


def _by_shape(config: dict[str, Any], names: set[str]) -> Writer:
    archs = [a for a in (config.get("architectures") or []) if isinstance(a, str)]
    nested = config.get("eagle_config")
    if archs == ["LlamaForCausalLM"] and "draft_vocab_size" in config and not nested:
        ev = [
            "architectures [LlamaForCausalLM] with draft_vocab_size, no eagle_config: SafeAILab "
            "EAGLE-3 layout "
            "(its code always uses the default h[2, L//2, L-3])"
        ]
        return Writer("EAGLE", "h_index", ev, "medium")
    ev = [
        f"architectures {archs}; no marker of SpecForge, ModelOpt, TorchSpec, speculators or "
        "eagle3kit"
    ]
    return Writer("unknown", None, ev, "none")


def pattern_hint(ids: tuple[int, ...] | None, num_layers: int) -> str | None:
    """Whether ids match a trainer's default for an L-layer target (weak evidence)."""
    if not ids:
        return None
    L = num_layers
    if list(ids) == [1, L // 2 - 1, L - 4]:
        return (
            f"ids {list(ids)} equal SpecForge/ModelOpt's layer-output default "
            f"[1, L//2-1, L-4] for L={L}"
        )
    if list(ids) == list(default_aux_layers(L)):
        return f"ids {list(ids)} equal the h-index default [2, L//2, L-3] for L={L}"
    return None


def readings(ids: tuple[int, ...] | list[int]) -> dict[str, list[int]]:
    """Both meanings of a list of ids, as h-indices."""
    return {"layer_output": [x + 1 for x in ids], "h_index": list(ids)}


def trained_on(
    writer: Writer,
    config: dict[str, Any],
    ids: dict[str, tuple[int, ...] | None],
    num_layers: int,
    where: str,
) -> list[int] | dict[str, list[int]]:
    """The h-indices the drafter was trained on, or both readings when the writer is unknown.

    A file without ids was trained on the writer's default: every trainer's default is
    h[2, L//2, L-3] (SpecForge/ModelOpt write it as [1, L//2-1, L-4] layer outputs)."""
    ours = our_aux_layers(config, where)
    if writer.reading == "explicit" and ours is not None:
        return list(ours)
    if writer.reading == "layer_output":  # those writers put them in eagle_config
        own = ids.get("nested") or ids.get("top")
    else:
        own = ids.get("top") or ids.get("nested")
    if not own:
        return list(default_aux_layers(num_layers))
    both = readings(own)
    return both[writer.reading] if writer.reading in both else both
