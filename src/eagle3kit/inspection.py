"""`eagle3kit inspect`: describe a drafter or a target from its config and headers only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eagle3kit.errors import bad
from eagle3kit.formats.layouts import is_drafter_config, read_spec
from eagle3kit.formats.safetensors_io import Checkpoint, load_checkpoint
from eagle3kit.spec import DraftSpec, default_aux_layers


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
    """Layers, hidden size and vocab of a causal LM (reads nested text_config of multimodal models)."""
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
    return is_drafter_config(ckpt.config, set(ckpt.tensors))


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
        "embed_tokens.weight": f"embed_tokens: token embedding [{v}, {h}] (engines use the target's)",
        "norm.weight": "norm: final RMSNorm before lm_head",
        "input_norm.weight": "input_norm: RMSNorm over the concatenated aux states (norm_before_fc)",
        "midlayer.input_layernorm.weight": "input_layernorm: RMSNorm of the token embedding",
        "midlayer.hidden_norm.weight": "hidden_norm: RMSNorm of the incoming hidden state",
        "midlayer.post_attention_layernorm.weight": "post_attention_layernorm: RMSNorm before the MLP",
        "midlayer.self_attn.o_proj.weight": f"o_proj: {spec.num_attention_heads}x{spec.head_dim} -> {h}",
        "midlayer.mlp.gate_proj.weight": f"mlp gate: {h} -> {spec.intermediate_size}",
        "midlayer.mlp.up_proj.weight": f"mlp up: {h} -> {spec.intermediate_size}",
        "midlayer.mlp.down_proj.weight": f"mlp down: {spec.intermediate_size} -> {h}",
    }
    if name in roles:
        return roles[name]
    for qkv, heads in (
        ("q", spec.num_attention_heads),
        ("k", spec.num_key_value_heads),
        ("v", spec.num_key_value_heads),
    ):
        if name == f"midlayer.self_attn.{qkv}_proj.weight":
            return f"{qkv}_proj: cat(embed, hidden) {2 * h} -> {heads}x{spec.head_dim}"
    if name.startswith("fc_norm."):
        return "fc_norm: RMSNorm of one aux hidden state before fc"
    if name.endswith(("q_norm.weight", "k_norm.weight")):
        return "per-head RMSNorm (Qwen3-style qk_norm)"
    return "not part of an EAGLE-3 drafter"


def vocab_map_summary(ckpt: Checkpoint, spec: DraftSpec, names: dict[str, str]) -> dict[str, Any]:
    """Read the small d2t/t2d tensors, summarise and check them (model/vocab.py); the only tensor
    bytes we read. An index tensor too large to be one is refused (read_small_tensor), never
    skipped. `problems`: [{code, message}] from vocab_problems, [] when the pair is valid."""
    import numpy as np

    from eagle3kit.model.vocab import summarise_vocab, vocab_problems

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


def inspect_checkpoint(path_or_repo: str) -> dict[str, Any]:
    """Describe a drafter (format, spec, tensors with roles, missing/unexpected) or a target."""
    ckpt = load_checkpoint(path_or_repo)
    tensors_json = []
    total = 0
    if not is_drafter(ckpt):
        info = target_info(ckpt)
        for name in sorted(ckpt.tensors):
            t = ckpt.tensors[name]
            total += t.nbytes
            tensors_json.append(
                {"name": name, "shape": list(t.shape), "dtype": t.dtype, "bytes": t.nbytes}
            )
        return {"kind": "target", "source": ckpt.source, "format": "target", "spec": None, "target": info.to_json(),
                "tensors": tensors_json, "total_bytes": total, "missing": [], "unexpected": [],
                "has_tokenizer": ckpt.has_tokenizer}  # fmt: skip
    layout, spec, names = read_spec(ckpt)
    expected = spec.expected_shapes()
    mismatches = []
    for canon in sorted(names, key=_order):
        t = ckpt.tensors[names[canon]]
        total += t.nbytes
        tensors_json.append({"name": names[canon], "canonical": canon, "shape": list(t.shape), "dtype": t.dtype,
                             "bytes": t.nbytes, "role": tensor_role(canon, spec)})  # fmt: skip
        if canon in expected and tuple(t.shape) != expected[canon]:
            mismatches.append(
                {"name": names[canon], "expected": list(expected[canon]), "found": list(t.shape)}
            )
    missing = [n for n in spec.required_tensors() if n not in names]
    unexpected = [names[n] for n in sorted(names) if n not in expected]
    vm = {k: v for k, v in vocab_map_summary(ckpt, spec, names).items() if not k.startswith("_")}
    return {"kind": "drafter", "source": ckpt.source, "format": layout, "spec": spec.to_json(),
            "tensors": tensors_json, "total_bytes": total, "missing": missing, "unexpected": unexpected,
            "shape_mismatches": mismatches, "vocab_map": vm, "has_tokenizer": ckpt.has_tokenizer}  # fmt: skip


_ORDER = ["fc.", "input_norm", "fc_norm", "midlayer.input_layernorm", "midlayer.hidden_norm", "midlayer.self_attn",
          "midlayer.post_attention_layernorm", "midlayer.mlp", "norm.", "lm_head", "d2t", "t2d", "embed_tokens"]  # fmt: skip


def _order(name: str) -> tuple[int, str]:
    for i, p in enumerate(_ORDER):
        if name.startswith(p):
            return i, name
    return len(_ORDER), name
