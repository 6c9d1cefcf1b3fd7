"""`eagle3kit inspect`: describe a drafter or a target from its config and headers only."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.eagle3.layouts import is_drafter_config
from eagle3kit.checkpoint.eagle3.reader import drafter_header
from eagle3kit.checkpoint.inspect_methods import MethodInspectResult, inspect_method, mtp_summary
from eagle3kit.checkpoint.io.hub_files import open_checkpoint
from eagle3kit.checkpoint.io.safetensors_io import Checkpoint
from eagle3kit.checkpoint.methods import DFLASH_FAMILY, detect_method, dflash_header, peagle_header
from eagle3kit.core.artifacts import stamp
from eagle3kit.core.errors import bad
from eagle3kit.core.spec import NORM_FLAGS, DraftSpec, default_aux_layers


@dataclass
class TargetInfo:
    architecture: str
    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int | None

    @property
    def default_aux_layers(self) -> tuple[int, int, int]:
        return default_aux_layers(self.num_layers)

    def to_json(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "model_type": self.model_type,
            "num_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "default_aux_layers": list(self.default_aux_layers),
        }


def target_info(ckpt: Checkpoint) -> TargetInfo:
    """Layers, hidden size and vocab of a causal LM (reads the nested text_config of
    multimodal models)."""
    cfg, where = ckpt.config, ckpt.config_file
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    if text is not cfg:
        where = f"{where}: text_config"
    vals = {}
    for key in ("num_hidden_layers", "hidden_size", "vocab_size"):
        v = text.get(key, cfg.get(key))
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise bad(
                where,
                f"{key}: expected a positive int, found {v!r}"
                if key in text or key in cfg
                else f"{key}: missing (expected a positive int)",
            )
        vals[key] = v
    archs = cfg.get("architectures") or ["?"]
    mpe = text.get("max_position_embeddings", cfg.get("max_position_embeddings"))
    return TargetInfo(
        architecture=str(archs[0]) if isinstance(archs, list) and archs else str(archs),
        model_type=str(text.get("model_type", cfg.get("model_type", "?"))),
        num_layers=vals["num_hidden_layers"],
        hidden_size=vals["hidden_size"],
        vocab_size=vals["vocab_size"],
        max_position_embeddings=mpe if isinstance(mpe, int) else None,
    )


def is_drafter(ckpt: Checkpoint) -> bool:
    return is_drafter_config(ckpt.config, set(ckpt.names()))


def _attention_roles(spec: DraftSpec) -> dict[str, str]:
    """Roles of the midlayer.self_attn.* weights, MHA or MLA."""
    h2, n, pre = 2 * spec.hidden_size, spec.num_attention_heads, "midlayer.self_attn."
    if not spec.is_mla:
        out = {
            f"{pre}{x}_proj.weight": f"{x}_proj: cat(embed, hidden) {h2} -> {heads}x{spec.head_dim}"
            for x, heads in (
                ("q", n),
                ("k", spec.num_key_value_heads),
                ("v", spec.num_key_value_heads),
            )
        }
        out[pre + "o_proj.weight"] = f"o_proj: {n}x{spec.head_dim} -> {spec.hidden_size}"
        return out
    nope, rope, v = spec.qk_nope_head_dim, spec.qk_rope_head_dim, spec.v_head_dim
    ql, kvl = spec.q_lora_rank, spec.kv_lora_rank
    heads_qk = f"{n}x({nope} nope + {rope} rope)"
    return {
        pre + "q_proj.weight": f"q_proj (MLA, no q latent): cat(embed, hidden) {h2} -> {heads_qk}",
        pre + "q_a_proj.weight": f"q_a_proj (MLA): cat(embed, hidden) {h2} -> q latent {ql}",
        pre + "q_a_layernorm.weight": f"q_a_layernorm (MLA): RMSNorm of the q latent ({ql})",
        pre + "q_b_proj.weight": f"q_b_proj (MLA): q latent {ql} -> {heads_qk}",
        pre + "kv_a_proj_with_mqa.weight": f"kv_a_proj_with_mqa (MLA): cat(embed, hidden) {h2} -> "
        f"kv latent {kvl} + one shared rope key {rope}",
        pre + "kv_a_layernorm.weight": f"kv_a_layernorm (MLA): RMSNorm of the kv latent ({kvl})",
        pre + "kv_b_proj.weight": f"kv_b_proj (MLA): kv latent {kvl} -> "
        f"{n}x({nope} key nope + {v} value)",
        pre + "o_proj.weight": f"o_proj (MLA): {n}x{v} values -> {spec.hidden_size}",
    }


def tensor_role(name: str, spec: DraftSpec) -> str:
    """What a canonical tensor does, in words."""
    h, v, vd = spec.hidden_size, spec.vocab_size, spec.draft_vocab_size
    aux = (
        f"layers {list(spec.aux_layers)}"
        if spec.aux_layers
        else "engine-default layers (2, L//2, L-3)"
    )
    roles = {
        "fc.weight": f"fc: 3 aux hidden states ({aux}) -> {h}",
        "lm_head.weight": f"lm_head: draft vocab {vd} of target vocab {v}",
        "d2t": f"d2t: draft id -> target id offsets ({vd} entries)",
        "t2d": f"t2d: which of the {v} target ids are in the draft vocab",
        "embed_tokens.weight": f"embed_tokens: token embedding [{v}, {h}] "
        "(engines use the target's)",
        "norm.weight": "norm: final RMSNorm before lm_head",
        "input_norm.weight": "input_norm: RMSNorm over the concatenated aux states "
        "(norm_before_fc)",
        "midlayer.input_layernorm.weight": "input_layernorm: RMSNorm of the token embedding",
        "midlayer.hidden_norm.weight": "hidden_norm: RMSNorm of the incoming hidden state",
        "midlayer.post_attention_layernorm.weight": "post_attention_layernorm: "
        "RMSNorm before the MLP",
        "midlayer.mlp.gate_proj.weight": f"mlp gate: {h} -> {spec.intermediate_size}",
        "midlayer.mlp.up_proj.weight": f"mlp up: {h} -> {spec.intermediate_size}",
        "midlayer.mlp.down_proj.weight": f"mlp down: {spec.intermediate_size} -> {h}",
        **_attention_roles(spec),
    }
    if name in roles:
        return roles[name]
    if name.endswith(".bias") and name[: -len("bias")] + "weight" in roles:
        return roles[name[: -len("bias")] + "weight"].split(":")[0] + ": bias"
    if name.startswith("fc_norm."):
        return "fc_norm: RMSNorm of one aux hidden state before fc"
    if name.endswith(("q_norm.weight", "k_norm.weight")):
        return "per-head RMSNorm (Qwen3-style qk_norm)"
    return "not part of an EAGLE-3 drafter"


def eagle_variant(spec: DraftSpec) -> str:
    """Name the drafter-layer variant from its norm flags (docs/formats.md "Norm flags").

    "EAGLE 3.1" means two things: vLLM/TorchSpec's fc_norm + norm_output, and speculators'
    (PR #610) norm_before_fc + norm_output."""
    on = [f for f in NORM_FLAGS if getattr(spec, f)]
    extra = [f for f in on if f not in ("fc_norm", "norm_before_fc", "norm_output")]
    tail = f", plus {', '.join(extra)}" if extra else ""
    if spec.norm_output and spec.fc_norm and not spec.norm_before_fc:
        return f"EAGLE 3.1 (vLLM/TorchSpec: fc_norm + norm_output{tail})"
    if spec.norm_output and spec.norm_before_fc and not spec.fc_norm:
        return f"EAGLE 3.1 (speculators PR #610: norm_before_fc + norm_output{tail})"
    if not on:
        return "EAGLE-3 (original layer: no norm flags)"
    return f"EAGLE-3 with {', '.join(on)} (not one of the two EAGLE 3.1 variants)"


def vocab_map_summary(ckpt: Checkpoint, spec: DraftSpec, names: dict[str, str]) -> dict[str, Any]:
    """Read the small d2t/t2d tensors, summarise and check them (model/vocab.py); the only tensor
    bytes we read. An index tensor too large to be one is refused (read_small_tensor), never
    skipped. `problems`: [{code, message}] from vocab_problems, [] when the pair is valid."""
    import numpy as np

    from eagle3kit.core.vocab import summarise_vocab, vocab_problems

    out: dict[str, Any] = {}
    d2t = t2d = None
    if "d2t" in names:
        d2t = ckpt.read_small_tensor(names["d2t"]).reshape(-1)
        out["d2t"] = summarise_vocab(d2t, spec.vocab_size)
        out["_d2t_targets"] = np.arange(d2t.shape[0], dtype=np.int64) + d2t.astype(np.int64)
    if "t2d" in names:
        t2d = ckpt.read_small_tensor(names["t2d"]).reshape(-1)
        out["t2d"] = {"length": int(t2d.shape[0]), "count": int(t2d.astype(bool).sum())}
        out["_t2d"] = t2d.astype(bool)
    if d2t is not None:
        problems = vocab_problems(d2t, t2d, spec.vocab_size)
        out["problems"] = [{"code": c, "message": m} for c, m in problems]
    return out


@dataclass
class InspectResult:
    """What `inspect` found: a drafter (layout, spec, tensors with roles, what is missing or
    unexpected, the vocab map) or a target (its layers). `to_json()` is `inspect --json`;
    `result["key"]` reads the same document (for callers written against the dict form)."""

    kind: str  # "drafter" | "target"
    source: str
    format: str  # "sglang" | "vllm" | "eagle" | "target"
    spec: DraftSpec | None
    target: TargetInfo | None
    tensors: list[dict[str, Any]]
    total_bytes: int
    has_tokenizer: bool
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    shape_mismatches: list[dict[str, Any]] = field(default_factory=list)
    vocab_map: dict[str, Any] = field(default_factory=dict)
    variant: str | None = None  # EAGLE-3 / EAGLE 3.1 naming, from the norm flags
    absent: dict[str, Any] | None = None  # a partial target: shards its index lists, not here
    mtp: dict[str, Any] | None = None  # a target's MTP heads (inspect_methods.mtp_summary)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "role": self.kind,  # drafter | target
            "source": self.source,
            "format": self.format,
            "spec": self.spec.to_json() if self.spec else None,
            "target": self.target.to_json() if self.target else None,
            "tensors": self.tensors,
            "total_bytes": self.total_bytes,
            "missing": self.missing,
            "unexpected": self.unexpected,
            "has_tokenizer": self.has_tokenizer,
        }
        if self.kind == "target":
            doc["partial"] = self.absent
            doc["mtp"] = self.mtp
            doc["method"] = "mtp" if self.mtp and self.mtp["heads"] else None
        if self.kind == "drafter" and self.spec is not None:
            doc["method"] = "eagle3.1" if self.spec.fc_norm or self.spec.norm_output else "eagle3"
            doc.update(
                shape_mismatches=self.shape_mismatches,
                vocab_map=self.vocab_map,
                variant=self.variant,
            )
        return stamp(doc, "inspect")

    def __getitem__(self, key: str) -> Any:
        return self.to_json()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_json().get(key, default)


def _require_config(ckpt: Checkpoint) -> None:
    """A local .safetensors file without config.json beside it: say that, not `hidden_size:
    missing` for a file that does not exist."""
    if ckpt.repo_id is None and not Path(ckpt.config_file).exists():
        raise bad(
            ckpt.config_file,
            f"missing: inspect reads the config.json beside {Path(ckpt.source).name} "
            "(expected the drafter's or target's config.json in that folder)",
        )


def _inspect_target(ckpt: Checkpoint) -> InspectResult:
    info = target_info(ckpt)
    rows = [
        {"name": n, "shape": list(t.shape), "dtype": t.dtype, "bytes": t.nbytes}
        for n, t in sorted(ckpt.tensors.items())
    ]
    return InspectResult(
        "target",
        ckpt.source,
        "target",
        None,
        info,
        rows,
        sum(r["bytes"] for r in rows),
        ckpt.has_tokenizer,
        absent=_absent(ckpt),
        mtp=mtp_summary(ckpt),
    )


def _absent(ckpt: Checkpoint) -> dict[str, Any] | None:
    """A partial target: how many tensors are in shards that are not here, and which shards."""
    if not ckpt.absent:
        return None
    return {"tensors": len(ckpt.absent), "shards": ckpt.missing_shards()}


def inspect_checkpoint(path_or_repo: str) -> InspectResult | MethodInspectResult:
    """Describe a drafter (format, spec, tensors with roles, missing/unexpected) or a target;
    DFlash and P-EAGLE drafters by inspect_methods.py."""
    ckpt = open_checkpoint(path_or_repo)  # a partial target is read from its present shards
    _require_config(ckpt)
    method = detect_method(ckpt.config, ckpt.tensors)
    if method in DFLASH_FAMILY:
        return inspect_method(dflash_header(ckpt))
    if method == "peagle":
        return inspect_method(peagle_header(ckpt))
    if not is_drafter(ckpt):
        return _inspect_target(ckpt)
    head = drafter_header(ckpt)
    layout, spec, names = head.layout, head.spec, head.names
    expected = spec.expected_shapes()
    rows, mismatches = [], []
    for canon in sorted(names, key=_order):
        t = ckpt.tensors[names[canon]]
        rows.append(
            {
                "name": names[canon],
                "canonical": canon,
                "shape": list(t.shape),
                "dtype": t.dtype,
                "bytes": t.nbytes,
                "role": tensor_role(canon, spec),
            }
        )
        if canon in expected and tuple(t.shape) != expected[canon]:
            mismatches.append(
                {"name": names[canon], "expected": list(expected[canon]), "found": list(t.shape)}
            )
    vm = {k: v for k, v in vocab_map_summary(ckpt, spec, names).items() if not k.startswith("_")}
    return InspectResult(
        "drafter",
        ckpt.source,
        layout,
        spec,
        None,
        rows,
        sum(r["bytes"] for r in rows),
        ckpt.has_tokenizer,
        missing=[n for n in spec.required_tensors() if n not in names],
        unexpected=[names[n] for n in sorted(names) if n not in expected],
        shape_mismatches=mismatches,
        vocab_map=vm,
        variant=eagle_variant(spec),
    )


_ORDER = [
    "fc.",
    "input_norm",
    "fc_norm",
    "midlayer.input_layernorm",
    "midlayer.hidden_norm",
    "midlayer.self_attn.q_",
    "midlayer.self_attn.k",
    "midlayer.self_attn.v",
    "midlayer.self_attn",
    "midlayer.post_attention_layernorm",
    "midlayer.mlp",
    "norm.",
    "lm_head",
    "d2t",
    "t2d",
    "embed_tokens",
]


def _order(name: str) -> tuple[int, str]:
    for i, p in enumerate(_ORDER):
        if name.startswith(p):
            return i, name
    return len(_ORDER), name
