"""Sliding-window drafters as files: `convert` carries the window to every layout and back
bit-exact, the readers take the keys as the engines read them, and `compat` says per engine
release whether the window it was trained with is the one it will run
(checkpoint/engines/windows.py)."""

from __future__ import annotations

import json

import pytest
import torch
from ckpt_helpers import random_drafter, tiny_spec, write_target_config
from conftest import run_cli
from safetensors.numpy import load_file

from eagle3kit.checkpoint.compat import compat
from eagle3kit.checkpoint.eagle3.reader import read_drafter
from eagle3kit.checkpoint.eagle3.synthetic import write_sparse_drafter
from eagle3kit.checkpoint.method_convert import convert_method
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.methods.dflash.checkpoint.layout import read_dflash_config, zlab_config
from eagle3kit.methods.dflash.checkpoint.read import dflash_header
from eagle3kit.methods.dflash.checkpoint.synthetic import tiny_dflash_spec, write_dflash
from eagle3kit.model.drafter import Eagle3Drafter

W = 4


def _logits(path) -> torch.Tensor:
    """Two draft steps over 9 positions (more than W: the window acts)."""
    torch.manual_seed(5)
    m = Eagle3Drafter.from_pretrained(path)
    ids = torch.randint(0, m.spec.vocab_size, (1, 9))
    aux = torch.randn(1, 9, m.spec.fc_in_features)
    with torch.no_grad():
        first = m(ids, aux)
        return torch.cat([first.logits, m(ids, first.hidden).logits], dim=-1)


@pytest.mark.parametrize("via", ["vllm", "eagle"])
def test_eagle3_window_survives_every_layout_bit_exact(tmp_path, via):
    src = random_drafter(tmp_path / "src", tiny_spec(sliding_window=W), "sglang")
    for a, b, to in (("src", "mid", via), ("mid", "back", "sglang")):
        r = run_cli("convert", tmp_path / a, "--to", to, "-o", tmp_path / b, "--json")
        assert r.code == 0, r.err
    cfg = json.loads((tmp_path / "mid" / "config.json").read_text())
    layer = cfg["transformer_layer_config"] if via == "vllm" else cfg
    assert layer["layer_types"] == ["sliding_attention"] and layer["sliding_window"] == W
    a = load_file(str(src / "model.safetensors"))
    b = load_file(str(tmp_path / "back" / "model.safetensors"))
    assert a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a)
    r = run_cli("inspect", tmp_path / "mid")
    assert r.code == 0 and f"sliding window: {W} positions" in r.out
    s0, s2 = read_drafter(str(src))[0], read_drafter(str(tmp_path / "back"))[0]
    assert s0.sliding_window == W and s0.replace(tensors=()) == s2.replace(tensors=())
    assert torch.equal(_logits(src), _logits(tmp_path / "mid"))
    full = random_drafter(tmp_path / "full", tiny_spec(), "sglang")  # same weights, no window
    assert not torch.equal(_logits(src), _logits(full))


def test_eagle3_window_keys_read_as_vllm_reads_them(tmp_path):
    """layer_types[0] decides; a bare sliding_window (no layer_types) is not a window, as in
    vLLM's LlamaAttention; a sliding layer without a window is refused, naming the key."""
    spec = tiny_spec()
    bare = write_sparse_drafter(tmp_path / "b", spec, config_overrides={"sliding_window": 8})
    assert read_drafter(str(bare))[0].sliding_window is None
    over = {"layer_types": ["sliding_attention"], "sliding_window": None}
    broken = write_sparse_drafter(tmp_path / "x", spec, config_overrides=over)
    with pytest.raises(Eagle3Error, match="sliding_window: expected an int >= 1"):
        read_drafter(str(broken))


def _target(tmp_path):
    return write_target_config(tmp_path / "target", layers=12, hidden=64, vocab=512, max_pos=1024)


def _found(res, code: str) -> list:
    return [f for f in res.findings if f.code == code]


def test_compat_eagle3_window_per_engine_release(tmp_path):
    t = _target(tmp_path)
    d = write_sparse_drafter(tmp_path / "d", tiny_spec(sliding_window=W), "vllm")
    assert not _found(compat(str(d), str(t), "vllm@0.33"), "sliding-window")  # reads the keys
    (sg,) = _found(compat(str(d), str(t), "sglang@0.5.23"), "sliding-window")
    assert sg.severity == "warning" and f"--speculative-draft-window-size {W - 1}" in sg.message
    (old,) = _found(compat(str(d), str(t), "vllm@0.21"), "sliding-window")
    assert old.severity == "warning" and "not checked" in old.message
    plain = write_sparse_drafter(tmp_path / "p", tiny_spec(), "vllm")
    assert not _found(compat(str(plain), str(t), "both"), "sliding-window")


def test_compat_mla_drafter_window_is_run_full(tmp_path):
    t = write_target_config(tmp_path / "t", layers=12, hidden=64, vocab=512, max_pos=1024)
    mla = dict(attention="mla", q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16)
    mla.update(qk_rope_head_dim=8, v_head_dim=16, num_key_value_heads=4, head_dim=24)
    spec = tiny_spec(sliding_window=W, architecture="Eagle3DeepseekV2ForCausalLM", **mla)
    d = write_sparse_drafter(tmp_path / "m", spec, "vllm")
    for engine in ("vllm@0.33", "sglang@0.5.23"):
        (f,) = _found(compat(str(d), str(t), engine), "sliding-window")
        assert f.severity == "error" and "full attention" in f.message, engine


def _swa_dflash(**over):
    """Every layer sliding, bidirectional in the block (`train --method dflash
    --sliding-window`'s drafter)."""
    return tiny_dflash_spec(
        layer_types=("sliding_attention",) * 2,
        sliding_window=16,
        layer_causal=(False, False),
        **over,
    )


def test_dflash_window_and_causality_survive_both_layouts(tmp_path):
    from test_checkpoint_methods import _all_tensors
    from test_checkpoint_methods import _target as qwen3_target

    t = qwen3_target(tmp_path / "t")
    write_dflash(tmp_path / "z", _swa_dflash())
    z = json.loads((tmp_path / "z" / "config.json").read_text())
    assert z["is_causal"] is False  # sliding layers default to causal: said explicitly
    convert_method(
        dflash_header(str(tmp_path / "z")), "speculators", str(tmp_path / "s"), embed_from=str(t)
    )
    s = json.loads((tmp_path / "s" / "config.json").read_text())
    assert s["transformer_layer_config"]["layer_types"] == ["sliding_attention"] * 2
    assert s["sliding_window_non_causal"] is True
    convert_method(dflash_header(str(tmp_path / "s")), "zlab", str(tmp_path / "z2"))
    spec = lambda p: dflash_header(str(tmp_path / p)).spec.replace(tensors=())  # noqa: E731
    keys = ("layer_types", "sliding_window", "layer_causal")
    assert all(getattr(spec("z"), k) == getattr(spec("z2"), k) for k in keys)
    assert all(getattr(spec("z"), k) == getattr(spec("s"), k) for k in keys)
    a, b = _all_tensors(tmp_path / "z"), _all_tensors(tmp_path / "z2")
    assert sorted(a) == sorted(b) and all(a[k].tobytes() == b[k].tobytes() for k in a)
    for engine in ("vllm@0.33", "sglang@0.5.23"):
        for p in ("z", "s", "z2"):
            res = compat(str(tmp_path / p), str(t), engine)
            assert not _found(res, "dflash-window") and not _found(res, "dflash-causality"), (
                engine,
                p,
                [f.message for f in res.findings],
            )


def test_zlab_use_swa_read_as_vllm_and_told_for_sglang(tmp_path):
    """`dflash_config.use_swa` + `swa_window_size` (MiMo's keys): every layer sliding and
    bidirectional in vLLM 0.33; SGLang 0.5.23 reads layer_types only, so it runs them full."""
    from test_checkpoint_methods import _target as qwen3_target

    base = tiny_dflash_spec()
    cfg = zlab_config(base)
    cfg["dflash_config"].update(use_swa=True, swa_window_size=12)
    names = set(base.required_tensors())
    spec = read_dflash_config(cfg, "config.json", names)
    assert spec.layer_types == ("sliding_attention",) * 2 and spec.sliding_window == 12
    assert spec.causal == (False, False)
    write_dflash(tmp_path / "m", spec)
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    t = qwen3_target(tmp_path / "t")
    assert not _found(compat(str(tmp_path / "m"), str(t), "vllm@0.33"), "dflash-window")
    (f,) = _found(compat(str(tmp_path / "m"), str(t), "sglang@0.5.23"), "dflash-window")
    assert "layer 0: trained window 12, run full" in f.message
