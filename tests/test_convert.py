"""convert: lossless round trips between layouts (tensors and drafter logits), refusals, launch lines."""

from __future__ import annotations

import json

import pytest
import torch
from ckpt_helpers import random_drafter, tiny_spec
from conftest import run_cli
from safetensors.torch import load_file

from eagle3kit.formats.convert import load_drafter_tensors
from eagle3kit.model.drafter import Eagle3Drafter


def _logits(path) -> torch.Tensor:
    torch.manual_seed(123)
    m = Eagle3Drafter.from_pretrained(path)
    spec = m.spec
    ids = torch.randint(0, spec.vocab_size, (2, 7))
    aux = torch.randn(2, 7, spec.fc_in_features)
    with torch.no_grad():
        first = m(ids, aux)
        second = m(ids, first.hidden)  # a later draft step
    return torch.cat([first.logits, second.logits], dim=-1)


@pytest.mark.parametrize("via", ["vllm", "eagle"])
def test_round_trip_sglang(tmp_path, via):
    src = random_drafter(tmp_path / "src", tiny_spec(), "sglang")
    r1 = run_cli("convert", src, "--to", via, "-o", tmp_path / "mid", "--json")
    assert r1.code == 0, r1.err
    r2 = run_cli("convert", tmp_path / "mid", "--to", "sglang", "-o", tmp_path / "back", "--json")
    assert r2.code == 0, r2.err
    a = load_file(src / "model.safetensors")
    b = load_file(tmp_path / "back" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
    mid = load_file(tmp_path / "mid" / "model.safetensors")
    if via == "vllm":
        assert any(k.startswith("layers.0.") for k in mid) and not any(
            k.startswith("midlayer.") for k in mid
        )
    assert torch.equal(_logits(src), _logits(tmp_path / "mid"))
    assert torch.equal(_logits(src), _logits(tmp_path / "back"))
    # the spec survives, aux layers included
    s0, _, _ = load_drafter_tensors(str(src))
    s2, _, _ = load_drafter_tensors(str(tmp_path / "back"))
    assert s0.replace(tensors=()) == s2.replace(tensors=())


def test_vllm_config_is_explicit(tmp_path):
    src = random_drafter(tmp_path / "src", tiny_spec(), "sglang")
    r = run_cli(
        "convert", src, "--to", "vllm", "-o", tmp_path / "v", "--verifier", "org/target", "--json"
    )
    doc = json.loads(r.out)
    assert (
        "vllm serve org/target" in doc["launch_command"]
        and '"method": "eagle3"' in doc["launch_command"]
    )
    cfg = json.loads((tmp_path / "v" / "config.json").read_text())
    for flag in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"):
        assert cfg[flag] is False
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 5, 9]  # HF indices
    assert cfg["speculators_config"]["verifier"]["name_or_path"] == "org/target"
    sg = json.loads((src / "config.json").read_text())
    assert sg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 4, 8]  # SGLang adds 1


def test_sglang_launch_command_printed(tmp_path):
    src = random_drafter(tmp_path / "src", tiny_spec(), "vllm")
    r = run_cli("convert", src, "--to", "sglang", "-o", tmp_path / "s", "--verifier", "org/t")
    assert r.code == 0, r.err
    assert "--speculative-algorithm EAGLE3" in r.out and "--speculative-num-draft-tokens 4" in r.out


def test_refuses_lossy_conversion(tmp_path):
    src = random_drafter(tmp_path / "src", tiny_spec(norm_before_residual=True), "vllm")
    r = run_cli("convert", src, "--to", "sglang", "-o", tmp_path / "out")
    assert r.code == 2 and "lossy" in r.err and "norm_before_residual" in r.err
    assert not (tmp_path / "out").exists()
    # vLLM implements it, so this direction is fine
    assert run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "ok").code == 0


def test_refuses_unknown_tensors(tmp_path):
    from eagle3kit.formats.safetensors_io import write_safetensors

    src = random_drafter(tmp_path / "src", tiny_spec(), "sglang")
    t = load_file(src / "model.safetensors")
    t["midlayer.extra_gate.weight"] = torch.zeros(3)
    write_safetensors(src / "model.safetensors", t)
    r = run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "out")
    assert r.code == 2 and "midlayer.extra_gate.weight" in r.err


def test_existing_output_is_not_touched(tmp_path):
    src = random_drafter(tmp_path / "src", tiny_spec(), "sglang")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    r = run_cli("convert", src, "--to", "vllm", "-o", out)
    assert r.code == 2 and "not empty" in r.err
    assert (out / "keep.txt").read_text() == "precious" and len(list(out.iterdir())) == 1


def test_bad_layout_name(tmp_path):
    src = random_drafter(tmp_path / "src", tiny_spec(), "sglang")
    r = run_cli("convert", src, "--to", "tgi", "-o", tmp_path / "o")
    assert r.code == 2 and "--to" in r.err
