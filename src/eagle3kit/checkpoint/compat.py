"""`eagle3kit compat`: is this drafter compatible with that drafter (fine-tuning) or target (serving)?

Findings carry a severity (error | warning | info), a stable code, a message naming the field,
the expected and the found value, and the engine they concern (`engine`, None for all).

Serving is checked per engine release (formats/engines.py, the tables of FORMATS.md): for
ids X read from the drafter's config, the engine captures h-indices C(X) (h[x+1], h[x], or
SGLang >= 0.5.13's DeepSeek/Kimi rule), or its default h[2, L//2, L-3] when it reads none.
The drafter was trained on T = the writer's reading of X (formats/writers.py): h[x+1] for
layer-output writers, h[x] for h-index writers, our own key when eagle3kit wrote it. The
engine serves it correctly iff C(X) = T; with an unknown writer T has two candidates, and
`eagle3kit probe` picks one from data.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint import engines as E
from eagle3kit.checkpoint.inspection import TargetInfo, is_drafter, target_info
from eagle3kit.checkpoint.reader import drafter_header
from eagle3kit.checkpoint.safetensors_io import Checkpoint, load_checkpoint
from eagle3kit.checkpoint.writers import Writer, infer_writer, pattern_hint, trained_on
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.spec import NORM_FLAGS, TRAINABLE_TENSORS, DraftSpec

ENGINES = E.ENGINES
# Config keys that change no tensor and no math.
METADATA_KEYS = {
    "max_position_embeddings",
    "transformers_version",
    "max_window_layers",
    "torch_dtype",
    "dtype",
    "use_cache",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "initializer_range",
    "_name_or_path",
    "use_sliding_window",
    "sliding_window",
    "attention_dropout",
    "pretraining_tp",
    "speculators_version",
    "eagle3kit_verifier",
    "speculators_config",
    "embed_requires_grad",
    "output_router_logits",
    "tie_word_embeddings",
    "model_type",
    "architectures",
    "_torchspec_version",
}
EVIDENCE_DEFAULT = (
    "vLLM PR #50170: a drafter served on the default layers ran at accept length "
    "1.036, 0.70-0.79x the speed of plain decoding"
)
PROBE = "`eagle3kit probe` measures acceptance under each reading and settles it"
MEANS = {
    "layer_output": "layer outputs (id x = h[x+1]: SpecForge, ModelOpt, TorchSpec)",
    "h_index": "h-indices (id x = h[x]: speculators, EAGLE)",
}


@dataclass
class Finding:
    severity: str  # error | warning | info
    code: str
    message: str
    engine: str | None = None  # the engine it concerns; None: every engine

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "engine": self.engine,
        }


def error(code: str, message: str, engine: str | None = None) -> Finding:
    return Finding("error", code, message, engine)


def warning(code: str, message: str, engine: str | None = None) -> Finding:
    return Finding("warning", code, message, engine)


def info(code: str, message: str, engine: str | None = None) -> Finding:
    return Finding("info", code, message, engine)


@dataclass
class CompatResult:
    mode: str  # drafter-drafter | drafter-target
    a: str
    b: str
    findings: list[Finding] = field(default_factory=list)
    config_diff: list[dict[str, Any]] = field(default_factory=list)
    tensors: list[dict[str, Any]] = field(default_factory=list)
    engines: dict[str, Any] = field(default_factory=dict)
    writer: dict[str, Any] | None = None
    drop_in: bool = False

    @property
    def compatible(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def errors_for(self, engine: str) -> int:
        """Errors that concern `engine`: its own and those concerning every engine."""
        return sum(f.severity == "error" and f.engine in (None, engine) for f in self.findings)

    @property
    def verdict(self) -> str:
        n_err = sum(f.severity == "error" for f in self.findings)
        if self.mode == "drafter-drafter":
            if self.drop_in and self.compatible:
                return "drop-in compatible for fine-tuning"
            return f"not compatible for fine-tuning ({n_err} error{'s' * (n_err != 1)})"
        parts = []
        for eng, e in self.engines.items():
            n = self.errors_for(eng)
            amb = any(f.code == "aux-ambiguous" and f.engine == eng for f in self.findings)
            ok = "serves it correctly" + (
                " only under one reading of its ids (run `eagle3kit probe`)" if amb else ""
            )
            ok = ok if not n else f"incompatible ({n} error{'s' * (n != 1)})"
            parts.append(f"{e['label']}: {ok}")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "compatible": self.compatible,
            "verdict": self.verdict,
            "mode": self.mode,
            "a": self.a,
            "b": self.b,
            "findings": [f.to_json() for f in self.findings],
            "config_diff": self.config_diff,
            "tensors": self.tensors,
            "engines": self.engines,
            "writer": self.writer,
        }


# ---------------------------------------------------------------- one drafter alone


def _shape_findings(ckpt: Checkpoint, spec: DraftSpec, names: dict[str, str]) -> list[Finding]:
    expected = spec.expected_shapes()
    out = []
    for canon, stored in names.items():
        shape = tuple(ckpt.tensors[stored].shape)
        if canon not in expected or shape == expected[canon]:
            continue
        if canon == "embed_tokens.weight":
            out.append(
                error(
                    "embed-shape",
                    f"{stored}: expected shape {list(expected[canon])} "
                    f"([vocab_size, hidden_size]), found {list(shape)}",
                )
            )
        else:
            out.append(
                error(
                    "tensor-shape",
                    f"{stored}: expected shape {list(expected[canon])} "
                    f"from the config, found {list(shape)}",
                )
            )
    return out


def _presence_findings(spec: DraftSpec, names: dict[str, str]) -> list[Finding]:
    out = []
    if "embed_tokens.weight" not in names:
        out.append(
            info(
                "embed-absent",
                "embed_tokens.weight: absent (normal: the engine uses the target's embedding)",
            )
        )
    for req in spec.required_tensors():
        if req in names:
            continue
        if req == "lm_head.weight":
            out.append(
                error(
                    "missing-lm-head",
                    f"lm_head.weight: missing, but draft_vocab_size={spec.draft_vocab_size} is declared; "
                    "SGLang warns only about unexpected keys and would serve a random head (accept length 1.00)",
                )
            )
        elif req == "d2t":
            out.append(
                error(
                    "missing-d2t",
                    f"d2t: missing, but draft_vocab_size={spec.draft_vocab_size} != vocab_size={spec.vocab_size}; "
                    "engines would map draft id i to target id i",
                )
            )
        else:
            out.append(error("missing-tensor", f"{req}: missing"))
    if spec.draft_vocab_size != spec.vocab_size and "t2d" not in names:
        out.append(
            warning(
                "missing-t2d", "t2d: missing (engines ignore it; trainers and eagle3kit use it)"
            )
        )
    return out


def _vocab_findings(
    ckpt: Checkpoint, spec: DraftSpec, names: dict[str, str], vocab: int
) -> list[Finding]:
    """d2t/t2d read (they are small) and checked by model/vocab.py, plus their sizes."""
    from eagle3kit.core.vocab import vocab_problems

    d2t = ckpt.read_small_tensor(names["d2t"]).reshape(-1) if "d2t" in names else None
    t2d = ckpt.read_small_tensor(names["t2d"]).reshape(-1) if "t2d" in names else None
    out = []
    if d2t is not None and len(d2t) != spec.draft_vocab_size:
        out.append(
            error(
                "d2t-length",
                f"d2t: expected {spec.draft_vocab_size} entries (draft_vocab_size), found {len(d2t)}",
            )
        )
    if t2d is not None and int(t2d.astype(bool).sum()) != spec.draft_vocab_size:
        out.append(
            error(
                "t2d-count",
                f"t2d: expected {spec.draft_vocab_size} target ids marked (draft_vocab_size), "
                f"found {int(t2d.astype(bool).sum())}",
            )
        )
    if d2t is not None:
        t2d_ok = t2d is not None and not out  # a t2d of another size says nothing more
        out += [error(c, m) for c, m in vocab_problems(d2t, t2d if t2d_ok else None, vocab)]
    elif t2d is not None and len(t2d) != vocab:
        out.append(
            error("t2d-length", f"t2d: expected {vocab} entries (vocab_size), found {len(t2d)}")
        )
    return out


def drafter_findings(
    ckpt: Checkpoint, spec: DraftSpec, names: dict[str, str], target_vocab: int | None = None
) -> list[Finding]:
    """What is wrong with a drafter on its own: shapes vs config, missing tensors, vocab map."""
    vocab = target_vocab or spec.vocab_size
    return (
        _shape_findings(ckpt, spec, names)
        + _presence_findings(spec, names)
        + _vocab_findings(ckpt, spec, names, vocab)
    )


# ---------------------------------------------------------------- drafter vs drafter


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
            meta = k.rsplit(".", 1)[-1] in METADATA_KEYS or k.startswith("speculators_config.")
            rows.append(
                {"key": k, "a": va, "b": vb, "kind": "metadata" if meta else "architectural"}
            )
    return rows


_ARCH_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "draft_vocab_size",
    "target_hidden_size",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "hidden_act",
    "attention_bias",
    "mlp_bias",
    "qk_norm",
    "attention",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    *NORM_FLAGS,
)


def _aux_candidates(c: Checkpoint) -> tuple[set[tuple[int, ...]], str]:
    """The h-index lists a drafter may have been trained on (one when the writer is known, both
    readings when not, empty when the file holds no ids), and how that was read."""
    ids = E.file_ids(c.config, c.config_file)
    w = infer_writer(c.config, set(c.tensors), c.config_file, c.source)
    if w.reading != "explicit" and not any(ids.values()):
        return set(), "no ids (the engine's default for the target's L)"
    t = trained_on(w, c.config, ids, 0, c.config_file)
    if isinstance(t, dict):
        return {
            tuple(h) for h in t.values()
        }, f"h{t['layer_output']} or h{t['h_index']} (writer unknown)"
    return {tuple(t)}, f"h{t} ({w.name})"


def _aux_findings_drafters(a: Checkpoint, b: Checkpoint) -> list[Finding]:
    """Same aux layers? Errors when no reading agrees, a warning when only some do."""
    (ca, sa), (cb, sb) = _aux_candidates(a), _aux_candidates(b)
    if ca == cb and len(ca) <= 1:
        return []
    msg = f"aux layers: A was trained on {sa}; B on {sb}"
    if ca & cb:
        return [warning("aux-layers-ambiguous", f"{msg}: the same only under one reading; {PROBE}")]
    return [error("aux-layers-differ", msg)]


def _spec_findings(la: str, sa: DraftSpec, lb: str, sb: DraftSpec) -> list[Finding]:
    out = [
        error(
            "spec-differs",
            f"{f}: A has {getattr(sa, f, None)!r}, B has {getattr(sb, f, None)!r} (changes tensors or math)",
        )
        for f in _ARCH_FIELDS
        if getattr(sa, f, None) != getattr(sb, f, None)
    ]
    if la != lb:
        out.append(
            info(
                "layout-differs",
                f"layouts differ: A is {la}, B is {lb} (names are mapped; compared canonically)",
            )
        )
    return out


def _is_trainable(n: str) -> bool:
    return (
        n in TRAINABLE_TENSORS
        or n.startswith(("fc_norm.", "input_norm", "midlayer.self_attn."))
        or n.endswith(("q_norm.weight", "k_norm.weight"))
    )


def _tensor_row(n: str, ta: Any, tb: Any) -> tuple[dict[str, Any], Finding | None]:
    if ta and tb:
        same_shape = ta.shape == tb.shape
        status = (
            "match"
            if same_shape and ta.dtype == tb.dtype
            else ("dtype differs" if same_shape else "shape differs")
        )
    else:
        status = "only in A" if ta else "only in B"
    row = {
        "name": n,
        "a": {"shape": list(ta.shape), "dtype": ta.dtype} if ta else None,
        "b": {"shape": list(tb.shape), "dtype": tb.dtype} if tb else None,
        "status": status,
    }
    if _is_trainable(n) and status in ("shape differs", "only in A", "only in B"):
        return row, error(
            "tensor-differs",
            f"{n}: {status} (A {ta.shape if ta else '-'}, B {tb.shape if tb else '-'})",
        )
    if status == "dtype differs":
        return row, warning(
            "dtype-differs", f"{n}: A is {ta.dtype}, B is {tb.dtype} (cast when fine-tuning)"
        )
    if n in ("d2t", "t2d") and status != "match":
        return row, warning("index-differs", f"{n}: {status}")
    if n == "embed_tokens.weight" and status != "match":
        return row, info(
            "embed-differs", f"embed_tokens.weight: {status} (frozen; the target's is used)"
        )
    return row, None


def compare_drafters(a: Checkpoint, b: Checkpoint) -> CompatResult:
    """The fine-tuning question: can B's weights start from A's (same tensors, same math)?"""
    ha, hb = drafter_header(a), drafter_header(b)
    la, sa, na = ha.layout, ha.spec, ha.names
    lb, sb, nb = hb.layout, hb.spec, hb.names
    res = CompatResult("drafter-drafter", a.source, b.source)
    res.config_diff = _config_diff(a.config, b.config) if la == lb else []
    res.findings += _spec_findings(la, sa, lb, sb) + _aux_findings_drafters(a, b)
    res.findings += [
        info(
            "config-metadata",
            f"{r['key']}: A {r['a']!r}, B {r['b']!r} (metadata: no tensor or math changes)",
        )
        for r in res.config_diff
        if r["kind"] == "metadata"
    ]
    for n in sorted(set(na) | set(nb)):
        ta = a.tensors[na[n]] if n in na else None
        tb = b.tensors[nb[n]] if n in nb else None
        row, finding = _tensor_row(n, ta, tb)
        res.tensors.append(row)
        res.findings += [finding] if finding else []
    for ckpt, spec, names, tag in ((a, sa, na, "A"), (b, sb, nb, "B")):
        res.findings += [
            Finding(f.severity, f.code, f"{tag}: {f.message}")
            for f in drafter_findings(ckpt, spec, names)
            if f.severity != "info"
        ]
    blocking = ("spec-differs", "aux-layers-differ", "tensor-differs")
    res.drop_in = not any(f.code in blocking for f in res.findings)
    return res


# ---------------------------------------------------------------- drafter vs target


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
                f"target_hidden_size: the target's hidden_size is {ti.hidden_size}, the drafter expects "
                f"{spec.target_hidden_size} (fc input {spec.fc_in_features} = 3 x {spec.target_hidden_size})",
            )
        )
    if spec.vocab_size != ti.vocab_size:
        out.append(
            error(
                "vocab-size",
                f"vocab_size: the target has {ti.vocab_size}, the drafter declares {spec.vocab_size}",
            )
        )
    if ti.max_position_embeddings and spec.max_position_embeddings < ti.max_position_embeddings:
        out.append(
            warning(
                "max-position",
                f"max_position_embeddings: drafter {spec.max_position_embeddings} is below the target's "
                f"{ti.max_position_embeddings}; long contexts may exceed the drafter's rope range",
            )
        )
    dig_d, dig_t = _tokenizer_digest(d), _tokenizer_digest(t)
    if dig_d and dig_t and dig_d != dig_t:
        out.append(
            error(
                "tokenizer",
                "tokenizer.json: the drafter's and the target's tokenizers differ (token ids would not line up)",
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


def _fix(eng: str) -> str:
    return f"`eagle3kit convert --to {eng}` writes the ids {E.DISPLAY[eng]} reads"


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
                    f"trained on h{trained} ({ctx.writer.name}'s reading); {_fix(eng)}",
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
                f"{MEANS[match[0]]}, wrong if they are {MEANS[other]}, and no marker names the writer. "
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
                f"{', '.join(sorted(r.attention))} drafters on {'/'.join(sorted(r.families)) if len(r.families) < 3 else 'all'} "
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
                f"q_norm/k_norm tensors (Qwen3-style layer) are not part of {sel.label}'s Llama EAGLE-3 layer",
                sel.name,
            )
        )
    return out


def _arch_findings(sel: E.EngineSel, spec: DraftSpec, names: dict[str, str]) -> list[Finding]:
    """The drafter class the engine must map, and the tensor names it would skip silently."""
    rule, out = E.arch_rule(sel.name, spec.architecture), []
    if rule is None:
        want = ", ".join(sorted(E.architectures(sel.name)))
        hint = " (convert with `eagle3kit convert --to sglang`)" if sel.name == "sglang" else ""
        out.append(
            error(
                "architecture",
                f"architectures: expected one of [{want}] for {sel.label}, found {spec.architecture!r}{hint}",
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
                f"{len(skipped)} tensors named {skipped[0].rsplit('.', 2)[0]}.* would be silently skipped by "
                f"{sel.label} (it loads {', '.join(p + '*' for p in rule.loads)}; the layer would stay random); "
                f"{_fix(sel.name)}",
                sel.name,
            )
        )
    return out


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
    res.findings += drafter_findings(d, spec, names, ti.vocab_size)
    res.findings += _target_findings(d, t, spec, ti)
    ctx = _aux_context(d, t, ti)
    res.writer = ctx.writer.to_json()
    res.findings += _writer_findings(ctx)
    out_of_range = any(f.code == "aux-out-of-range" for f in res.findings)
    for sel in engines:
        cap = E.capture(sel.name, sel.version, ctx.family, ctx.ids, ctx.num_layers)
        res.engines[sel.name] = _engine_entry(sel, cap, ctx)
        res.findings += (
            [] if out_of_range else _aux_findings(sel, cap, ctx) + _older_findings(sel, ctx)
        )
        res.findings += _flag_findings(sel, spec, ctx.family) + _arch_findings(sel, spec, names)
    return res


def captured_layers(
    engine: str,
    spec: DraftSpec,
    layout: str,
    num_layers: int,
    *,
    family: str = "llama",
    version: E.Version | None = None,
) -> tuple[list[int], str]:
    """h-indices `engine` (at `version`, None = latest) captures for a drafter described only by
    its DraftSpec: ids as the file wrote them (SGLang layout: nested; vLLM: top-level)."""
    raw = spec.aux_layers_raw
    ids = {"top": raw if layout == "vllm" else None, "nested": raw if layout == "sglang" else None}
    cap = E.capture(engine, version, family, ids, num_layers)
    return cap.captures, cap.why


def compat(a: str, b: str, engine: str = "both") -> CompatResult:
    """Compare two drafters (fine-tuning) or a drafter and a target (serving, per engine release).

    `engine`: sglang | vllm | both, each optionally @VERSION (`sglang@0.5.12`), or a comma list."""
    engines = E.parse_engines(engine)
    ca, cb = load_checkpoint(a), load_checkpoint(b)
    da, db = is_drafter(ca), is_drafter(cb)
    if da and db:
        return compare_drafters(ca, cb)
    if da or db:
        return (
            check_against_target(ca, cb, engines) if da else check_against_target(cb, ca, engines)
        )
    raise Eagle3Error(f"{a} and {b}: both are target models; compat needs at least one drafter")
