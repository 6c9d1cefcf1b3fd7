"""Eagle3Drafter against a naive reference of the docs/formats.md math, and its KV cache."""

from __future__ import annotations

import math

import pytest
import torch
from ckpt_helpers import tiny_spec

from eagle3kit.model.drafter import DraftCache, Eagle3Drafter


def _rms(x, w, eps):
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def reference_step(m: Eagle3Drafter, ids, hidden, from_aux):
    """The drafter math written out with loops and transformers' rotary helpers."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    s, p = m.spec, dict(m.named_parameters())
    eps = s.rms_norm_eps
    h = hidden @ p["fc.weight"].T if from_aux else hidden
    emb = m.embed_tokens.weight[ids]
    x = torch.cat(
        [
            _rms(emb, p["midlayer.input_layernorm.weight"], eps),
            _rms(h, p["midlayer.hidden_norm.weight"], eps),
        ],
        -1,
    )
    b, t, _ = x.shape
    q = (
        (x @ p["midlayer.self_attn.q_proj.weight"].T)
        .view(b, t, s.num_attention_heads, s.head_dim)
        .transpose(1, 2)
    )
    k = (
        (x @ p["midlayer.self_attn.k_proj.weight"].T)
        .view(b, t, s.num_key_value_heads, s.head_dim)
        .transpose(1, 2)
    )
    v = (
        (x @ p["midlayer.self_attn.v_proj.weight"].T)
        .view(b, t, s.num_key_value_heads, s.head_dim)
        .transpose(1, 2)
    )
    cfg = LlamaConfig(
        hidden_size=s.num_attention_heads * s.head_dim,
        num_attention_heads=s.num_attention_heads,
        head_dim=s.head_dim,
        rope_theta=s.rope_theta,
        max_position_embeddings=s.max_position_embeddings,
    )
    cos, sin = LlamaRotaryEmbedding(cfg)(x, torch.arange(t)[None].expand(b, t))
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    out = torch.zeros(b, s.num_attention_heads, t, s.head_dim)
    group = s.num_attention_heads // s.num_key_value_heads
    for hh in range(s.num_attention_heads):
        kk, vv = k[:, hh // group], v[:, hh // group]
        for i in range(t):
            scores = (q[:, hh, i : i + 1] @ kk[:, : i + 1].transpose(-1, -2)) / math.sqrt(
                s.head_dim
            )
            out[:, hh, i] = (scores.softmax(-1) @ vv[:, : i + 1])[:, 0]
    a = out.transpose(1, 2).reshape(b, t, -1) @ p["midlayer.self_attn.o_proj.weight"].T
    h = h + a
    y = _rms(h, p["midlayer.post_attention_layernorm.weight"], eps)
    mlp = (
        torch.nn.functional.silu(y @ p["midlayer.mlp.gate_proj.weight"].T)
        * (y @ p["midlayer.mlp.up_proj.weight"].T)
    ) @ p["midlayer.mlp.down_proj.weight"].T
    h = h + mlp
    return _rms(h, p["norm.weight"], eps) @ p["lm_head.weight"].T, h


def _random(spec, seed=0):
    torch.manual_seed(seed)
    m = Eagle3Drafter(spec)
    with torch.no_grad():
        for prm in m.parameters():
            prm.copy_(torch.randn_like(prm) * 0.1 + (1.0 if prm.dim() == 1 else 0.0))
    m.set_embedding(torch.randn(spec.vocab_size, spec.hidden_size))  # stands in for the target's
    return m


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_matches_reference(kv_heads):
    m = _random(tiny_spec(num_key_value_heads=kv_heads))
    ids = torch.randint(0, 512, (2, 6))
    aux = torch.randn(2, 6, m.spec.fc_in_features)
    with torch.no_grad():
        out = m(ids, aux)
        ref_logits, ref_h = reference_step(m, ids, aux, True)
        assert torch.allclose(out.logits, ref_logits, atol=1e-4, rtol=1e-4)
        assert torch.allclose(out.hidden, ref_h, atol=1e-4, rtol=1e-4)
        out2 = m(ids, out.hidden)  # later step: previous hidden, no fc
        ref2, _ = reference_step(m, ids, out.hidden, False)
        assert torch.allclose(out2.logits, ref2, atol=1e-4, rtol=1e-4)


def test_kv_cache_incremental_equals_full():
    m = _random(tiny_spec())
    ids = torch.randint(0, 512, (1, 9))
    aux = torch.randn(1, 9, m.spec.fc_in_features)
    with torch.no_grad():
        full = m(ids, aux).logits
        cache = DraftCache()
        a = m(ids[:, :5], aux[:, :5], cache).logits
        b = m(ids[:, 5:], aux[:, 5:], cache).logits
        assert cache.length == 9
        assert torch.allclose(torch.cat([a, b], 1), full, atol=1e-5)
        cache.crop(5)  # reject the last 4, redo them
        c = m(ids[:, 5:], aux[:, 5:], cache).logits
        assert torch.allclose(c, b, atol=1e-6)


def test_d2t_maps_to_target_ids():
    from eagle3kit.checkpoint.eagle3.synthetic import default_vocab_map

    m = _random(tiny_spec())
    d2t, _ = default_vocab_map(m.spec)
    m.d2t.copy_(torch.from_numpy(d2t))
    draft = torch.tensor([0, 1, 127])
    assert m.to_target_ids(draft).tolist() == [0, 4, 508]  # every 4th target id (512 / 128)


def test_dtype_and_norm_flags_run():
    for flags in (
        {"norm_before_residual": True},
        {"fc_norm": True},
        {"norm_before_fc": True},
        {"qk_norm": True},
        {"norm_output": True},
    ):
        m = Eagle3Drafter(tiny_spec(**flags), dtype=torch.bfloat16)
        m.set_embedding(torch.randn(512, 64))
        out = m(
            torch.zeros(1, 3, dtype=torch.long),
            torch.zeros(1, 3, m.spec.fc_in_features, dtype=torch.bfloat16),
        )
        assert out.logits.dtype == torch.bfloat16 and out.logits.shape == (1, 3, 128)
        assert set(m.state_dict()) <= set(m.spec.expected_shapes())


def test_embedding_must_match_shape():
    from eagle3kit.core.errors import Eagle3Error

    m = Eagle3Drafter(tiny_spec())
    with pytest.raises(Eagle3Error, match="embed_tokens"):
        m.set_embedding(torch.zeros(10, 64))
    m.set_embedding(torch.ones(512, 64))
    assert m.embed_loaded and torch.equal(m.embed_tokens.weight, torch.ones(512, 64))


def test_forward_refuses_a_random_embedding():
    """No embedding loaded: refuse, and say how to fix it (the target's, or a checkpoint's)."""
    from eagle3kit.core.errors import Eagle3Error

    m = Eagle3Drafter(tiny_spec())
    ids, aux = torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2, 192)
    with pytest.raises(Eagle3Error, match=r"set_embedding\(target\.embed_tokens\.weight\)"):
        m(ids, aux)
    m.load_canonical({n: t for n, t in m.state_dict().items() if n != "embed_tokens.weight"})
    with pytest.raises(Eagle3Error, match="embed_tokens"):
        m(ids, aux)
    m.load_canonical(m.state_dict())  # a checkpoint that carries embed_tokens.weight
    assert m(ids, aux).logits.shape == (1, 2, 128)
