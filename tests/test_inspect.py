"""inspect: JSON shape scripts rely on, roles in words, missing/unexpected, targets."""

from __future__ import annotations

import json

from ckpt_helpers import tiny_spec, write_target_config
from conftest import run_cli

from eagle3kit.formats.synthetic import kimi_k2_spec, write_sparse_drafter


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
    """A name that is not a local path but looks like org/name goes to the Hub (offline here)."""
    monkeypatch.chdir(tmp_path)
    r = run_cli("inspect", "some-org/some-drafter")
    assert (
        r.code == 2
        and "hf://some-org/some-drafter" in r.err
        and len(r.err.strip().splitlines()) == 1
    )
