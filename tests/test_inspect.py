"""inspect: JSON shape scripts rely on, roles in words, missing/unexpected, targets."""

from __future__ import annotations

import json

import pytest
from ckpt_helpers import tiny_spec, write_target_config
from conftest import run_cli

from eagle3kit.checkpoint.eagle3.synthetic import kimi_k2_spec, write_sparse_drafter


def test_inspect_kimi_k2_json(tmp_path):
    d = write_sparse_drafter(tmp_path / "k2", kimi_k2_spec())
    r = run_cli("inspect", d, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert {"format", "spec", "tensors", "missing", "unexpected"} <= set(doc)
    assert doc["format"] == "sglang" and doc["missing"] == [] and doc["unexpected"] == []
    by = {t["name"]: t for t in doc["tensors"]}
    for t in doc["tensors"]:
        assert {"name", "shape", "dtype", "bytes"} <= set(t)
    assert (
        by["fc.weight"]["shape"] == [7168, 21504] and by["fc.weight"]["bytes"] == 7168 * 21504 * 2
    )
    assert by["fc.weight"]["role"] == "fc: 3 aux hidden states (layers [2, 30, 58]) -> 7168"
    assert by["lm_head.weight"]["role"] == "lm_head: draft vocab 32000 of target vocab 163840"
    assert by["midlayer.self_attn.q_proj.weight"]["shape"] == [8192, 14336]
    assert by["d2t"]["dtype"] == "I64" and by["t2d"]["dtype"] == "BOOL"
    assert doc["spec"]["aux_layers"] == [2, 30, 58] and doc["spec"]["aux_layers_raw"] == [1, 29, 57]
    assert (
        doc["vocab_map"]["t2d"]["count"] == 32000 and doc["vocab_map"]["d2t"]["out_of_range"] == 0
    )
    r = run_cli("inspect", d)  # the table renders
    assert r.code == 0 and "lm_head: draft vocab 32000" in r.out


def test_inspect_reports_missing_and_unexpected(tmp_path):
    d = write_sparse_drafter(
        tmp_path / "d",
        tiny_spec(),
        omit=("embed_tokens.weight", "lm_head.weight"),
        extra_tensors={"verifier_norm.weight": (64,)},
    )
    doc = json.loads(run_cli("inspect", d, "--json").out)
    assert doc["missing"] == ["lm_head.weight"]
    assert doc["unexpected"] == ["verifier_norm.weight"]


def test_inspect_speculators_layout(tmp_path):
    d = write_sparse_drafter(tmp_path / "v", tiny_spec(), "vllm")
    doc = json.loads(run_cli("inspect", d, "--json").out)
    assert doc["format"] == "vllm"
    names = {t["name"] for t in doc["tensors"]}
    assert "layers.0.self_attn.q_proj.weight" in names
    assert {t["canonical"] for t in doc["tensors"]} >= {"midlayer.self_attn.q_proj.weight"}
    assert doc["spec"]["aux_layers"] == [2, 5, 9] and doc["spec"]["aux_convention"] == "hf"


def test_inspect_target_config(tmp_path):
    t = write_target_config(tmp_path / "t", layers=61, hidden=7168, vocab=163840)
    r = run_cli("inspect", t, "--json")
    doc = json.loads(r.out)
    assert doc["format"] == "target" and doc["spec"] is None
    assert doc["target"]["num_layers"] == 61 and doc["target"]["default_aux_layers"] == [2, 30, 58]
    r = run_cli("inspect", t)
    assert "default EAGLE-3 aux layers" in r.out and "[2, 30, 58]" in r.out


def test_inspect_target_nested_text_config(tmp_path):
    d = tmp_path / "mm"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["KimiK25ForConditionalGeneration"],
                "text_config": {
                    "num_hidden_layers": 61,
                    "hidden_size": 7168,
                    "vocab_size": 163840,
                    "model_type": "deepseek_v3",
                },
            }
        )
    )
    doc = json.loads(run_cli("inspect", d, "--json").out)
    assert doc["target"]["hidden_size"] == 7168 and doc["target"]["model_type"] == "deepseek_v3"


def test_hub_repo_id_is_tried_offline(tmp_path, monkeypatch):
    """A name that is not a local path but looks like org/name: one line naming both readings
    (the missing local path and the Hub repo that cannot be read offline)."""
    monkeypatch.chdir(tmp_path)
    r = run_cli("inspect", "some-org/some-drafter")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert "some-org/some-drafter" in r.err and "no such local path" in r.err and "Hub" in r.err


# ---------------------------------------------------------------- MLA drafters, variants, results

MLA_ATTN = (
    "q_a_proj",
    "q_a_layernorm",
    "q_b_proj",
    "kv_a_proj_with_mqa",
    "kv_a_layernorm",
    "kv_b_proj",
    "o_proj",
)


@pytest.mark.parametrize("layout", ["sglang", "vllm"])
def test_inspect_kimi_k25_mla_every_tensor_has_a_role(tmp_path, layout):
    from eagle3kit.checkpoint.eagle3.synthetic import kimi_k25_mla_spec

    d = write_sparse_drafter(tmp_path / layout, kimi_k25_mla_spec(), layout)
    r = run_cli("inspect", d, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["format"] == layout and doc["spec"]["attention"] == "mla"
    assert doc["missing"] == [] and doc["unexpected"] == [] and doc["shape_mismatches"] == []
    assert doc["spec"]["aux_layers"] == [2, 30, 58]
    assert all("not part of" not in t["role"] for t in doc["tensors"]), doc["tensors"]
    pre = "midlayer." if layout == "sglang" else "layers.0."
    by = {t["name"]: t for t in doc["tensors"]}
    for n in MLA_ATTN:
        t = by[f"{pre}self_attn.{n}.weight"]
        assert t["role"].startswith(f"{n} (MLA)"), t
    assert by[f"{pre}self_attn.q_b_proj.weight"]["shape"] == [12288, 1536]
    assert by[f"{pre}self_attn.kv_b_proj.weight"]["role"] == (
        "kv_b_proj (MLA): kv latent 512 -> 64x(128 key nope + 128 value)"
    )
    assert by["lm_head.weight"]["shape"] == [163840, 7168]
    assert (
        len(doc["tensors"]) == 18
    )  # 7 attention + 3 MLP + 3 layer norms + fc, norm, lm_head, d2t, t2d
    text = run_cli("inspect", d)
    assert text.code == 0 and "attention: MLA (q_lora 1536, kv_lora 512" in text.out


def test_inspect_modelopt_kimik2_export(tmp_path):
    """ModelOpt's kimik2 template: V2 architecture, model_type kimi_k2, layers.0.* names, no
    draft_vocab_size key (the vocab comes from lm_head), ModelOpt keys in eagle_config, no
    embed_tokens or t2d."""
    from eagle3kit.checkpoint.eagle3.synthetic import kimi_k25_mla_spec

    spec = kimi_k25_mla_spec().replace(draft_vocab_size=32000)
    eagle_cfg = {
        "eagle_aux_hidden_state_layer_ids": [1, 29, 57],
        "use_aux_hidden_state": True,
        "use_input_layernorm_in_first_layer": True,
        "use_last_layernorm": True,
        "use_mtp_layernorm": False,
        "next_layer_regular": True,
    }
    d = write_sparse_drafter(
        tmp_path / "mo",
        spec,
        "vllm",
        omit=("embed_tokens.weight", "t2d"),
        config_overrides={
            "draft_vocab_size": None,
            "target_hidden_size": None,
            "eagle3kit": None,
            "eagle_aux_hidden_state_layer_ids": None,
            "eagle_config": eagle_cfg,
            "n_routed_experts": 384,
            "first_k_dense_replace": 1,
        },
    )
    doc = json.loads(run_cli("inspect", d, "--json").out)
    s = doc["spec"]
    assert doc["format"] == "vllm" and s["attention"] == "mla" and s["draft_vocab_size"] == 32000
    assert s["aux_layers"] == [2, 30, 58] and s["aux_convention"] == "sglang"
    assert doc["missing"] == [] and doc["unexpected"] == []


def _flags_doc(tmp_path, **flags):
    d = write_sparse_drafter(tmp_path / "_".join(flags) or "none", tiny_spec(**flags), "vllm")
    return json.loads(run_cli("inspect", d, "--json").out)


def test_inspect_names_the_eagle31_variant(tmp_path):
    assert _flags_doc(tmp_path)["variant"] == "EAGLE-3 (original layer: no norm flags)"
    v = _flags_doc(tmp_path, fc_norm=True, norm_output=True)["variant"]
    assert v == "EAGLE 3.1 (vLLM/TorchSpec: fc_norm + norm_output)"
    v = _flags_doc(tmp_path, norm_before_fc=True, norm_output=True)["variant"]
    assert v == "EAGLE 3.1 (speculators PR #610: norm_before_fc + norm_output)"
    v = _flags_doc(tmp_path, norm_before_residual=True)["variant"]
    assert v.startswith("EAGLE-3 with norm_before_residual") and "not one of" in v


def test_inspect_json_attention_mha_and_dataclass(tmp_path):
    from eagle3kit.checkpoint.inspection import InspectResult, inspect_checkpoint
    from eagle3kit.core.spec import DraftSpec

    d = write_sparse_drafter(tmp_path / "k2", kimi_k2_spec())
    assert json.loads(run_cli("inspect", d, "--json").out)["spec"]["attention"] == "mha"
    r = inspect_checkpoint(str(d))
    assert isinstance(r, InspectResult) and isinstance(r.spec, DraftSpec)
    assert r.spec.attention == "mha" and r.format == "sglang" and r["format"] == "sglang"
    assert r.to_json()["tensors"] == r.tensors


def test_inspect_lone_safetensors_says_config_is_missing(tmp_path):
    d = write_sparse_drafter(tmp_path / "k2", tiny_spec())
    lone = tmp_path / "elsewhere"
    lone.mkdir()
    (lone / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes())
    r = run_cli("inspect", lone / "model.safetensors")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert str(lone / "config.json") in r.err and "missing" in r.err
    assert "hidden_size" not in r.err
