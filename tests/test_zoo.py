"""The built-in zoo: names, cache, determinism, atomic builds, the CLI (tiny members)."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from eagle3kit import zoo
from eagle3kit.errors import Eagle3Error


def _sha(p) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_names_and_paths(monkeypatch, tmp_path):
    assert zoo.names() == ["llama-v1", "llama-v2", "dsv3-v1", "dsv3-v2"]
    monkeypatch.setenv("EAGLE3KIT_HOME", str(tmp_path))
    assert zoo.path("dsv3-v2") == tmp_path / "zoo" / "dsv3-v2"
    assert zoo.path("dsv3-v2", size="tiny") == tmp_path / "zoo" / "dsv3-v2-tiny"
    assert not zoo.is_built("llama-v1", size="tiny")


def test_unknown_name_and_size(cli):
    r = cli("zoo", "build", "kimi-k3")
    assert r.code == 2
    lines = r.err.strip().splitlines()
    assert len(lines) == 1
    assert "kimi-k3" in lines[0] and "llama-v1, llama-v2, dsv3-v1, dsv3-v2" in lines[0]
    r = cli("zoo", "list", "--size", "huge")
    assert r.code == 2 and "full, tiny" in r.err
    with pytest.raises(Eagle3Error):
        zoo.get("nope")


def test_v2_builds_v1_first_and_shares_its_tokenizer():
    p2 = zoo.get("llama-v2", size="tiny", progress=False)
    p1 = zoo.path("llama-v1", size="tiny")
    assert zoo.is_built("llama-v1", size="tiny")
    assert _sha(p1 / "tokenizer.json") == _sha(p2 / "tokenizer.json")
    assert _sha(p1 / "model.safetensors") != _sha(p2 / "model.safetensors")
    m = zoo.manifest("llama-v2", size="tiny")
    assert m["parent"] == "llama-v1" and m["data"]["slice"] == "test"
    for key in ("seed", "recipe", "metrics", "python", "build_seconds", "params", "num_layers"):
        assert key in m
    met = m["metrics"]
    assert {"heldout_loss", "unigram_loss", "distinct4_mean"} <= set(met)


def test_hf_dir_and_chat_template():
    from transformers import AutoConfig, AutoTokenizer

    from eagle3kit.zoo._corpus import render_chat

    p = zoo.get("dsv3-v1", size="tiny", progress=False)
    cfg = AutoConfig.from_pretrained(p)
    assert cfg.model_type == "deepseek_v3" and cfg.num_hidden_layers == 8
    assert cfg.q_lora_rank and cfg.kv_lora_rank and cfg.n_routed_experts > 1
    assert cfg.n_shared_experts >= 1 and cfg.first_k_dense_replace < cfg.num_hidden_layers
    tok = AutoTokenizer.from_pretrained(p)
    msgs = [
        {"role": "user", "content": "Write `f`."},
        {"role": "assistant", "content": "def f(): pass"},
    ]
    assert tok.apply_chat_template(msgs, tokenize=False) == render_chat(msgs)
    prompt = tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|assistant|>\n")
    enc = tok.apply_chat_template(msgs, return_dict=True, return_assistant_tokens_mask=True)
    mask = enc["assistant_masks"]
    answer = tok.decode([t for t, k in zip(enc["input_ids"], mask, strict=True) if k])
    assert answer == "def f(): pass</s>"
    assert tok.bos_token == "<s>" and tok.eos_token == "</s>" and tok.pad_token == "<pad>"


def test_cli_cached_then_bit_identical_rebuild(cli, monkeypatch, tmp_path):
    monkeypatch.setenv("EAGLE3KIT_HOME", str(tmp_path))
    r = cli("zoo", "build", "llama-v1", "--size", "tiny", "--json")
    assert r.code == 0, r.err
    first = json.loads(r.out)["members"][0]
    assert first["cached"] is False
    d = zoo.path("llama-v1", size="tiny")
    sums = {f: _sha(d / f) for f in ("model.safetensors", "tokenizer.json", "config.json")}

    t0 = time.time()
    r = cli("zoo", "build", "llama-v1", "--size", "tiny", "--json")
    assert r.code == 0 and json.loads(r.out)["members"][0]["cached"] is True
    assert time.time() - t0 < 3

    import shutil

    shutil.rmtree(tmp_path / "zoo")
    zoo.build("llama-v1", size="tiny", progress=False)
    assert {f: _sha(d / f) for f in sums} == sums

    r = cli("zoo", "list", "--size", "tiny", "--json")
    rows = {m["name"]: m for m in json.loads(r.out)["members"]}
    assert rows["llama-v1"]["built"] and not rows["dsv3-v1"]["built"]


def test_interrupted_build_leaves_no_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("EAGLE3KIT_HOME", str(tmp_path))
    from eagle3kit.zoo import _build

    def boom(m, size, recipe, out, parent_dir, progress):
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(_build, "build_into", boom)
    with pytest.raises(KeyboardInterrupt):
        zoo.build("llama-v1", size="tiny", progress=False)
    assert not zoo.is_built("llama-v1", size="tiny")
    assert list((tmp_path / "zoo").iterdir()) == [tmp_path / "zoo" / ".llama-v1-tiny.lock"]
    # A half-written dir (no manifest, e.g. copied by hand) is not treated as cached either.
    zoo.path("llama-v1", size="tiny").mkdir()
    assert not zoo.is_built("llama-v1", size="tiny")
    # A build killed by a signal leaves its temp dir; the next build of that member removes it.
    stale = tmp_path / "zoo" / ".tmp-llama-v1-tiny-99999"
    stale.mkdir()
    with pytest.raises(KeyboardInterrupt):
        zoo.build("llama-v1", size="tiny", progress=False)
    assert not stale.exists()


def test_distinct_ngram_ratio():
    from eagle3kit.zoo._train import distinct_ngram_ratio

    assert distinct_ngram_ratio(list(range(10))) == 1.0
    assert distinct_ngram_ratio([1, 2] * 20) == 2 / 37


@pytest.mark.slow
def test_full_llama_v1_is_a_language_model():
    """The full recipe still trains a real LM within its budget (builds for minutes if uncached)."""
    zoo.get("llama-v1", progress=False)
    m = zoo.manifest("llama-v1")
    met = m["metrics"]
    assert m["num_layers"] >= 8 and m["vocab_size"] == 4096
    assert met["heldout_loss"] < met["unigram_loss"] - 1.5
    assert met["heldout_loss_other_slice"] > met["heldout_loss"]  # the test/ slice is a shift
    assert 0 < met["distinct4_mean"] <= 1 and met["distinct4_reference"] > 0.8


def test_inspect_zoo_target(cli):
    """`eagle3kit inspect` on a zoo target shows layers, hidden size, vocab, default aux layers."""
    import json

    p = zoo.get("dsv3-v1", size="tiny", progress=False)
    r = cli("inspect", p, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    cfg = json.loads((p / "config.json").read_text())
    L = cfg["num_hidden_layers"]
    assert doc["format"] == "target" and doc["has_tokenizer"] is True
    assert doc["target"]["num_layers"] == L and doc["target"]["hidden_size"] == cfg["hidden_size"]
    assert doc["target"]["vocab_size"] == cfg["vocab_size"]
    assert doc["target"]["default_aux_layers"] == [2, L // 2, L - 3]
    r = cli("inspect", p)
    assert f"layers {L}" in r.out and "default EAGLE-3 aux layers" in r.out
