"""MLA drafters: the DeepSeek-V3 latent-attention drafter against a loop-by-loop reference,
transformers' own DeepseekV3Attention, its KV cache, specs sized for a target, and the
Kimi-K2.5 MLA drafter's layouts (inspect, convert round trips)."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.spec import DraftSpec, spec_for_target
from eagle3kit.model.drafter import DraftCache, Eagle3Drafter, causal_mask

YARN = {
    "type": "yarn",
    "factor": 40.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 64,
    "beta_fast": 32,
    "beta_slow": 1,
}


def mla_spec(**kw) -> DraftSpec:
    base = dict(
        hidden_size=32,
        intermediate_size=48,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=12,
        vocab_size=96,
        draft_vocab_size=40,
        target_hidden_size=24,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        max_position_embeddings=2560,
        aux_layers=(2, 4, 6),
        dtype="float32",
        attention="mla",
        q_lora_rank=16,
        kv_lora_rank=12,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=10,
        architecture="Eagle3DeepseekV2ForCausalLM",
        model_type="kimi_k2",
    )
    base.update(kw)
    return DraftSpec(**base)


def random_mla(spec: DraftSpec, seed: int = 0) -> Eagle3Drafter:
    torch.manual_seed(seed)
    m = Eagle3Drafter(spec)
    with torch.no_grad():
        for prm in m.parameters():
            prm.copy_(torch.randn_like(prm) * 0.2 + (1.0 if prm.dim() == 1 else 0.0))
    m.set_embedding(torch.randn(spec.vocab_size, spec.hidden_size))
    return m


# ---------------------------------------------------------------- the reference, by hand


def _rms(x, w, eps=1e-6):
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def _rope_tables(spec: DraftSpec):
    """inv_freq [rope/2] and the cos/sin factor, from transformers' DeepSeek-V3 rotary module."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    cfg = DeepseekV3Config(
        hidden_size=spec.hidden_size,
        num_attention_heads=spec.num_attention_heads,
        qk_nope_head_dim=spec.qk_nope_head_dim,
        qk_rope_head_dim=spec.qk_rope_head_dim,
        v_head_dim=spec.v_head_dim,
        rope_theta=spec.rope_theta,
        max_position_embeddings=spec.max_position_embeddings,
        rope_scaling=spec.rope_scaling,
    )
    rot = DeepseekV3RotaryEmbedding(cfg)
    return rot.inv_freq.double(), float(rot.attention_scaling)


def _rotate_pairs(vec, pos: int, inv, att):
    """DeepSeek rope: adjacent pair (vec[2i], vec[2i+1]) rotates by pos * inv[i]."""
    out = vec.clone()
    for i in range(len(inv)):
        a, b = vec[2 * i], vec[2 * i + 1]
        c, s = math.cos(pos * inv[i]) * att, math.sin(pos * inv[i]) * att
        out[2 * i], out[2 * i + 1] = a * c - b * s, b * c + a * s
    return out


def mla_attention_reference(m: Eagle3Drafter, x, pos):
    """MLA over x [B, T, 2H] with a causal mask, one batch row, position and head at a time."""
    s, p = m.spec, {k: v.double() for k, v in m.state_dict().items()}
    a = "midlayer.self_attn."
    n, nope, rope, vd, kvl = (
        s.num_attention_heads,
        s.qk_nope_head_dim,
        s.qk_rope_head_dim,
        s.v_head_dim,
        s.kv_lora_rank,
    )
    inv, att = _rope_tables(s)
    scale = (nope + rope) ** -0.5
    rs = s.rope_scaling or {}
    if rs.get("mscale_all_dim"):  # DeepSeek-V3: softmax scale x mscale^2 under yarn
        scale *= (0.1 * rs["mscale_all_dim"] * math.log(rs["factor"]) + 1.0) ** 2
    x = x.double()
    b_, t_ = x.shape[:2]
    out = torch.zeros(b_, t_, s.hidden_size, dtype=torch.float64)
    for b in range(b_):
        keys, vals = [], []
        for t in range(t_):
            ckv = p[a + "kv_a_proj_with_mqa.weight"] @ x[b, t]
            c = _rms(ckv[:kvl], p[a + "kv_a_layernorm.weight"])
            k_pe = _rotate_pairs(ckv[kvl:], int(pos[b, t]), inv, att)
            kv = (p[a + "kv_b_proj.weight"] @ c).view(n, nope + vd)
            keys.append([torch.cat([kv[h, :nope], k_pe]) for h in range(n)])
            vals.append([kv[h, nope:] for h in range(n)])
        for t in range(t_):
            q_lat = _rms(p[a + "q_a_proj.weight"] @ x[b, t], p[a + "q_a_layernorm.weight"])
            q_all = (p[a + "q_b_proj.weight"] @ q_lat).view(n, nope + rope)
            heads = []
            for h in range(n):
                q = torch.cat(
                    [q_all[h, :nope], _rotate_pairs(q_all[h, nope:], int(pos[b, t]), inv, att)]
                )
                scores = torch.stack([q @ keys[j][h] * scale for j in range(t + 1)])
                w = scores.softmax(0)
                heads.append(sum(w[j] * vals[j][h] for j in range(t + 1)))
            out[b, t] = p[a + "o_proj.weight"] @ torch.cat(heads)
    return out


def mla_step_reference(m: Eagle3Drafter, ids, hidden, from_aux, pos):
    """One whole draft step (docs/formats.md) around the MLA reference, in float64."""
    p = {k: v.double() for k, v in m.state_dict().items()}
    h = hidden.double() @ p["fc.weight"].T if from_aux else hidden.double()
    emb = p["embed_tokens.weight"][ids]
    x = torch.cat(
        [
            _rms(emb, p["midlayer.input_layernorm.weight"]),
            _rms(h, p["midlayer.hidden_norm.weight"]),
        ],
        -1,
    )
    h = h + mla_attention_reference(m, x, pos)
    y = _rms(h, p["midlayer.post_attention_layernorm.weight"])
    g, u = y @ p["midlayer.mlp.gate_proj.weight"].T, y @ p["midlayer.mlp.up_proj.weight"].T
    h = h + (torch.nn.functional.silu(g) * u) @ p["midlayer.mlp.down_proj.weight"].T
    return _rms(h, p["norm.weight"]) @ p["lm_head.weight"].T, h


@pytest.mark.parametrize("scaling", [None, YARN], ids=["rope", "yarn"])
def test_mla_matches_loop_reference(scaling):
    m = random_mla(mla_spec(rope_scaling=scaling))
    ids = torch.randint(0, 96, (2, 5))
    aux = torch.randn(2, 5, m.spec.fc_in_features)
    pos = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
    with torch.no_grad():
        out = m(ids, aux, position_ids=pos)
        ref_logits, ref_h = mla_step_reference(m, ids, aux, True, pos)
        assert torch.allclose(out.logits.double(), ref_logits, atol=1e-4, rtol=1e-4)
        assert torch.allclose(out.hidden.double(), ref_h, atol=1e-4, rtol=1e-4)
        out2 = m(ids, out.hidden, position_ids=pos)  # a later step: the previous hidden, no fc
        ref2, _ = mla_step_reference(m, ids, out.hidden, False, pos)
        assert torch.allclose(out2.logits.double(), ref2, atol=1e-4, rtol=1e-4)


def test_mla_yarn_changes_the_output():
    """The reference test above would pass vacuously if yarn were ignored on both sides."""
    a, b = random_mla(mla_spec()), random_mla(mla_spec(rope_scaling=YARN))
    assert b.midlayer.self_attn.scale == pytest.approx(12**-0.5 * (0.1 * math.log(40) + 1) ** 2)
    ids, aux = torch.randint(0, 96, (1, 4)), torch.randn(1, 4, 72)
    with torch.no_grad():
        assert not torch.allclose(a(ids, aux).logits, b(ids, aux).logits, atol=1e-3)


def test_mla_attention_matches_transformers_deepseek_v3():
    """Our MLAAttention == transformers' DeepseekV3Attention on the same weights (yarn, offset
    positions, interleaved rope), with o_proj resized to the drafter's width."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3Attention,
        DeepseekV3RotaryEmbedding,
    )

    spec = mla_spec(rope_scaling=YARN)
    m = random_mla(spec)
    ours = m.midlayer.self_attn
    cfg = DeepseekV3Config(
        hidden_size=2 * spec.hidden_size,
        num_attention_heads=2,
        num_key_value_heads=2,
        q_lora_rank=16,
        kv_lora_rank=12,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=10,
        rope_theta=spec.rope_theta,
        rope_scaling=YARN,
        max_position_embeddings=spec.max_position_embeddings,
        rms_norm_eps=1e-6,
        attention_bias=False,
    )
    cfg._attn_implementation = "eager"
    ref = DeepseekV3Attention(cfg, layer_idx=0)
    ref.o_proj = torch.nn.Linear(20, spec.hidden_size, bias=False)
    ref.load_state_dict(ours.state_dict(), strict=True)
    x = torch.randn(2, 6, 2 * spec.hidden_size)  # [B, T, 2H]
    pos = torch.arange(6)[None].expand(2, 6) + 100
    cos, sin = DeepseekV3RotaryEmbedding(cfg)(x, pos)
    mask = torch.where(causal_mask(6, 0), 0.0, float("-inf"))[None, None].expand(2, 1, 6, 6)
    with torch.no_grad():
        expected = ref(x, (cos, sin), mask)[0]
        got = ours(x, pos, None, None)
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-5)


def test_mla_kv_cache_incremental_equals_full():
    m = random_mla(mla_spec(rope_scaling=YARN))
    ids = torch.randint(0, 96, (1, 9))
    aux = torch.randn(1, 9, m.spec.fc_in_features)
    with torch.no_grad():
        full = m(ids, aux).logits
        cache = DraftCache()
        a = m(ids[:, :5], aux[:, :5], cache).logits
        b = m(ids[:, 5:], aux[:, 5:], cache).logits
        assert (
            cache.length == 9 and cache.k.shape == (1, 2, 9, 12) and cache.v.shape == (1, 2, 9, 10)
        )
        assert torch.allclose(torch.cat([a, b], 1), full, atol=1e-5)
        cache.crop(5)  # reject the last 4, redo them
        c = m(ids[:, 5:], aux[:, 5:], cache).logits
        assert torch.allclose(c, b, atol=1e-6)


def test_mla_explicit_mask_and_positions():
    """Two tree siblings sharing a position, each seeing the prefix and itself only, equal two
    separate chains."""
    m = random_mla(mla_spec())
    ids = torch.randint(0, 96, (1, 5))
    aux = torch.randn(1, 5, m.spec.fc_in_features)
    with torch.no_grad():
        chain_a = m(ids[:, :4], aux[:, :4]).logits[:, 3]
        chain_b = m(
            torch.cat([ids[:, :3], ids[:, 4:]], 1), torch.cat([aux[:, :3], aux[:, 4:]], 1)
        ).logits[:, 3]
        mask = causal_mask(5, 0)
        mask[4, 3] = False  # sibling 4 does not see sibling 3
        tree = m(ids, aux, position_ids=torch.tensor([[0, 1, 2, 3, 3]]), attn_mask=mask).logits
    assert torch.allclose(tree[:, 3], chain_a, atol=1e-5)
    assert torch.allclose(tree[:, 4], chain_b, atol=1e-5)


def test_forward_refuses_without_embedding():
    m = Eagle3Drafter(mla_spec())
    with pytest.raises(Eagle3Error, match="set_embedding"):
        m(torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2, 72))


# ---------------------------------------------------------------- specs for a target


def test_kimi_k25_mla_shapes():
    from eagle3kit.checkpoint.eagle3.synthetic import kimi_k25_mla_spec

    shapes = kimi_k25_mla_spec().expected_shapes()
    a = "midlayer.self_attn."
    assert shapes[a + "q_a_proj.weight"] == (1536, 14336)
    assert shapes[a + "q_b_proj.weight"] == (12288, 1536)
    assert shapes[a + "kv_a_proj_with_mqa.weight"] == (576, 14336)
    assert shapes[a + "kv_b_proj.weight"] == (16384, 512)
    assert shapes[a + "o_proj.weight"] == (7168, 8192)
    assert shapes["fc.weight"] == (7168, 21504) and shapes["lm_head.weight"] == (163840, 7168)
    assert not any(n.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")) for n in shapes)


def test_spec_for_target_takes_deepseek_mla_dims():
    from eagle3kit.checkpoint.eagle3.synthetic import kimi_k25_target_config

    cfg = kimi_k25_target_config()
    s = spec_for_target(cfg, attention="mla", draft_vocab_size=32000)
    assert (
        s.q_lora_rank,
        s.kv_lora_rank,
        s.qk_nope_head_dim,
        s.qk_rope_head_dim,
        s.v_head_dim,
    ) == (1536, 512, 128, 64, 128)
    assert s.num_attention_heads == 64 and s.hidden_size == 7168 and s.draft_vocab_size == 32000
    assert s.aux_layers == (2, 30, 58) and s.rope_scaling["factor"] == 64.0
    mha = spec_for_target(cfg, attention="mha")
    assert mha.attention == "mha" and mha.head_dim == 112 and mha.rope_scaling is None
    llama = {
        "hidden_size": 64,
        "num_hidden_layers": 12,
        "vocab_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 160,
    }
    s = spec_for_target(llama, attention="mla")
    assert s.is_mla and s.qk_rope_head_dim % 2 == 0 and s.kv_lora_rank > 0
    assert s.aux_layers == (2, 6, 9) and s.draft_vocab_size == 512
    with pytest.raises(Eagle3Error, match="attention"):
        spec_for_target(llama, attention="gqa")
    with pytest.raises(Eagle3Error, match="hidden_size"):
        spec_for_target({"num_hidden_layers": 2})


@pytest.mark.parametrize("attention", ["mha", "mla"])
def test_for_target_runs_on_zoo_dsv3(tiny_dsv3, attention):
    from eagle3kit.model.target import TargetModel

    target = TargetModel.from_pretrained(tiny_dsv3)
    m = Eagle3Drafter.for_target(target, attention=attention, draft_vocab_size=64)
    assert m.spec.attention == attention and m.embed_loaded
    assert torch.equal(m.embed_tokens.weight, target.embed_tokens.weight)
    if attention == "mla":
        assert (m.spec.kv_lora_rank, m.spec.qk_rope_head_dim) == (16, 8)  # the target's own
    ids = torch.randint(0, target.vocab_size, (1, 6))
    aux = target(ids).aux  # [1, 6, 3 * 32]
    with torch.no_grad():
        d = m(ids, aux.to(m.fc.weight.dtype))
    assert d.logits.shape == (1, 6, 64) and torch.isfinite(d.logits).all()


def test_mla_runs_in_bfloat16_and_on_a_llama_target_config():
    """Defaults for a target without MLA dims, in bfloat16 (the checkpoints' dtype)."""
    llama = {
        "hidden_size": 32,
        "num_hidden_layers": 8,
        "vocab_size": 96,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 64,
    }
    spec = spec_for_target(llama, attention="mla", draft_vocab_size=40)
    assert (spec.q_lora_rank, spec.kv_lora_rank, spec.qk_nope_head_dim, spec.qk_rope_head_dim) == (
        16,
        16,
        16,
        8,
    )
    m = Eagle3Drafter(spec, dtype=torch.bfloat16)
    m.set_embedding(torch.randn(96, 32))
    out = m(torch.randint(0, 96, (1, 5)), torch.randn(1, 5, 96, dtype=torch.bfloat16))
    assert out.logits.dtype == torch.bfloat16 and out.logits.shape == (1, 5, 40)
    assert set(m.state_dict()) == set(spec.expected_shapes()) - {"input_norm.weight"}


@pytest.fixture(scope="module")
def tiny_dsv3():
    from eagle3kit import zoo

    return zoo.get("dsv3-v1", size="tiny")


# ---------------------------------------------------------------- layouts


def _random_mla_dir(tmp_path, layout="sglang"):
    from ckpt_helpers import random_drafter

    return random_drafter(tmp_path / f"src-{layout}", mla_spec(rope_scaling=YARN), layout)


def _logits(path) -> torch.Tensor:
    torch.manual_seed(123)
    m = Eagle3Drafter.from_pretrained(path)
    ids = torch.randint(0, m.spec.vocab_size, (2, 7))
    aux = torch.randn(2, 7, m.spec.fc_in_features)
    with torch.no_grad():
        first = m(ids, aux)
        second = m(ids, first.hidden)
    return torch.cat([first.logits, second.logits], dim=-1)


def test_mla_round_trip_same_logits_and_bytes(tmp_path):
    from conftest import run_cli

    src = _random_mla_dir(tmp_path)
    cfg = json.loads((src / "config.json").read_text())
    assert cfg["architectures"] == ["Eagle3DeepseekV2ForCausalLM"] and cfg["kv_lora_rank"] == 12
    r1 = run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "mid", "--json")
    assert r1.code == 0, r1.err
    r2 = run_cli("convert", tmp_path / "mid", "--to", "sglang", "-o", tmp_path / "back", "--json")
    assert r2.code == 0, r2.err
    for f in ("model.safetensors", "config.json"):
        assert (src / f).read_bytes() == (tmp_path / "back" / f).read_bytes(), f
    from safetensors import safe_open

    with safe_open(str(tmp_path / "mid" / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "layers.0.self_attn.kv_b_proj.weight" in names and not any(
        "midlayer." in n for n in names
    )
    ref = _logits(src)
    assert torch.equal(ref, _logits(tmp_path / "mid")) and torch.equal(
        ref, _logits(tmp_path / "back")
    )


def _data_extents(fd: int, size: int):
    """(start, end) of every run of `fd` that is not a hole (SEEK_DATA/SEEK_HOLE); the whole
    file where the filesystem does not say."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left
            return
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, end
        pos = end


def _same_bytes(a, b) -> bool:
    """Two files of one size hold the same bytes: every run that is data in either file is
    compared (a hole reads as zeros); runs that are holes in both are zeros in both. Reads
    the data of a 3.4 GiB sparse file, not its 3.4 GiB."""
    size = os.path.getsize(a)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        runs = [*_data_extents(fa.fileno(), size), *_data_extents(fb.fileno(), size)]
        for start, end in runs:
            for off in range(start, end, 1 << 24):
                n = min(1 << 24, end - off)
                fa.seek(off), fb.seek(off)
                if fa.read(n) != fb.read(n):
                    return False
    return True


def test_same_bytes_sees_a_byte_in_a_hole(tmp_path):
    """The extent comparison is a byte comparison: one byte written into the other file's
    hole, or one byte changed in data, makes two sparse files differ."""
    a, b = tmp_path / "a", tmp_path / "b"
    for p in (a, b):
        with open(p, "wb") as f:
            f.truncate(64 << 20)  # one hole
            f.seek(5 << 20)
            f.write(b"data")
    assert _same_bytes(a, b)
    with open(b, "r+b") as f:
        f.seek(40 << 20)
        f.write(b"x")  # in a's hole
    assert not _same_bytes(a, b) and not _same_bytes(b, a)
    with open(a, "r+b") as f:
        f.seek(40 << 20)
        f.write(b"x")
    assert _same_bytes(a, b)
    with open(a, "r+b") as f:
        f.seek(5 << 20)
        f.write(b"D")  # in data of both
    assert not _same_bytes(a, b)


@pytest.mark.slow  # two conversions of a 3.4 GiB sparse file: ~20 s, ~3.8 GB RAM
def test_kimi_k25_mla_sparse_round_trip_byte_identical(tmp_path):
    """The header-exact Kimi-K2.5 MLA drafter: SGLang -> vLLM -> SGLang gives the same bytes,
    the export names on the way, and holes stay holes."""
    from conftest import run_cli

    from eagle3kit.checkpoint.eagle3.synthetic import kimi_k25_mla_spec, write_sparse_drafter

    src = write_sparse_drafter(tmp_path / "sg", kimi_k25_mla_spec())
    r = run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "v", "--json")
    assert r.code == 0, r.err
    r = run_cli("convert", tmp_path / "v", "--to", "sglang", "-o", tmp_path / "back", "--json")
    assert r.code == 0, r.err
    for f in ("config.json", "model.safetensors"):
        a, b = src / f, tmp_path / "back" / f
        assert a.stat().st_size == b.stat().st_size, f
        assert _same_bytes(a, b), f
    doc = json.loads(run_cli("inspect", tmp_path / "v", "--json").out)
    assert doc["format"] == "vllm" and doc["spec"]["attention"] == "mla" and doc["missing"] == []
    assert "layers.0.self_attn.kv_a_proj_with_mqa.weight" in {t["name"] for t in doc["tensors"]}
    assert (tmp_path / "back" / "model.safetensors").stat().st_blocks * 512 < 64 << 20  # sparse


def test_kimi_k25_mla_compat_and_eagle_refusal(tmp_path):
    """Headers only: the export-named (vllm layout) K2.5 MLA drafter against the K2.5 target
    passes for both engines; the EAGLE layout cannot hold MLA attention (exit 2, nothing
    written)."""
    from conftest import run_cli

    from eagle3kit.checkpoint.eagle3.synthetic import (
        kimi_k25_mla_spec,
        kimi_k25_target_config,
        write_sparse_drafter,
        write_target_config,
    )

    # a full-vocabulary drafter as `convert --to vllm` writes it: no d2t/t2d (vLLM refuses
    # d2t there; docs/formats.md "Full-vocabulary drafters")
    omit = ("embed_tokens.weight", "d2t", "t2d")
    d = write_sparse_drafter(tmp_path / "v", kimi_k25_mla_spec(), "vllm", omit=omit)
    t = write_target_config(tmp_path / "k25", kimi_k25_target_config())
    r = run_cli("compat", d, t, "--json")
    assert r.code == 0, r.out + r.err
    r = run_cli("convert", d, "--to", "eagle", "-o", tmp_path / "e")
    assert r.code == 2 and "mla" in r.err and not (tmp_path / "e").exists()
