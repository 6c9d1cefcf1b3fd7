"""compat, drafter vs drafter: can B's weights start from A's (same tensors, same math)?

Errors: an architectural config field differs (`spec-differs`), aux layers no reading agrees
on, a trainable tensor of another shape or only in one; warnings and infos for the rest
(dtype, index tensors, metadata-only config keys). Each drafter's own defects come from
checker.check_drafter, tagged with the drafter ("A" | "B") they concern.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from eagle3kit.checkpoint.eagle3.checker import check_drafter
from eagle3kit.checkpoint.eagle3.reader import drafter_header
from eagle3kit.checkpoint.eagle3.writers import infer_writer, trained_on
from eagle3kit.checkpoint.engines import rules as E
from eagle3kit.checkpoint.findings import PROBE, CompatResult, Finding, error, info, warning
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.core.spec import NORM_FLAGS, TRAINABLE_TENSORS, DraftSpec

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
            f"{f}: A has {getattr(sa, f, None)!r}, B has {getattr(sb, f, None)!r} (changes tensors "
            "or math)",
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


def _config_findings(rows: list[dict[str, Any]]) -> list[Finding]:
    return [
        info(
            "config-metadata",
            f"{r['key']}: A {r['a']!r}, B {r['b']!r} (metadata: no tensor or math changes)",
        )
        for r in rows
        if r["kind"] == "metadata"
    ]


def compare_drafters(a: Checkpoint, b: Checkpoint) -> CompatResult:
    """The fine-tuning question: can B's weights start from A's (same tensors, same math)?"""
    ha, hb = drafter_header(a), drafter_header(b)
    na, nb = ha.names, hb.names
    res = CompatResult("drafter-drafter", a.source, b.source)
    res.config_diff = _config_diff(a.config, b.config) if ha.layout == hb.layout else []
    res.findings += _spec_findings(ha.layout, ha.spec, hb.layout, hb.spec)
    res.findings += _aux_findings_drafters(a, b) + _config_findings(res.config_diff)
    for n in sorted(set(na) | set(nb)):
        ta = a.tensors[na[n]] if n in na else None
        tb = b.tensors[nb[n]] if n in nb else None
        row, finding = _tensor_row(n, ta, tb)
        res.tensors.append(row)
        res.findings += [finding] if finding else []
    for head, tag in ((ha, "A"), (hb, "B")):
        own = [f for f in check_drafter(head) if f.severity != "info"]
        res.findings += [replace(f, drafter=tag) for f in own]
    blocking = ("spec-differs", "aux-layers-differ", "tensor-differs")
    res.drop_in = not any(f.code in blocking for f in res.findings)
    return res
