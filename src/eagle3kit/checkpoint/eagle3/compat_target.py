"""compat, drafter vs target: will each engine release serve this drafter as it was trained?

Serving is checked per engine release (checkpoint/engines/rules.py; docs/formats.md "Aux layer ids"
and "Engine rules by release"): for ids X read from the drafter's config, the engine captures
h-indices C(X) (h[x+1], h[x], or SGLang >= 0.5.13's DeepSeek/Kimi rule), or its default
h[2, L//2, L-3] when it reads none. The drafter was trained on T = the writer's reading of X
(checkpoint/eagle3/writers.py): h[x+1] for layer-output writers, h[x] for h-index writers, our own
key when eagle3kit wrote it. The engine serves it correctly iff C(X) = T; with an unknown
writer T has two candidates, and `eagle3kit probe` picks one from data.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.eagle3.checker import check_drafter
from eagle3kit.checkpoint.eagle3.layouts import method_of
from eagle3kit.checkpoint.eagle3.reader import drafter_header
from eagle3kit.checkpoint.eagle3.writers import Writer, infer_writer, pattern_hint, trained_on
from eagle3kit.checkpoint.engines import cpu as engine_cpu
from eagle3kit.checkpoint.engines import methods as M
from eagle3kit.checkpoint.engines import rules as E
from eagle3kit.checkpoint.engines.windows import eagle3_window_findings
from eagle3kit.checkpoint.findings import PROBE, CompatResult, Finding, error, info, warning
from eagle3kit.checkpoint.inspection import TargetInfo, target_info
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.core.spec import NORM_FLAGS, DraftSpec

EVIDENCE_DEFAULT = (
    "vLLM PR #50170: a drafter served on the default layers ran at accept length "
    "1.036, 0.70-0.79x the speed of plain decoding"
)
MEANS = {
    "layer_output": "layer outputs (id x = h[x+1]: SpecForge, ModelOpt, TorchSpec)",
    "h_index": "h-indices (id x = h[x]: speculators, EAGLE)",
}


@dataclass
class AuxContext:
    """What the engines need to know about one drafter on one target."""

    family: str
    num_layers: int
    ids: dict[str, tuple[int, ...] | None]  # the file's engine ids: top / nested
    writer: Writer
    trained: list[int] | dict[str, list[int]] | None  # h-indices, both readings, None: no ids
    no_ids: bool  # neither engine ids nor our key: every engine uses its default


def _aux_context(d: Checkpoint, t: Checkpoint, info_: TargetInfo) -> AuxContext:
    ids = E.file_ids(d.config, d.config_file)
    writer = infer_writer(d.config, set(d.tensors), d.config_file, d.source)
    hint = pattern_hint(ids.get("nested") or ids.get("top"), info_.num_layers)
    if hint and not writer.known:
        writer = Writer(writer.name, None, [*writer.evidence, hint], "none")
    no_ids = not any(ids.values()) and writer.reading != "explicit"
    trained = trained_on(writer, d.config, ids, info_.num_layers, d.config_file)
    trained = None if no_ids and writer.name != "EAGLE" else trained  # unknown: nothing says
    return AuxContext(E.target_family(t.config), info_.num_layers, ids, writer, trained, no_ids)


def _target_findings(
    d: Checkpoint, t: Checkpoint, spec: DraftSpec, ti: TargetInfo
) -> list[Finding]:
    out = []
    if spec.target_hidden_size != ti.hidden_size:
        out.append(
            error(
                "hidden-size",
                f"target_hidden_size: the target's hidden_size is {ti.hidden_size}, the drafter "
                "expects "
                f"{spec.target_hidden_size} (fc input {spec.fc_in_features} = 3 x "
                f"{spec.target_hidden_size})",
            )
        )
    if spec.vocab_size != ti.vocab_size:
        out.append(
            error(
                "vocab-size",
                f"vocab_size: the target has {ti.vocab_size}, the drafter declares "
                f"{spec.vocab_size}",
            )
        )
    if ti.max_position_embeddings and spec.max_position_embeddings < ti.max_position_embeddings:
        out.append(
            warning(
                "max-position",
                f"max_position_embeddings: drafter {spec.max_position_embeddings} is below the "
                "target's "
                f"{ti.max_position_embeddings}; long contexts may exceed the drafter's rope range",
            )
        )
    dig_d, dig_t = _tokenizer_digest(d), _tokenizer_digest(t)
    if dig_d and dig_t and dig_d != dig_t:
        out.append(
            error(
                "tokenizer",
                "tokenizer.json: the drafter's and the target's tokenizers differ (token ids would "
                "not line up)",
            )
        )
    return out


def _tokenizer_digest(ckpt: Checkpoint) -> str | None:
    if ckpt.tokenizer_file and Path(ckpt.tokenizer_file).exists():
        return hashlib.sha256(Path(ckpt.tokenizer_file).read_bytes()).hexdigest()
    return None


def _writer_findings(ctx: AuxContext) -> list[Finding]:
    w, L = ctx.writer, ctx.num_layers
    out = [
        info("writer", f"written by {w.name} (confidence {w.confidence}): {'; '.join(w.evidence)}")
    ]
    if isinstance(ctx.trained, list):
        bad_ids = [i for i in ctx.trained if not 0 <= i < L]
        if bad_ids:
            out.append(
                error(
                    "aux-out-of-range",
                    f"aux layers: {bad_ids} outside the target's hidden states "
                    f"[0, {L - 1}] (target has {L} layers)",
                )
            )
    return out


def _fix(eng: str, ctx: AuxContext | None = None) -> str:
    """The remedy: convert (SGLang's ids depend on the target family, which convert reads from
    --verifier), or none when no ids make the engine capture the trained layers."""
    trained = ctx.trained if ctx is not None and isinstance(ctx.trained, list) else None
    if trained and E.ids_for(eng, None, ctx.family, trained) is None:
        rule = E.capture_rule(eng, None, ctx.family)
        return (
            f"no ids make {E.DISPLAY[eng]} capture h{trained} on this target ({rule.capture}, "
            f"{rule.source}), so convert refuses it"
        )
    verifier = " --verifier TARGET_DIR" if eng == "sglang" else ""
    return f"`eagle3kit convert --to {eng}{verifier}` writes the ids {E.DISPLAY[eng]} reads"


def _default_findings(sel: E.EngineSel, cap: E.Capture, ctx: AuxContext) -> list[Finding]:
    """The engine reads no ids and uses its default."""
    eng, where = sel.name, f"{sel.label} {cap.why}"
    if ctx.no_ids and ctx.writer.name != "EAGLE":
        return [
            error(
                "aux-default",
                f"{where}; nothing in the file says the drafter was trained on those layers "
                f"({EVIDENCE_DEFAULT}); record the layers it was trained on in its config "
                "(`eagle3kit probe` finds them from data)",
                eng,
            )
        ]
    if cap.captures == ctx.trained:
        why = (
            "original EAGLE always trains on it"
            if ctx.no_ids
            else "which happens to be what it was trained on"
        )
        return [warning("aux-default", f"{where}, {why}; explicit ids are safer", eng)]
    return []


def _aux_findings(sel: E.EngineSel, cap: E.Capture, ctx: AuxContext) -> list[Finding]:
    eng, L = sel.name, ctx.num_layers
    hi = L if cap.allow_last else L - 1
    if any(not 0 <= i <= hi for i in cap.captures):
        return [
            error(
                "aux-out-of-range",
                f"{sel.label} would capture h{cap.captures} ({cap.why}), outside [0, {hi}]",
                eng,
            )
        ]
    out = _default_findings(sel, cap, ctx) if cap.read_from is None else []
    if out:
        return out
    trained = ctx.trained
    if isinstance(trained, list):
        if cap.captures != trained:
            out.append(
                error(
                    "aux-convention",
                    f"{sel.label} captures h{cap.captures} ({cap.why}), but the drafter was "
                    f"trained on h{trained} ({ctx.writer.name}'s reading); {_fix(eng, ctx)}",
                    eng,
                )
            )
        return out
    match = [r for r, h in trained.items() if h == cap.captures]
    serves = {r: E.releases_capturing(eng, ctx.family, ctx.ids, L, h) for r, h in trained.items()}
    per = "; ".join(
        f"{MEANS[r]}: {', '.join(v) or 'no ' + E.DISPLAY[eng] + ' release'}"
        for r, v in serves.items()
    )
    if match:
        other = next(r for r in trained if r not in match)
        out.append(
            warning(
                "aux-ambiguous",
                f"{sel.label} captures h{cap.captures} ({cap.why}): right if the ids are "
                f"{MEANS[match[0]]}, wrong if they are {MEANS[other]}, and no marker names the "
                "writer. "
                f"Releases right under each reading: {per}. {PROBE}",
                eng,
            )
        )
    else:
        out.append(
            error(
                "aux-convention",
                f"{sel.label} captures h{cap.captures} ({cap.why}), right under neither reading "
                f"of the ids ({per}). {PROBE}",
                eng,
            )
        )
    return out


def _older_findings(sel: E.EngineSel, ctx: AuxContext) -> list[Finding]:
    """Without a version, name the releases users still run that capture other layers."""
    if sel.version is not None:
        return []
    out = []
    for label, cap in E.other_releases(sel.name, ctx.family, ctx.ids, ctx.num_layers):
        notes = [
            n
            for (eng, v), n in E.VERSION_NOTES.items()
            if eng == sel.name and ".".join(map(str, v)) in label
        ]
        note = f" ({'; '.join(notes)})" if notes else ""
        out.append(
            warning(
                "aux-older-releases",
                f"{label} captures h{cap}{note}{_verdict_on(cap, ctx.trained)}; "
                f"pass --engine {sel.name}@VERSION for the rules of the release you run",
                sel.name,
            )
        )
    return out


def _verdict_on(cap: list[int], trained: list[int] | dict[str, list[int]] | None) -> str:
    """', right for this drafter' / ', wrong for ...' / ', right if the ids are ...'."""
    if isinstance(trained, list):
        return (
            ", right for this drafter"
            if cap == trained
            else f", wrong for this drafter (trained on h{trained})"
        )
    hit = [r for r, h in (trained or {}).items() if h == cap]
    return f", right if the ids are {MEANS[hit[0]]}" if hit else ""


def _flag_findings(sel: E.EngineSel, spec: DraftSpec, family: str) -> list[Finding]:
    att = getattr(spec, "attention", "mha")
    out = []
    for flag in NORM_FLAGS:
        if getattr(spec, flag) and not E.flag_rule(sel.name, flag, att, family, sel.version):
            where = [
                f"{', '.join(sorted(r.attention))} drafters on "
                f"{'/'.join(sorted(r.families)) if len(r.families) < 3 else 'all'} "
                f"targets{' from ' + '.'.join(map(str, r.since)) if r.since else ''} ({r.source})"
                for r in E.FLAG_RULES
                if r.engine == sel.name and r.flag == flag
            ]
            out.append(
                error(
                    "norm-flag",
                    f"{flag}=true: {sel.label} ignores it for an {att.upper()} drafter on a "
                    f"{family} target (implemented for: {'; '.join(where) or 'none'})",
                    sel.name,
                )
            )
    if spec.qk_norm:
        sev = "error" if sel.name == "sglang" else "warning"
        out.append(
            Finding(
                sev,
                "qk-norm",
                f"q_norm/k_norm tensors (Qwen3-style layer) are not part of {sel.label}'s Llama "
                "EAGLE-3 layer",
                sel.name,
            )
        )
    return out + eagle3_window_findings(sel, spec)


def _arch_findings(sel: E.EngineSel, spec: DraftSpec, names: dict[str, str]) -> list[Finding]:
    """The drafter class the engine must map, and the tensor names it would skip silently."""
    rule, out = E.arch_rule(sel.name, spec.architecture), []
    if rule is None:
        want = ", ".join(sorted(E.architectures(sel.name)))
        hint = " (convert with `eagle3kit convert --to sglang`)" if sel.name == "sglang" else ""
        out.append(
            error(
                "architecture",
                f"architectures: expected one of [{want}] for {sel.label}, found "
                f"{spec.architecture!r}{hint}",
                sel.name,
            )
        )
        att = getattr(spec, "attention", "mha")  # were it only renamed: which names would load?
        rule = E.arch_rule(sel.name, E.architectures(sel.name, att)[0])
    layer = ("midlayer.", "layers.0.", "model.layers.0.")
    skipped = sorted(
        s for s in names.values() if s.startswith(layer) and not s.startswith(rule.loads)
    )
    if skipped:
        out.append(
            error(
                "skipped-names",
                f"{len(skipped)} tensors named {skipped[0].rsplit('.', 2)[0]}.* would be silently "
                "skipped by "
                f"{sel.label} (it loads {', '.join(p + '*' for p in rule.loads)}; the layer would "
                "stay random); "
                f"{_fix(sel.name)}",
                sel.name,
            )
        )
    return out


def _config_findings(sel: E.EngineSel, config: dict[str, Any]) -> list[Finding]:
    """The engine refuses the drafter's config.json before it reads the architecture."""
    hit = E.config_refusal(sel.name, config)
    if hit is None:
        return []
    key, source = hit
    return [
        error(
            "config-parse",
            f"config.json: no top-level {key}: {sel.label} refuses the drafter at config "
            f"parsing (transformers' AutoConfig: \"Should have a `{key}` key in its "
            f'config.json"; {source}), before it reads the architecture or any tensor; '
            f"`eagle3kit convert --to {sel.name} --verifier TARGET_DIR` writes a config it reads",
            sel.name,
        )
    ]


def _vllm_refusals(
    sel: E.EngineSel, d: Checkpoint, spec: DraftSpec, names: dict[str, str], vocab: int
) -> list[Finding]:
    """Files vLLM refuses outright (engine_check on 0.21.0 and 0.33.0; sources in
    engines/files.py)."""
    if sel.name != "vllm":
        return []
    out, mt = [], d.config.get("model_type")
    if spec.is_mla and mt in E.VLLM_MTP_MODEL_TYPES:
        out.append(
            f"model_type {mt!r}: vLLM turns a draft config of this type into its DeepSeek MTP "
            "model and then finds no such EAGLE-3 class ('Model architectures "
            f"['Eagle3DeepSeekMTPModel'] are not supported'; {E.VLLM_MTP_SOURCE}), an "
            "upstream defect; `eagle3kit convert --to vllm` writes model_type "
            f"{E.VLLM_MLA_MODEL_TYPE!r}, which vLLM reads with the same DeepseekV3Config"
        )
    full_vocab = spec.draft_vocab_size == vocab
    if "d2t" in names and full_vocab and E.vllm_refuses_full_vocab_d2t(sel.version):
        out.append(
            f"d2t: a full-vocabulary drafter ({vocab} of {vocab}) carrying d2t fails to load "
            "(vLLM has no draft_id_to_target_id parameter then; "
            f"{E.VLLM_FULL_VOCAB_D2T_SOURCE}; vLLM 0.21 loads it); `eagle3kit convert --to "
            "vllm` leaves it out"
        )
    fc_norms = sorted(n for n in names if n.startswith("fc_norm."))
    has_fc_norm = E.flag_rule("vllm", "fc_norm", "mha", "llama", sel.version)  # every family
    if fc_norms and not spec.is_mla and not has_fc_norm:
        out.append(
            f"{fc_norms[0]} (fc_norm): vLLM before 0.22 has no fc_norm, and its load_weights "
            "fails on the tensor (KeyError; vllm 0.21.0 models/llama_eagle3.py, engine check)"
        )
    if spec.is_mla and "input_norm.weight" in names:
        out.append(
            "input_norm.weight (norm_before_fc): vLLM's MLA drafter class has no input_norm, and "
            "its load_weights fails on the tensor (vllm 0.33 models/deepseek_eagle3.py)"
        )
    return [error("engine-refuses", f"{sel.label} refuses the file: {m}", "vllm") for m in out]


def _runner_findings(sel: E.EngineSel, cap: E.Capture, ctx: AuxContext) -> list[Finding]:
    """vLLM's V1 model runner reading other ids than the default (V2) runner."""
    v1 = E.capture(sel.name, sel.version, ctx.family, ctx.ids, ctx.num_layers, runner="v1")
    if v1.captures == cap.captures:
        return []
    return [
        warning(
            "aux-runner",
            f"{sel.label} with the V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0, or no Triton) "
            f"captures h{v1.captures} ({v1.why}){_verdict_on(v1.captures, ctx.trained)}; the "
            f"V2 runner, the default on CUDA, captures h{cap.captures}",
            sel.name,
        )
    ]


def _engine_entry(sel: E.EngineSel, cap: E.Capture, ctx: AuxContext) -> dict[str, Any]:
    entry = {
        "label": sel.label,
        "version": sel.version_text,
        "rules": E.band_label(sel.name, sel.version),
        "family": ctx.family,
        "reads": cap.read_from,
        "ids": cap.ids,
        "captures": cap.captures,
        "why": cap.why,
        "sources": list(cap.sources),
        "trained_on": ctx.trained,
        "writer": ctx.writer.to_json(),
    }
    if isinstance(ctx.trained, dict):
        entry["serves_if"] = {
            r: E.releases_capturing(sel.name, ctx.family, ctx.ids, ctx.num_layers, h)
            for r, h in ctx.trained.items()
        }
    return entry


def check_against_target(d: Checkpoint, t: Checkpoint, engines: list[E.EngineSel]) -> CompatResult:
    """The serving question: will each engine release run this drafter on this target as trained?"""
    head = drafter_header(d)
    spec, names = head.spec, head.names
    ti = target_info(t)
    res = CompatResult("drafter-target", d.source, t.source)
    res.findings += check_drafter(head, ti.vocab_size)
    res.findings += _target_findings(d, t, spec, ti)
    ctx = _aux_context(d, t, ti)
    res.writer = ctx.writer.to_json()
    res.findings += _writer_findings(ctx)
    out_of_range = any(f.code == "aux-out-of-range" for f in res.findings)
    for sel in engines:
        cap = E.capture(sel.name, sel.version, ctx.family, ctx.ids, ctx.num_layers)
        res.engines[sel.name] = _engine_entry(sel, cap, ctx)
        lacks = M.release_lacks(sel.name, sel.version, sel.label, method_of(spec))
        if lacks:  # EAGLE 3.1 on a release before it (which flag it ignores follows)
            res.findings.append(error("not-served", lacks, sel.name))
        if not out_of_range:
            res.findings += _aux_findings(sel, cap, ctx) + _older_findings(sel, ctx)
            res.findings += _runner_findings(sel, cap, ctx)
        refusals = _vllm_refusals(sel, d, spec, names, ti.vocab_size)
        flags = _flag_findings(sel, spec, ctx.family)
        gone = tuple(g for g in NORM_FLAGS if any(f"({g})" in f.message for f in refusals))
        flags = [f for f in flags if not (gone and f.message.startswith(gone))]  # refused
        refused = _config_findings(sel, d.config)  # nothing else is read after that
        res.findings += refusals + flags + (refused or _arch_findings(sel, spec, names))
        if sel.name == "vllm":
            cpu = engine_cpu.pairing_refusals(spec, t.config)
            res.findings += [warning("cpu-build-refuses", m, "vllm") for m in cpu]
    return res
