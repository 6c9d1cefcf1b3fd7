"""compat catches each silent mismatch of docs/formats.md; the K2/K2.5 pair is drop-in
compatible."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ckpt_helpers import tiny_spec, write_target_config
from conftest import run_cli

from eagle3kit.checkpoint.compat import compat
from eagle3kit.checkpoint.eagle3.synthetic import (
    default_vocab_map,
    kimi_k2_spec,
    write_sparse_drafter,
)
from eagle3kit.core.errors import Eagle3Error


def codes(res, severity="error"):
    return {f.code for f in res.findings if f.severity == severity}


@pytest.fixture
def target(tmp_path):
    return write_target_config(tmp_path / "target", layers=12, hidden=64, vocab=512, max_pos=1024)


def drafter(tmp_path, name="d", layout="sglang", **kw):
    spec_kw = kw.pop("spec", {})
    return write_sparse_drafter(tmp_path / name, tiny_spec(**spec_kw), layout, **kw)


def test_clean_drafter_is_compatible(tmp_path, target):
    for layout in ("sglang", "vllm"):
        d = drafter(tmp_path, layout, layout=layout)
        res = compat(str(d), str(target), engine=layout)
        assert res.compatible, [f.message for f in res.findings]
        assert res.engines[layout]["captures"] == [2, 5, 9] == res.engines[layout]["trained_on"]
        assert compat(
            str(target), str(d), engine=layout
        ).compatible  # argument order does not matter


def test_sglang_layout_ids_are_wrong_for_vllm(tmp_path, target):
    """SGLang-layout ids name layer outputs; vLLM 0.22-0.32 reads them as HF indices: off by
    one (vLLM >= 0.33's default V2 runner ignores them: tests/test_engines.py)."""
    res = compat(str(drafter(tmp_path)), str(target), engine="sglang,vllm@0.22")
    assert res.engines["sglang"]["captures"] == [2, 5, 9]
    assert res.engines["vllm"]["captures"] == [1, 4, 8]
    errs = [f for f in res.findings if f.code == "aux-convention"]
    assert len(errs) == 1 and errs[0].engine == "vllm" and "convert --to vllm" in errs[0].message
    assert res.verdict.startswith("SGLang (latest rules: >= 0.5.17): serves it correctly; vLLM")
    new = compat(str(drafter(tmp_path, "d2")), str(target), engine="vllm")  # V2: default h
    assert new.engines["vllm"]["captures"] == [2, 6, 9]
    assert "aux-convention" in codes(new) and "aux-runner" in codes(new, "warning")
    assert res.errors_for("sglang") == 0 and res.errors_for("vllm") == 1


def test_no_aux_ids_is_an_error_per_engine(tmp_path, target):
    res = compat(str(drafter(tmp_path, spec={"aux_layers": None})), str(target))
    errs = [f for f in res.findings if f.code == "aux-default"]
    assert sorted(f.engine for f in errs) == ["sglang", "vllm"]
    assert all("[2, 6, 9]" in f.message and "PR #50170" in f.message for f in errs)
    assert res.engines["sglang"]["captures"] == [2, 6, 9] == res.engines["vllm"]["captures"]


def test_k2_vs_k25_drop_in(tmp_path):
    a = write_sparse_drafter(
        tmp_path / "k2",
        kimi_k2_spec(131072),
        config_overrides={"max_window_layers": 48, "transformers_version": "4.51.3"},
    )
    b = write_sparse_drafter(
        tmp_path / "k25", kimi_k2_spec(262144), config_overrides={"transformers_version": "4.57.1"}
    )
    r = run_cli("compat", a, b, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["compatible"] is True
    assert doc["verdict"] == "drop-in compatible for fine-tuning"
    meta = {row["key"] for row in doc["config_diff"] if row["kind"] == "metadata"}
    assert meta == {"max_position_embeddings", "max_window_layers", "transformers_version"}
    assert not [row for row in doc["config_diff"] if row["kind"] == "architectural"]
    assert all(f["severity"] == "info" for f in doc["findings"])
    assert {f["code"] for f in doc["findings"]} == {"config-metadata"}
    assert set(doc) >= {"compatible", "verdict", "findings"}
    assert all(set(f) == {"severity", "code", "message", "engine"} for f in doc["findings"])


def test_drafters_with_different_shapes_not_drop_in(tmp_path):
    a = drafter(tmp_path, "a")
    b = drafter(tmp_path, "b", spec={"intermediate_size": 192})
    res = compat(str(a), str(b))
    assert not res.compatible
    assert "spec-differs" in codes(res) and "tensor-differs" in codes(res)
    assert res.verdict.startswith("not compatible")
    assert run_cli("compat", a, b).code == 1


def test_missing_lm_head(tmp_path, target):
    d = drafter(tmp_path, omit=("embed_tokens.weight", "lm_head.weight"))
    res = compat(str(d), str(target))
    assert "missing-lm-head" in codes(res)
    assert any("accept length 1.00" in f.message for f in res.findings)


def test_aux_ids_out_of_range(tmp_path, target):
    d = drafter(tmp_path, spec={"aux_layers": (2, 5, 14)})
    res = compat(str(d), str(target))
    assert "aux-out-of-range" in codes(res)
    msg = next(f.message for f in res.findings if f.code == "aux-out-of-range")
    assert "14" in msg and "[0, 11]" in msg


def test_aux_convention_mismatch_drafter_vs_target(tmp_path, target):
    """h-indices written into eagle_config, with our key saying so: SGLang adds 1 and is wrong."""
    ids = {"eagle_aux_hidden_state_layer_ids": [2, 5, 9], "use_aux_hidden_state": True}
    d = drafter(tmp_path, config_overrides={"eagle_config": ids})
    res = compat(str(d), str(target), engine="sglang,vllm@0.22")
    assert res.engines["vllm"]["captures"] == [2, 5, 9] == res.engines["vllm"]["trained_on"]
    assert res.engines["sglang"]["captures"] == [3, 6, 10]
    assert [f.engine for f in res.findings if f.code == "aux-convention"] == ["sglang"]


def test_aux_convention_mismatch_between_drafters(tmp_path):
    a = drafter(tmp_path, "a", layout="vllm")  # ours: h[2, 5, 9], top-level ids and our key
    nested = {"eagle_aux_hidden_state_layer_ids": [2, 5, 9]}
    b = drafter(tmp_path, "b", config_overrides={"eagle_config": nested, "eagle3kit": None})
    res = compat(str(a), str(b))  # B's writer is unknown: h[3, 6, 10] or h[2, 5, 9]
    amb = [f for f in res.findings if f.code == "aux-layers-ambiguous"]
    assert len(amb) == 1 and "[3, 6, 10]" in amb[0].message and "probe" in amb[0].message
    assert res.drop_in and res.compatible  # a warning: B may well be the same
    mo = {**nested, "use_last_layernorm": False}  # ModelOpt's export: layer outputs, h[3, 6, 10]
    c = drafter(tmp_path, "c", config_overrides={"eagle_config": mo, "eagle3kit": None})
    res = compat(str(a), str(c))
    msg = next(f.message for f in res.findings if f.code == "aux-layers-differ")
    assert "h[2, 5, 9] (eagle3kit)" in msg and "h[3, 6, 10] (ModelOpt)" in msg
    assert not res.drop_in


def test_speculators_layout_to_sglang_engine(tmp_path, target):
    d = drafter(tmp_path, layout="vllm")
    res = compat(str(d), str(target), engine="sglang")
    # SGLang 0.5.23 stops at config parsing: no top-level model_type (engine_check, stage config)
    assert "config-parse" in codes(res) and not {"skipped-names", "architecture"} & codes(res)
    assert {f.engine for f in res.findings if f.severity == "error"} == {"sglang"}
    assert compat(str(d), str(target), engine="vllm").compatible


def test_d2t_out_of_range(tmp_path, target):
    d2t, t2d = default_vocab_map(tiny_spec())
    d2t = d2t.copy()
    d2t[-1] += 10_000
    d = drafter(tmp_path, d2t=d2t, t2d=t2d)
    res = compat(str(d), str(target))
    assert "d2t-range" in codes(res)


def test_t2d_count_mismatch(tmp_path, target):
    d2t, t2d = default_vocab_map(tiny_spec())
    t2d = t2d.copy()
    t2d[np.flatnonzero(~t2d)[:3]] = True
    res = compat(str(drafter(tmp_path, d2t=d2t, t2d=t2d)), str(target))
    assert "t2d-count" in codes(res)
    assert any("expected 128" in f.message and "found 131" in f.message for f in res.findings)


def test_hidden_size_mismatch(tmp_path):
    t = write_target_config(tmp_path / "t", hidden=96)
    res = compat(str(drafter(tmp_path)), str(t))
    assert "hidden-size" in codes(res)


def test_vocab_size_mismatch(tmp_path):
    t = write_target_config(tmp_path / "t", vocab=1000)
    assert "vocab-size" in codes(compat(str(drafter(tmp_path)), str(t)))


def test_embed_tokens_absent_is_info_wrong_shape_is_error(tmp_path, target):
    res = compat(str(drafter(tmp_path, "a")), str(target))
    assert "embed-absent" in codes(res, "info")
    bad = drafter(tmp_path, "b", omit=(), shape_overrides={"embed_tokens.weight": (500, 64)})
    res = compat(str(bad), str(target))
    assert "embed-shape" in codes(res)


def test_wrong_architectures(tmp_path, target):
    d = drafter(
        tmp_path,
        config_overrides={
            "architectures": ["LlamaForCausalLM"],
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 4, 8]},
        },
    )
    res = compat(str(d), str(target), engine="sglang")
    assert "architecture" in codes(res)
    d2 = drafter(tmp_path, "d2", config_overrides={"architectures": ["MistralForCausalLMEagle9"]})
    assert "architecture" in codes(compat(str(d2), str(target), engine="vllm"))


def test_max_position_embeddings_too_small(tmp_path):
    t = write_target_config(tmp_path / "t", max_pos=4096)
    res = compat(str(drafter(tmp_path)), str(t), engine="sglang")
    assert "max-position" in codes(res, "warning")
    assert res.compatible  # a warning, not an error


def test_norm_flags_sglang_lacks(tmp_path, target):
    d = drafter(tmp_path, layout="vllm", spec={"norm_before_residual": True})
    assert "norm-flag" in codes(compat(str(d), str(target), engine="sglang"))
    assert "norm-flag" not in codes(
        compat(str(d), str(target), engine="vllm")
    )  # vLLM implements it


def test_tokenizers_must_match(tmp_path):
    t = write_target_config(tmp_path / "t", tokenizer='{"model": "a"}')
    d = drafter(tmp_path)
    (d / "tokenizer.json").write_text('{"model": "b"}')
    assert "tokenizer" in codes(compat(str(d), str(t)))
    (d / "tokenizer.json").write_text('{"model": "a"}')
    assert "tokenizer" not in codes(compat(str(d), str(t)))


def test_cli_exit_codes_and_json(tmp_path, target):
    good = drafter(tmp_path, "good")
    r = run_cli("compat", good, target, "--json", "--engine", "sglang")
    assert r.code == 0 and json.loads(r.out)["compatible"] is True
    r = run_cli("compat", good, target)  # vLLM >= 0.22 reads the nested ids as h-indices
    assert r.code == 1 and "aux-convention [vllm]" in r.out
    bad = drafter(tmp_path, "bad", omit=("embed_tokens.weight", "lm_head.weight"))
    r = run_cli("compat", bad, target)
    assert r.code == 1 and "missing-lm-head" in r.out
    r = run_cli("compat", target, target)
    assert r.code == 2 and "at least one drafter" in r.err
    r = run_cli("compat", good, target, "--engine", "tgi")
    assert r.code == 2


def test_one_checker_for_compat_and_convert(tmp_path, target):
    """A defect of a drafter alone is found by checker.check_drafter, told by compat with the
    drafter it concerns as a field (not a message prefix), and refused by convert in the same
    words."""
    from eagle3kit.checkpoint.eagle3.convert import convert

    good = drafter(tmp_path, "good")
    broken = drafter(tmp_path, "broken", omit=("embed_tokens.weight", "lm_head.weight"))
    res = compat(str(good), str(broken))
    (miss,) = [f for f in res.findings if f.code == "missing-lm-head"]
    assert miss.drafter == "B" and miss.to_json()["drafter"] == "B"
    assert miss.message.startswith("lm_head.weight: expected a tensor")
    served = compat(str(broken), str(target))
    assert [f.message for f in served.findings if f.code == "missing-lm-head"] == [miss.message]
    with pytest.raises(Eagle3Error) as e:
        convert(str(broken), "vllm", str(tmp_path / "out"))
    assert str(e.value).endswith(miss.message)
    assert not (tmp_path / "out").exists()


def test_d2t_without_t2d_says_t2d_is_derived(tmp_path, target):
    """Issue 21: compat tells that t2d will be derived from d2t (not a silent all-zero t2d)."""
    d = drafter(tmp_path, omit=("embed_tokens.weight", "t2d"))
    res = compat(str(d), str(target), engine="sglang")
    (f,) = [f for f in res.findings if f.code == "t2d-derived"]
    assert f.severity == "info" and "derived from d2t" in f.message
    assert "missing-t2d" not in codes(res, "warning") and res.compatible


def test_unknown_writer_renders_trained_on_in_words(tmp_path, target):
    """Issue 21: the human output never prints a Python dict for the two readings."""
    nested = {"eagle_aux_hidden_state_layer_ids": [2, 5, 9]}
    d = drafter(tmp_path, config_overrides={"eagle_config": nested, "eagle3kit": None})
    r = run_cli("compat", d, target)
    assert "{" not in r.out and "'layer_output'" not in r.out, r.out
    # h[x+1] under the layer-output reading, h[x] under the h-index one
    text = " ".join(r.out.split())  # Rich wraps long lines
    line = text[text.index("SGLang") : text.index("vLLM")]
    assert "drafter trained on h[3, 6, 10] if its ids are layer outputs" in line, line
    assert "h[2, 5, 9] if they are h-indices" in line, line
