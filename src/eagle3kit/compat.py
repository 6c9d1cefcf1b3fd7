"""`eagle3kit compat`: is this drafter compatible with that drafter (fine-tuning) or target (serving)?

Findings carry a severity (error | warning | info), a stable code and a message naming the
field, the expected and the found value. Engine facts are pinned in FORMATS.md and checked
against sglang main (models/llama_eagle3.py, set_eagle3_layers_to_capture) and vllm main
(models/llama_eagle3.py, gpu_model_runner._get_eagle3_aux_layers_from_config), 2026-11.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.errors import Eagle3Error
from eagle3kit.formats.layouts import read_spec
from eagle3kit.formats.safetensors_io import Checkpoint, load_checkpoint
from eagle3kit.inspection import TargetInfo, is_drafter, target_info, vocab_map_summary
from eagle3kit.spec import INDEX_TENSORS, TRAINABLE_TENSORS, DraftSpec, default_aux_layers

ENGINES = ("sglang", "vllm")
# architectures each engine maps to its EAGLE-3 drafter class
ENGINE_ARCHS = {
    "sglang": {"LlamaForCausalLMEagle3"},
    "vllm": {
        "LlamaForCausalLMEagle3",
        "Eagle3LlamaForCausalLM",
        "Eagle3Speculator",
        "LlamaForCausalLM",
    },
}
# drafter flags each engine's EAGLE-3 layer implements
ENGINE_FLAGS = {"sglang": set(), "vllm": {"norm_before_residual"}}
NORM_FLAGS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
# Config keys that change no tensor and no math.
METADATA_KEYS = {
    "max_position_embeddings", "transformers_version", "max_window_layers", "torch_dtype", "dtype",
    "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "_name_or_path",
    "use_sliding_window", "sliding_window", "attention_dropout", "pretraining_tp", "speculators_version",
    "eagle3kit_verifier", "speculators_config", "embed_requires_grad", "output_router_logits",
    "tie_word_embeddings", "model_type", "architectures",
}  # fmt: skip


@dataclass
class Finding:
    severity: str  # error | warning | info
    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"severity": self.severity, "code": self.code, "message": self.message}


@dataclass
class CompatResult:
    mode: str  # drafter-drafter | drafter-target
    a: str
    b: str
    findings: list[Finding] = field(default_factory=list)
    config_diff: list[dict[str, Any]] = field(default_factory=list)
    tensors: list[dict[str, Any]] = field(default_factory=list)
    engines: dict[str, Any] = field(default_factory=dict)
    drop_in: bool = False

    @property
    def compatible(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    @property
    def verdict(self) -> str:
        n_err = sum(f.severity == "error" for f in self.findings)
        if self.mode == "drafter-drafter":
            if self.drop_in and self.compatible:
                return "drop-in compatible for fine-tuning"
            return f"not compatible for fine-tuning ({n_err} error{'s' * (n_err != 1)})"
        parts = []
        for eng in self.engines:  # an engine's errors: those naming it, plus those naming none
            others = tuple(f"{e}:" for e in self.engines if e != eng)
            n = sum(
                f.severity == "error" and not f.message.startswith(others) for f in self.findings
            )
            parts.append(
                f"{eng}: serves it correctly"
                if not n
                else f"{eng}: incompatible ({n} error{'s' * (n != 1)})"
            )
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"compatible": self.compatible, "verdict": self.verdict, "mode": self.mode, "a": self.a, "b": self.b,
                "findings": [f.to_json() for f in self.findings], "config_diff": self.config_diff,
                "tensors": self.tensors, "engines": self.engines}  # fmt: skip


# ---------------------------------------------------------------- engine conventions


def captured_layers(
    engine: str, spec: DraftSpec, layout: str, num_layers: int
) -> tuple[list[int], str]:
    """HF hidden-state indices `engine` will capture for this drafter, and why."""
    raw = spec.aux_layers_raw
    if engine == "sglang":
        if layout == "sglang" and raw:
            return [
                i + 1 for i in raw
            ], f"eagle_config ids {list(raw)} + 1 (SGLang names layer outputs)"
        return list(default_aux_layers(num_layers)), "no eagle_config ids: default [2, L//2, L-3]"
    # vLLM reads the top-level eagle_aux_hidden_state_layer_ids as HF indices; recent versions
    # also read the nested eagle_config ids, as HF indices too (no +1); older ones ignore them.
    if layout == "vllm" and raw:
        return list(raw), f"eagle_aux_hidden_state_layer_ids {list(raw)} as HF indices"
    if layout == "sglang" and raw:
        return list(raw), (
            f"eagle_config ids {list(raw)} read as HF indices, without SGLang's +1 "
            f"(older vLLM ignores them and uses the default {list(default_aux_layers(num_layers))})"
        )
    return list(default_aux_layers(num_layers)), "no ids: default [2, L//2, L-3]"


def trained_layers(spec: DraftSpec, num_layers: int) -> list[int]:
    return list(spec.aux_layers) if spec.aux_layers else list(default_aux_layers(num_layers))


# ---------------------------------------------------------------- checks on one drafter


def _drafter_findings(
    ckpt: Checkpoint, spec: DraftSpec, names: dict[str, str], target_vocab: int | None
) -> list[Finding]:
    out: list[Finding] = []
    expected = spec.expected_shapes()
    for canon, stored in names.items():
        t = ckpt.tensors[stored]
        if canon == "embed_tokens.weight":
            if tuple(t.shape) != expected[canon]:
                out.append(Finding("error", "embed-shape", f"{stored}: expected shape {list(expected[canon])} "
                                   f"([vocab_size, hidden_size]), found {list(t.shape)}"))  # fmt: skip
            continue
        if canon in expected and tuple(t.shape) != expected[canon]:
            out.append(
                Finding(
                    "error",
                    "tensor-shape",
                    f"{stored}: expected shape {list(expected[canon])} from the config, found {list(t.shape)}",
                )
            )
    if "embed_tokens.weight" not in names:
        out.append(
            Finding(
                "info",
                "embed-absent",
                "embed_tokens.weight: absent (normal: the engine uses the target's embedding)",
            )
        )
    for req in spec.required_tensors():
        if req in names:
            continue
        if req == "lm_head.weight":
            out.append(Finding("error", "missing-lm-head", f"lm_head.weight: missing, but draft_vocab_size={spec.draft_vocab_size} is declared; "
                               "SGLang warns only about unexpected keys and would serve a random head (accept length 1.00)"))  # fmt: skip
        elif req == "d2t":
            out.append(Finding("error", "missing-d2t", f"d2t: missing, but draft_vocab_size={spec.draft_vocab_size} != vocab_size={spec.vocab_size}; "
                               "engines would map draft id i to target id i"))  # fmt: skip
        else:
            out.append(Finding("error", "missing-tensor", f"{req}: missing"))
    if spec.draft_vocab_size != spec.vocab_size and "t2d" not in names:
        out.append(
            Finding(
                "warning",
                "missing-t2d",
                "t2d: missing (engines ignore it; trainers and eagle3kit use it)",
            )
        )
    vocab = target_vocab or spec.vocab_size
    vm = vocab_map_summary(ckpt, spec, names)
    if "d2t" in vm:
        d = vm["d2t"]
        if d["length"] != spec.draft_vocab_size:
            out.append(
                Finding(
                    "error",
                    "d2t-length",
                    f"d2t: expected {spec.draft_vocab_size} entries (draft_vocab_size), found {d['length']}",
                )
            )
        if d["length"]:
            tgt = vm["_d2t_targets"]
            bad_n = int(((tgt < 0) | (tgt >= vocab)).sum())
            if bad_n:
                out.append(Finding("error", "d2t-range", f"d2t: {bad_n} draft ids map outside the target vocab [0, {vocab}) "
                                   f"(draft_id + d2t[draft_id] spans {d['target_min']}..{d['target_max']})"))  # fmt: skip
            if d["duplicates"]:
                out.append(
                    Finding(
                        "error",
                        "d2t-duplicates",
                        f"d2t: {d['duplicates']} draft ids map to a target id already taken",
                    )
                )
    if "t2d" in vm:
        t = vm["t2d"]
        if t["length"] != spec.vocab_size:
            out.append(
                Finding(
                    "error",
                    "t2d-length",
                    f"t2d: expected {spec.vocab_size} entries (vocab_size), found {t['length']}",
                )
            )
        if t["count"] != spec.draft_vocab_size:
            out.append(
                Finding(
                    "error",
                    "t2d-count",
                    f"t2d: expected {spec.draft_vocab_size} target ids marked (draft_vocab_size), found {t['count']}",
                )
            )
        elif (
            "_d2t_targets" in vm
            and t["length"] == spec.vocab_size
            and not vm["d2t"]["out_of_range"]
        ):
            import numpy as np

            marked = np.flatnonzero(vm["_t2d"])
            if not np.array_equal(np.sort(vm["_d2t_targets"]), marked):
                out.append(
                    Finding("error", "d2t-t2d-disagree", "d2t and t2d name different target ids")
                )
    return out


def _engine_findings(
    engine: str, ckpt: Checkpoint, layout: str, spec: DraftSpec, names: dict[str, str]
) -> list[Finding]:
    out: list[Finding] = []
    if spec.architecture not in ENGINE_ARCHS[engine]:
        want = ", ".join(sorted(ENGINE_ARCHS[engine]))
        out.append(Finding("error", "architecture", f"{engine}: architectures: expected one of [{want}], found {spec.architecture!r}"
                           + (" (convert with `eagle3kit convert --to sglang`)" if engine == "sglang" else "")))  # fmt: skip
    for flag in NORM_FLAGS:
        if getattr(spec, flag) and flag not in ENGINE_FLAGS[engine]:
            out.append(
                Finding(
                    "error",
                    "norm-flag",
                    f"{engine}: {flag}=true is not implemented by its EAGLE-3 layer (found true, expected false)",
                )
            )
    if spec.qk_norm:
        out.append(Finding("error" if engine == "sglang" else "warning", "qk-norm",
                           f"{engine}: q_norm/k_norm tensors (Qwen3-style layer) are not part of its Llama EAGLE-3 layer"))  # fmt: skip
    if engine == "sglang":
        skipped = sorted(s for c, s in names.items() if s.startswith(("layers.", "model.layers.")))
        if skipped:
            out.append(Finding("error", "sglang-skipped-names",
                               f"sglang: {len(skipped)} tensors named {skipped[0].rsplit('.', 2)[0]}.* would be silently skipped "
                               "(SGLang loads midlayer.*; its layer would stay random); convert with `eagle3kit convert --to sglang`"))  # fmt: skip
    return out


# ---------------------------------------------------------------- comparisons


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k not in ("rope_scaling", "rope_parameters"):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _config_diff(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    fa, fb = _flatten(a), _flatten(b)
    rows = []
    for k in sorted(set(fa) | set(fb)):
        va, vb = fa.get(k, "<absent>"), fb.get(k, "<absent>")
        if va != vb:
            leaf = k.rsplit(".", 1)[-1]
            kind = (
                "metadata"
                if leaf in METADATA_KEYS or k.startswith("speculators_config.")
                else "architectural"
            )
            rows.append({"key": k, "a": va, "b": vb, "kind": kind})
    return rows


_ARCH_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                "vocab_size", "draft_vocab_size", "target_hidden_size", "rms_norm_eps", "rope_theta", "rope_scaling",
                "hidden_act", "attention_bias", "mlp_bias", "qk_norm", *NORM_FLAGS)  # fmt: skip


def compare_drafters(a: Checkpoint, b: Checkpoint) -> CompatResult:
    la, sa, na = read_spec(a)
    lb, sb, nb = read_spec(b)
    res = CompatResult("drafter-drafter", a.source, b.source)
    res.config_diff = _config_diff(a.config, b.config) if la == lb else []
    for f in _ARCH_FIELDS:
        va, vb = getattr(sa, f), getattr(sb, f)
        if va != vb:
            res.findings.append(
                Finding(
                    "error",
                    "spec-differs",
                    f"{f}: A has {va!r}, B has {vb!r} (changes tensors or math)",
                )
            )
    if la != lb:
        res.findings.append(
            Finding(
                "info",
                "layout-differs",
                f"layouts differ: A is {la}, B is {lb} (names are mapped; compared canonically)",
            )
        )
    if sa.aux_layers != sb.aux_layers:

        def say(s: DraftSpec) -> str:
            if not s.aux_layers:
                return "engine defaults (2, L//2, L-3)"
            conv = (
                f", file says {list(s.aux_layers_raw)} in SGLang's layer-output convention"
                if s.aux_convention == "sglang"
                else ""
            )
            return f"HF hidden states {list(s.aux_layers)}{conv}"

        res.findings.append(
            Finding(
                "error",
                "aux-layers-differ",
                f"aux layers: A reads {say(sa)}; B reads {say(sb)}",
            )
        )
    for row in res.config_diff:
        if row["kind"] == "metadata":
            res.findings.append(
                Finding(
                    "info",
                    "config-metadata",
                    f"{row['key']}: A {row['a']!r}, B {row['b']!r} (metadata: no tensor or math changes)",
                )
            )
    all_names = sorted(set(na) | set(nb))
    trainable_ok = True
    for n in all_names:
        ta = a.tensors[na[n]] if n in na else None
        tb = b.tensors[nb[n]] if n in nb else None
        if ta and tb:
            status = (
                "match"
                if (ta.shape, ta.dtype) == (tb.shape, tb.dtype)
                else ("dtype differs" if ta.shape == tb.shape else "shape differs")
            )
        else:
            status = "only in A" if ta else "only in B"
        res.tensors.append({"name": n, "a": {"shape": list(ta.shape), "dtype": ta.dtype} if ta else None,
                            "b": {"shape": list(tb.shape), "dtype": tb.dtype} if tb else None, "status": status})  # fmt: skip
        trainable = (
            n in TRAINABLE_TENSORS
            or n.startswith(("fc_norm.", "input_norm"))
            or n.endswith(("q_norm.weight", "k_norm.weight"))
        )
        if trainable and status in ("shape differs", "only in A", "only in B"):
            trainable_ok = False
            res.findings.append(
                Finding(
                    "error",
                    "tensor-differs",
                    f"{n}: {status} (A {ta.shape if ta else '-'}, B {tb.shape if tb else '-'})",
                )
            )
        elif status == "dtype differs":
            res.findings.append(
                Finding(
                    "warning",
                    "dtype-differs",
                    f"{n}: A is {ta.dtype}, B is {tb.dtype} (cast when fine-tuning)",
                )
            )
        elif n in INDEX_TENSORS and status != "match":
            res.findings.append(Finding("warning", "index-differs", f"{n}: {status}"))
        elif n == "embed_tokens.weight" and status != "match":
            res.findings.append(
                Finding(
                    "info",
                    "embed-differs",
                    f"embed_tokens.weight: {status} (frozen; the target's is used)",
                )
            )
    for ckpt, spec, names, tag in ((a, sa, na, "A"), (b, sb, nb, "B")):
        for f in _drafter_findings(ckpt, spec, names, None):
            if f.severity != "info":
                res.findings.append(Finding(f.severity, f.code, f"{tag}: {f.message}"))
    res.drop_in = trainable_ok and not any(
        f.code in ("spec-differs", "aux-layers-differ") for f in res.findings
    )
    return res


def _tokenizer_digest(ckpt: Checkpoint) -> str | None:
    if ckpt.tokenizer_file and Path(ckpt.tokenizer_file).exists():
        return hashlib.sha256(Path(ckpt.tokenizer_file).read_bytes()).hexdigest()
    return None


def check_against_target(d: Checkpoint, t: Checkpoint, engines: tuple[str, ...]) -> CompatResult:
    layout, spec, names = read_spec(d)
    info: TargetInfo = target_info(t)
    res = CompatResult("drafter-target", d.source, t.source)
    res.findings += _drafter_findings(d, spec, names, info.vocab_size)
    if spec.target_hidden_size != info.hidden_size:
        res.findings.append(
            Finding(
                "error",
                "hidden-size",
                f"target_hidden_size: the target's hidden_size is {info.hidden_size}, the drafter expects {spec.target_hidden_size} (fc input {spec.fc_in_features} = 3 x {spec.target_hidden_size})",
            )
        )
    if spec.vocab_size != info.vocab_size:
        res.findings.append(
            Finding(
                "error",
                "vocab-size",
                f"vocab_size: the target has {info.vocab_size}, the drafter declares {spec.vocab_size}",
            )
        )
    if info.max_position_embeddings and spec.max_position_embeddings < info.max_position_embeddings:
        res.findings.append(
            Finding(
                "warning",
                "max-position",
                f"max_position_embeddings: drafter {spec.max_position_embeddings} is below the target's {info.max_position_embeddings}; long contexts may exceed the drafter's rope range",
            )
        )
    L = info.num_layers
    trained = trained_layers(spec, L)
    if not spec.aux_layers:
        res.findings.append(
            Finding(
                "info",
                "aux-absent",
                f"aux layer ids: absent; SGLang captures its default HF [2, L//2, L-3] = {list(default_aux_layers(L))}, vLLM likewise {list(default_aux_layers(L))}",
            )
        )
    bad_ids = [i for i in trained if not 0 <= i < L]
    if bad_ids:
        res.findings.append(
            Finding(
                "error",
                "aux-out-of-range",
                f"aux layers: {bad_ids} outside the target's hidden states [0, {L - 1}] (target has {L} layers)",
            )
        )
    dig_d, dig_t = _tokenizer_digest(d), _tokenizer_digest(t)
    if dig_d and dig_t and dig_d != dig_t:
        res.findings.append(
            Finding(
                "error",
                "tokenizer",
                "tokenizer.json: the drafter's and the target's tokenizers differ (token ids would not line up)",
            )
        )
    for eng in engines:
        cap, why = captured_layers(eng, spec, layout, L)
        res.engines[eng] = {"captures": cap, "why": why, "trained_on": trained}
        if not bad_ids and cap != trained:
            fix = (
                "eagle3kit convert --to vllm` writes top-level HF ids"
                if eng == "vllm"
                else "eagle3kit convert --to sglang` writes SGLang ids"
            )
            res.findings.append(
                Finding(
                    "error",
                    "aux-convention",
                    f"{eng}: will capture HF hidden states {cap} ({why}), but the drafter was trained on {trained}; `{fix}",
                )
            )
        elif any(not 0 <= i < L for i in cap) and not bad_ids:
            res.findings.append(
                Finding(
                    "error", "aux-out-of-range", f"{eng}: would capture {cap}, outside [0, {L - 1}]"
                )
            )
        res.findings += _engine_findings(eng, d, layout, spec, names)
    return res


def compat(a: str, b: str, engine: str = "both") -> CompatResult:
    """Compare two drafters (fine-tuning) or a drafter and a target (serving, per engine)."""
    if engine not in ("sglang", "vllm", "both"):
        raise Eagle3Error(f"--engine: expected sglang, vllm or both, found {engine!r}")
    engines = ENGINES if engine == "both" else (engine,)
    ca, cb = load_checkpoint(a), load_checkpoint(b)
    da, db = is_drafter(ca), is_drafter(cb)
    if da and db:
        return compare_drafters(ca, cb)
    if da or db:
        return (
            check_against_target(ca, cb, engines) if da else check_against_target(cb, ca, engines)
        )
    raise Eagle3Error(f"{a} and {b}: both are target models; compat needs at least one drafter")
