"""Builders for drafter and target checkpoints used by the checkpoint tests."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from eagle3kit.core.spec import DraftSpec


def tiny_spec(**kw) -> DraftSpec:
    base = dict(
        hidden_size=64,
        intermediate_size=160,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=512,
        draft_vocab_size=128,
        target_hidden_size=64,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        max_position_embeddings=1024,
        aux_layers=(2, 5, 9),
        dtype="float32",
    )
    base.update(kw)
    return DraftSpec(**base)


def write_target_config(
    d: Path,
    *,
    layers=12,
    hidden=64,
    vocab=512,
    max_pos=1024,
    arch="LlamaForCausalLM",
    tokenizer: str | None = None,
) -> Path:
    """A target model directory holding only config.json (and optionally a tokenizer.json)."""
    d.mkdir(parents=True, exist_ok=True)
    cfg = {
        "architectures": [arch],
        "model_type": "llama",
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "vocab_size": vocab,
        "max_position_embeddings": max_pos,
        "intermediate_size": 4 * hidden,
        "num_attention_heads": 4,
    }
    (d / "config.json").write_text(json.dumps(cfg))
    if tokenizer is not None:
        (d / "tokenizer.json").write_text(tokenizer)
    return d


def raw_safetensors(
    path: Path, header: dict, data: bytes = b"", header_len: int | None = None
) -> Path:
    """Write a safetensors file byte by byte, so tests can corrupt any part of it."""
    h = json.dumps(header).encode()
    n = len(h) if header_len is None else header_len
    path.write_bytes(struct.pack("<Q", n) + h + data)
    return path


def random_drafter(out: Path, spec: DraftSpec, layout: str = "sglang", seed: int = 0) -> Path:
    """A real (random-weight) drafter checkpoint written through eagle3kit's own writer."""
    import torch

    from eagle3kit.checkpoint.eagle3.convert import save_drafter
    from eagle3kit.checkpoint.eagle3.synthetic import default_vocab_map
    from eagle3kit.model.drafter import Eagle3Drafter

    torch.manual_seed(seed)
    m = Eagle3Drafter(spec)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(
                torch.randn_like(p) * (0.02 if p.dim() > 1 else 0.1)
                + (1.0 if p.dim() == 1 else 0.0)
            )
        d2t, t2d = default_vocab_map(spec)
        m.d2t.copy_(torch.from_numpy(d2t))
        m.t2d.copy_(torch.from_numpy(t2d))
    save_drafter(out, spec, m.canonical_state(with_embedding=True), layout)
    return out
