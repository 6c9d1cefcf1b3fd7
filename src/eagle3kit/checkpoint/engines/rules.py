"""The serving engines' drafter rules, by engine version and target family, as data.

Every rule here is one row of a table in docs/formats.md ("Engine rules by release", "Norm
flags", "MLA drafters"), with its source (PR or file) in a comment. Notation: h[k] is Hugging Face
`output_hidden_states[k]`, the input of decoder layer k (h[0] = embeddings); eagle3kit's
aux layers are h-indices. For ids X = [x1, x2, x3] read from the drafter's config an engine
captures

    "plus1":          h[x + 1] for each x             (x names a layer's output)
    "as_is":          h[x]     for each x             (x is an h-index)
    "plus1_if_first": h[x + 1] if x1 == 1, else h[x]  (SGLang >= 0.5.13 on DeepSeek/Kimi)

and, when it reads no ids, its default h[2, L//2, L-3] for an L-layer target.

The DFlash and P-EAGLE rules (layer-id mapping, sample_from_anchor, causality, P-EAGLE
serving) are in `checkpoint/engines/methods.py`, re-exported here.

Whole-file refusals (config keys, vLLM's MTP rewrite, full-vocabulary d2t, `vllm serve
DRAFTER` with a local verifier) are in `checkpoint/engines/files.py`, re-exported here.

Release numbers derived from a PR's merge date (vLLM 0.22, SGLang 0.5.13)
are inferred from tag dates; `VERSION_NOTES` says so wherever they show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from eagle3kit.checkpoint.engines.files import (  # noqa: F401  (re-exported: file rules)
    CONFIG_KEYS,
    VLLM_DIRECT_SERVE_SINCE,
    VLLM_DIRECT_SERVE_SOURCE,
    VLLM_FULL_VOCAB_D2T_SINCE,
    VLLM_FULL_VOCAB_D2T_SOURCE,
    VLLM_MLA_MODEL_TYPE,
    VLLM_MTP_MODEL_TYPES,
    VLLM_MTP_SOURCE,
    config_refusal,
    vllm_refuses_full_vocab_d2t,
    vllm_refuses_local_verifier,
)
from eagle3kit.checkpoint.engines.methods import (  # noqa: F401  (re-exported: DFlash, P-EAGLE)
    DFLASH_ID_RULES,
    METHOD_RULES,
    dflash_id_rule,
    method_rule,
)
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.spec import default_aux_layers

ENGINES = ("sglang", "vllm")
DISPLAY = {"sglang": "SGLang", "vllm": "vLLM"}
FAMILIES = ("llama", "deepseek", "gpt-oss")  # llama = Llama/Qwen/GLM/Gemma/most targets
FAMILY_NAMES = {
    "llama": "Llama/Qwen/GLM/Gemma and most targets",
    "deepseek": "DeepSeek-V2/V3 and Kimi targets",
    "gpt-oss": "GPT-OSS targets",
}
_ALL = frozenset(FAMILIES)
Version = tuple[int, ...]

# Releases at which some rule below changes, per engine (ascending). The newest is "latest".
BREAKS: dict[str, tuple[Version, ...]] = {
    "sglang": ((0, 5, 13), (0, 5, 17)),
    "vllm": ((0, 22), (0, 33)),
}
LATEST: Version = (999,)  # stands for "newer than every release modelled here"
VERSION_NOTES = {
    ("sglang", (0, 5, 13)): "release inferred from the merge date of PR #25454 (2026-05-18)",
    ("vllm", (0, 22)): "release inferred from the merge date of PR #42764 (2026-05-19)",
    ("vllm", (0, 33)): "0.21.0 and 0.33.0 checked by benchmarks/engine_check.py; changes "
    "between them of unknown release (the V2 runner as default, PR #46488, PR #53458) are "
    "taken from 0.33",
}


@dataclass(frozen=True)
class IdSource:
    """Where an engine reads the aux-layer ids, and what it does without them."""

    engine: str
    since: Version | None  # first release with this rule (None: every release we model)
    until: Version | None  # first release without it
    reads: tuple[str, ...]  # "top" (top-level key) and/or "nested" (eagle_config), in order
    warns_on_default: bool
    source: str
    # vLLM has two model runners; `reads` is the default one's (V2 on CUDA with Triton from
    # 0.33), `v1_reads` the V1 runner's (VLLM_USE_V2_MODEL_RUNNER=0, or no Triton)
    v1_reads: tuple[str, ...] | None = None


ID_SOURCES = (
    # vLLM <= 0.21: only the top-level eagle_aux_hidden_state_layer_ids; nested eagle_config
    # ids are ignored; no ids -> default h[2, L//2, L-3] (vllm gpu_model_runner
    # _get_eagle3_aux_layers_from_config before PR #42764)
    IdSource(
        "vllm", None, (0, 22), ("top",), False, "vllm v1/worker/gpu_model_runner.py (<= 0.21)"
    ),
    # vLLM >= 0.22: top-level, else nested eagle_config (PR #42764, 2026-05-19); no ids ->
    # default with a warning (PR #50170)
    IdSource("vllm", (0, 22), (0, 33), ("top", "nested"), True, "vLLM PR #42764, PR #50170"),
    # vLLM 0.33 (engine_check): the V2 model runner, the default on CUDA with Triton
    # (config/vllm.py use_v2_model_runner), reads the top-level ids only (nested
    # eagle_config.layer_ids, never eagle_aux_hidden_state_layer_ids) and else the target's
    # default with an info log (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py); the V1 runner
    # still reads top-level, else nested (v1/worker/gpu_model_runner.py)
    IdSource(
        "vllm",
        (0, 33),
        None,
        ("top",),
        False,
        "vllm 0.33 v1/worker/gpu/spec_decode/eagle/eagle3_utils.py",
        ("top", "nested"),
    ),
    # SGLang, all versions: nested eagle_config only, top-level ignored; no ids -> default
    # (sglang models/llama_eagle3.py + the targets' set_eagle3_layers_to_capture)
    IdSource("sglang", None, None, ("nested",), False, "sglang models/llama_eagle3.py"),
)


@dataclass(frozen=True)
class CaptureRule:
    """What id x captures, for one engine, release range and set of target families."""

    engine: str
    since: Version | None
    until: Version | None
    families: frozenset[str]
    capture: str  # plus1 | as_is | plus1_if_first
    allow_last: bool  # h[L] (the last layer's output, before the final norm) may be captured
    source: str


CAPTURE_RULES = (
    # vLLM: id x is an h-index, every target (vllm models/*: aux layer x = input of layer x)
    CaptureRule(
        "vllm", None, None, _ALL, "as_is", False, "vllm models/llama.py set_aux_hidden_state_layers"
    ),
    # SGLang, Llama/Qwen/GLM/Gemma/most targets: x names a layer output, h[x + 1]
    # (sglang models/llama.py etc. set_eagle3_layers_to_capture: layer_id + 1)
    CaptureRule(
        "sglang", None, None, frozenset({"llama"}), "plus1", False, "sglang models/llama.py"
    ),
    # SGLang < 0.5.13, DeepSeek-V2/V3 + Kimi targets: h[x + 1] (sglang models/deepseek_v2.py)
    CaptureRule(
        "sglang",
        None,
        (0, 5, 13),
        frozenset({"deepseek"}),
        "plus1",
        False,
        "sglang models/deepseek_v2.py",
    ),
    # SGLang >= 0.5.13, DeepSeek/Kimi: h[x + 1] if the first id is 1, else h[x] (PR #25454,
    # merged 2026-05-18)
    CaptureRule(
        "sglang",
        (0, 5, 13),
        None,
        frozenset({"deepseek"}),
        "plus1_if_first",
        False,
        "SGLang PR #25454",
    ),
    # SGLang < 0.5.17, GPT-OSS: the generic rule, h[x + 1] (sglang models/gpt_oss.py)
    CaptureRule(
        "sglang",
        None,
        (0, 5, 17),
        frozenset({"gpt-oss"}),
        "plus1",
        False,
        "sglang models/gpt_oss.py",
    ),
    # SGLang >= 0.5.17, GPT-OSS: h[x], x = L allowed (before the final norm) (PR #32334)
    CaptureRule(
        "sglang", (0, 5, 17), None, frozenset({"gpt-oss"}), "as_is", True, "SGLang PR #32334"
    ),
)

# Not EAGLE-3, kept so the table is whole: vLLM's DFlash/DSpark drafters name their target
# layers in `target_layer_ids`, and id x captures h[x + 1] (docs/formats.md "Aux layer ids").
OTHER_ID_KEYS = {("vllm", "dflash_config.target_layer_ids"): "plus1"}


@dataclass(frozen=True)
class FlagRule:
    """An engine implements `flag` for drafters of `attention` kind on `families` targets."""

    engine: str
    flag: str
    attention: frozenset[str]
    families: frozenset[str]
    since: Version | None
    source: str


_MHA, _MLA, _BOTH = frozenset({"mha"}), frozenset({"mla"}), frozenset({"mha", "mla"})
FLAG_RULES = (
    # norm_before_residual: vLLM yes (speculators defaults it True); SGLang: not implemented
    # (0.5.23 llama_eagle3.py: the residual is the raw hidden state; kimi_k25_eagle3.py alike)
    FlagRule("vllm", "norm_before_residual", _BOTH, _ALL, None, "vllm models/llama_eagle3.py"),
    # norm_before_fc (input_norm.weight): vLLM for Llama (MHA) drafters, not MLA (PR #36545)
    FlagRule("vllm", "norm_before_fc", _MHA, _ALL, None, "vLLM PR #36545"),
    # ... SGLang for Llama (MHA) drafters on any target: llama_eagle3.py builds input_norm from
    # top-level or eagle_config norm_before_fc without looking at the target (added with the
    # GPT-OSS change, PR #32334, 0.5.17; loaded on Llama and DeepSeek-V3 targets by
    # benchmarks/engine_check.py on 0.5.23); kimi_k25_eagle3.py (MLA) has no input_norm
    FlagRule(
        "sglang",
        "norm_before_fc",
        _MHA,
        _ALL,
        (0, 5, 17),
        "SGLang PR #32334, sglang 0.5.23 models/llama_eagle3.py",
    ),
    # fc_norm (fc_norm.{i}.weight): vLLM (PR #42764 MHA, #43482 MLA; #43482's release is not
    # pinned, taken as the same >= 0.22); SGLang MHA (PR #24663) and MLA (kimi_k25_eagle3.py
    # builds fc_norm with norm_output, the eagle3.1 change PR #26506; checked on 0.5.23)
    FlagRule("vllm", "fc_norm", _MHA, _ALL, (0, 22), "vLLM PR #42764"),
    FlagRule("vllm", "fc_norm", _MLA, _ALL, (0, 22), "vLLM PR #43482"),
    FlagRule("sglang", "fc_norm", _MHA, _ALL, None, "SGLang PR #24663"),
    FlagRule(
        "sglang", "fc_norm", _MLA, _ALL, None, "SGLang PR #26506, sglang models/kimi_k25_eagle3.py"
    ),
    # norm_output (no tensor): vLLM 0.21.0 has none (its llama_eagle3.py never reads it;
    # engine_check: ignored); the model code came with PR #42764 (0.22) and the speculators
    # config's flag reaches it with PR #46488 (algos.py), release not pinned: taken from 0.33,
    # the first release checked to apply it (engine_check on 0.33.0), so 0.22 to 0.32 may be
    # reported as ignoring a flag they apply. SGLang MHA (PR #24663) and MLA (PR #26506)
    FlagRule("vllm", "norm_output", _BOTH, _ALL, (0, 33), "vLLM PR #42764 + PR #46488"),
    FlagRule("sglang", "norm_output", _MHA, _ALL, None, "SGLang PR #24663"),
    FlagRule("sglang", "norm_output", _MLA, _ALL, None, "SGLang PR #26506"),
)


@dataclass(frozen=True)
class ArchRule:
    """A drafter class an engine maps to EAGLE-3, and the tensor-name prefixes it loads."""

    engine: str
    architecture: str
    attention: str
    loads: tuple[str, ...]  # layer prefixes it loads; other names are skipped silently
    source: str


ARCH_RULES = (
    # SGLang's Llama drafter maps midlayer. -> layers.0. (its legacy_name_map) and loads
    # layers.0.* as they are (sglang 0.5.23 models/llama_eagle3.py load_weights); other names
    # are skipped without a word
    ArchRule(
        "sglang",
        "LlamaForCausalLMEagle3",
        "mha",
        ("midlayer.", "layers.0."),
        "sglang models/llama_eagle3.py",
    ),
    # SGLang's MLA drafter maps midlayer. <-> layers.0. (docs/formats.md "MLA drafters")
    ArchRule(
        "sglang",
        "Eagle3DeepseekV2ForCausalLM",
        "mla",
        ("midlayer.", "layers.0."),
        "sglang models/kimi_k25_eagle3.py",
    ),
    # vLLM loads both naming styles (vllm models/llama_eagle3.py, speculators' Eagle3Speculator)
    ArchRule(
        "vllm",
        "LlamaForCausalLMEagle3",
        "mha",
        ("midlayer.", "layers.0."),
        "vllm models/llama_eagle3.py",
    ),
    ArchRule(
        "vllm",
        "Eagle3LlamaForCausalLM",
        "mha",
        ("midlayer.", "layers.0."),
        "vllm models/llama_eagle3.py",
    ),
    ArchRule(
        "vllm",
        "Eagle3Speculator",
        "mha",
        ("midlayer.", "layers.0."),
        "vllm transformers_utils/configs/speculators/base.py",
    ),
    ArchRule(
        "vllm", "LlamaForCausalLM", "mha", ("midlayer.", "layers.0."), "vllm config/speculative.py"
    ),
    ArchRule(
        "vllm",
        "Eagle3DeepseekV2ForCausalLM",
        "mla",
        ("midlayer.", "layers.0."),
        "vllm models/deepseek_eagle3.py",
    ),
    ArchRule(
        "vllm",
        "Eagle3DeepseekV3ForCausalLM",
        "mla",
        ("midlayer.", "layers.0."),
        "vllm models/deepseek_eagle3.py",
    ),
)


# ---------------------------------------------------------------- engine selection


@dataclass(frozen=True)
class EngineSel:
    """One engine and the release whose rules apply (None: the latest rules)."""

    name: str
    version: Version | None = None

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version)) if self.version else "latest"

    @property
    def label(self) -> str:
        """'SGLang 0.5.12', or 'SGLang (latest rules: >= 0.5.17)'."""
        if self.version:
            return f"{DISPLAY[self.name]} {self.version_text}"
        return f"{DISPLAY[self.name]} (latest rules: {band_label(self.name, None)})"


_SEL = re.compile(r"^(sglang|vllm|both)(?:@(\d+(?:\.\d+){0,3}))?$")


def parse_engines(text: str) -> list[EngineSel]:
    """`sglang`, `vllm@0.21`, `both`, or a comma list (`sglang@0.5.12,vllm@0.22`)."""
    out: list[EngineSel] = []
    for part in (p.strip().lower() for p in text.split(",")):
        m = _SEL.match(part)
        if not m or (m.group(1) == "both" and m.group(2)):
            raise Eagle3Error(
                f"--engine: expected sglang, vllm or both, optionally with @VERSION "
                f"(sglang@0.5.12, vllm@0.21), found {part!r}"
            )
        names = ENGINES if m.group(1) == "both" else (m.group(1),)
        ver = tuple(int(x) for x in m.group(2).split(".")) if m.group(2) else None
        for n in names:
            if any(s.name == n for s in out):
                raise Eagle3Error(f"--engine: {n} named twice in {text!r}")
            out.append(EngineSel(n, ver))
    return out


def _in_range(version: Version | None, since: Version | None, until: Version | None) -> bool:
    v = version or LATEST
    return (since is None or v >= since) and (until is None or v < until)


def band_label(engine: str, version: Version | None) -> str:
    """The release range whose rules `version` (None: latest) falls in, e.g. '>= 0.5.17'."""
    v = version or LATEST
    breaks = BREAKS[engine]
    fmt = ".".join
    lower = [b for b in breaks if v >= b]
    upper = [b for b in breaks if v < b]
    if not lower:
        return f"< {fmt(map(str, upper[0]))}"
    if not upper:
        return f">= {fmt(map(str, lower[-1]))}"
    return f"{fmt(map(str, lower[-1]))} to < {fmt(map(str, upper[0]))}"


def bands(engine: str) -> list[tuple[str, Version]]:
    """(label, a representative version) for every release range of `engine`, oldest first."""
    breaks = BREAKS[engine]
    reps = [breaks[0][:-1] + (breaks[0][-1] - 1,)] + list(breaks)
    return [(band_label(engine, r), r) for r in reps]


# ---------------------------------------------------------------- targets and ids


def target_family(config: dict[str, Any]) -> str:
    """'deepseek' (model_type deepseek_v2/deepseek_v3/kimi_k2, incl. a text_config),
    'gpt-oss', or 'llama'."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    types = {str(c.get("model_type", "")).lower() for c in (config, text)}
    archs = " ".join(str(a) for a in (config.get("architectures") or []) if isinstance(a, str))
    if types & {"deepseek_v2", "deepseek_v3", "kimi_k2"} or re.search(r"Deepseek|Kimi", archs):
        return "deepseek"
    if "gpt_oss" in types or "GptOss" in archs:
        return "gpt-oss"
    return "llama"


def _ids(v: Any, where: str, key: str) -> tuple[int, ...] | None:
    if v is None:
        return None
    ok = (
        isinstance(v, list) and v and all(isinstance(i, int) and not isinstance(i, bool) for i in v)
    )
    if not ok or min(v) < 0:
        raise bad(where, f"{key}: expected a list of non-negative layer ids, found {v!r}")
    return tuple(v)


def file_ids(config: dict[str, Any], where: str) -> dict[str, tuple[int, ...] | None]:
    """The aux-layer ids a drafter config holds: {'top': ..., 'nested': ...} (None when absent)."""
    key = "eagle_aux_hidden_state_layer_ids"
    nested = config.get("eagle_config") if isinstance(config.get("eagle_config"), dict) else {}
    return {
        "top": _ids(config.get(key), where, key),
        "nested": _ids(nested.get(key), where, f"eagle_config.{key}"),
    }


# ---------------------------------------------------------------- what an engine captures


@dataclass(frozen=True)
class Capture:
    """The h-indices one engine release captures for one drafter on one target."""

    captures: list[int]
    read_from: str | None  # "top" | "nested" | None (no ids read: the default)
    ids: list[int] | None  # the ids as read
    rule: str  # plus1 | as_is | plus1_if_first | default
    allow_last: bool
    warns_on_default: bool
    why: str
    sources: tuple[str, ...]


WHERE = {
    "top": "top-level eagle_aux_hidden_state_layer_ids",
    "nested": "eagle_config.eagle_aux_hidden_state_layer_ids",
}


def id_source(engine: str, version: Version | None) -> IdSource:
    return next(
        r for r in ID_SOURCES if r.engine == engine and _in_range(version, r.since, r.until)
    )


def capture_rule(engine: str, version: Version | None, family: str) -> CaptureRule:
    return next(
        r
        for r in CAPTURE_RULES
        if r.engine == engine and family in r.families and _in_range(version, r.since, r.until)
    )


def apply_rule(rule: str, ids: list[int]) -> list[int]:
    """h-indices captured for ids under `rule` (the formulas of the module docstring)."""
    if rule == "plus1" or (rule == "plus1_if_first" and ids[0] == 1):
        return [x + 1 for x in ids]
    return list(ids)


def ids_for(
    engine: str, version: Version | None, family: str, wanted: tuple[int, ...] | list[int]
) -> list[int] | None:
    """The ids to write so that `engine` at `version` captures the h-indices `wanted` on a
    `family` target: h - 1 when its rule reads them so (every SGLang release on Llama targets,
    and on DeepSeek/Kimi when the first is h[2]), else h itself; None when no list of ids
    does (SGLang >= 0.5.13 on DeepSeek/Kimi reads a first id 1 as h[2], so h[1] cannot come
    first; h[0] cannot be named where id x means h[x + 1])."""
    rule = capture_rule(engine, version, family).capture
    for ids in ([x - 1 for x in wanted], list(wanted)):
        if min(ids) >= 0 and apply_rule(rule, ids) == list(wanted):
            return ids
    return None


def capture(
    engine: str,
    version: Version | None,
    family: str,
    ids: dict[str, tuple[int, ...] | None],
    num_layers: int,
    runner: str = "default",
) -> Capture:
    """What `engine` at `version` (None: latest) captures for a drafter with these file ids;
    `runner="v1"`: under vLLM's V1 model runner where its reading differs (IdSource.v1_reads)."""
    src = id_source(engine, version)
    rule = capture_rule(engine, version, family)
    reads = src.v1_reads if runner == "v1" and src.v1_reads else src.reads
    read = next((w for w in reads if ids.get(w)), None)
    ignored = [w for w in ("top", "nested") if ids.get(w) and w not in reads]
    skip = "; ".join(f"{WHERE[w]} {list(ids[w])} ignored" for w in ignored)
    if read is None:
        dflt = list(default_aux_layers(num_layers))
        why = f"reads no ids{' (' + skip + ')' if skip else ''}: default h[2, L//2, L-3] = {dflt}"
        why += ", with a warning in its log" if src.warns_on_default else ""
        return Capture(
            dflt, None, None, "default", rule.allow_last, src.warns_on_default, why, (src.source,)
        )
    raw = list(ids[read])
    cap = apply_rule(rule.capture, raw)
    how = {
        "plus1": "id x -> h[x+1]",
        "as_is": "id x -> h[x]",
        "plus1_if_first": "first id is 1: id x -> h[x+1]"
        if raw[0] == 1
        else "first id is not 1: id x -> h[x]",
    }
    why = f"{WHERE[read]} {raw}, {how[rule.capture]}" + (f"; {skip}" if skip else "")
    return Capture(
        cap,
        read,
        raw,
        rule.capture,
        rule.allow_last,
        src.warns_on_default,
        why,
        (src.source, rule.source),
    )


def other_releases(
    engine: str, family: str, ids: dict[str, tuple[int, ...] | None], num_layers: int
) -> list[tuple[str, list[int]]]:
    """Older release ranges that capture other layers than the latest rules: [(label, h)]."""
    now = capture(engine, None, family, ids, num_layers).captures
    out = []
    for label, rep in bands(engine)[:-1]:
        cap = capture(engine, rep, family, ids, num_layers).captures
        if cap != now:
            out.append((f"{DISPLAY[engine]} {label}", cap))
    return out


def releases_capturing(
    engine: str,
    family: str,
    ids: dict[str, tuple[int, ...] | None],
    num_layers: int,
    wanted: list[int],
) -> list[str]:
    """The release ranges of `engine` that capture exactly `wanted` for this drafter."""
    return [
        f"{DISPLAY[engine]} {label}"
        for label, rep in bands(engine)
        if capture(engine, rep, family, ids, num_layers).captures == list(wanted)
    ]


# ---------------------------------------------------------------- flags and classes


def flag_rule(
    engine: str, flag: str, attention: str, family: str, version: Version | None
) -> FlagRule | None:
    """The rule by which `engine` implements `flag` here, or None when it does not."""
    return next(
        (
            r
            for r in FLAG_RULES
            if r.engine == engine
            and r.flag == flag
            and attention in r.attention
            and family in r.families
            and _in_range(version, r.since, None)
        ),
        None,
    )


def arch_rule(engine: str, architecture: str) -> ArchRule | None:
    return next(
        (r for r in ARCH_RULES if r.engine == engine and r.architecture == architecture), None
    )


def architectures(engine: str, attention: str | None = None) -> list[str]:
    return [
        r.architecture
        for r in ARCH_RULES
        if r.engine == engine and (attention is None or r.attention == attention)
    ]
