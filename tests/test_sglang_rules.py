"""SGLang 0.5.23 as the judge of `convert --to sglang` and `compat --engine sglang`.

Every expected value is what SGLang 0.5.23's own code did with the files of
benchmarks/engine_check.py (probe benchmarks/engine_check_sglang.py; records in
benchmarks/results/engine_check-sglang-0.5.23.json, case named in each comment), or, where no
case exercises it, what its source says: sglang 0.5.23 python/sglang/srt/models/llama.py
`set_eagle3_layers_to_capture` (id x -> layer x + 1 always) and models/deepseek_v2.py (x + 1
only when the first id is 1), the forward capturing the input of layer i, i.e. h[i].
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ckpt_helpers import tiny_spec

from eagle3kit.checkpoint.compat import compat
from eagle3kit.checkpoint.eagle3.convert import convert
from eagle3kit.checkpoint.eagle3.synthetic import write_sparse_drafter
from eagle3kit.checkpoint.engines import rules as E
from eagle3kit.core.errors import Eagle3Error

L = 8  # target layers, as in the engine_check cases
ARCH = {"llama": "LlamaForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM"}
MLA = dict(
    attention="mla",
    architecture="Eagle3DeepseekV2ForCausalLM",
    model_type="kimi_k2",
    q_lora_rank=32,
    kv_lora_rank=32,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=16,
    num_key_value_heads=4,
    head_dim=24,
)


def tgt(tmp_path, model_type: str):
    d = tmp_path / f"target-{model_type}"
    d.mkdir(exist_ok=True)
    cfg = {
        "architectures": [ARCH.get(model_type, "DeepseekV3ForCausalLM")],
        "model_type": model_type,
        "num_hidden_layers": L,
        "hidden_size": 64,
        "vocab_size": 512,
        "max_position_embeddings": 1024,
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def source(tmp_path, layout="vllm", extra=None, over=None, **kw):
    """A drafter as a third party wrote it (every flag as given), speculators' layout by default."""
    spec = tiny_spec(**{"aux_layers": (2, 4, 5), **kw})
    return write_sparse_drafter(
        tmp_path / "src", spec, layout, config_overrides=over, extra_tensors=extra
    )


def ids_of(d):
    cfg = json.loads((d / "config.json").read_text())
    return cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]


def errors(res, code=None):
    return [f for f in res.findings if f.severity == "error" and (code is None or f.code == code)]


@pytest.mark.parametrize(
    "model_type,aux,ids",
    [
        ("llama", (3, 4, 6), [2, 3, 5]),  # llama-mha-sglang-aux_custom: captured h[3, 4, 6]
        ("llama", (2, 4, 5), [1, 3, 4]),  # llama-mha-sglang-plain: captured h[2, 4, 5]
        ("deepseek_v3", (3, 4, 6), [3, 4, 6]),  # deepseek_v3-mha-sglang-aux_custom: h[3, 4, 6]
        ("deepseek_v3", (2, 4, 5), [1, 3, 4]),  # deepseek_v3-mha-sglang-plain: h[2, 4, 5]
        ("kimi_k2", (3, 4, 6), [3, 4, 6]),  # kimi_k2 targets load as DeepseekV3ForCausalLM
    ],
)
def test_convert_writes_the_ids_sglang_reads(tmp_path, model_type, aux, ids):
    t = tgt(tmp_path, model_type)
    out = tmp_path / "out"
    convert(str(source(tmp_path, aux_layers=aux)), "sglang", str(out), verifier=str(t))
    assert ids_of(out) == ids
    res = compat(str(out), str(t), "sglang@0.5.23")
    assert res.engines["sglang"]["captures"] == list(aux)
    assert not errors(res), [f.message for f in errors(res)]


def test_the_former_ids_on_a_deepseek_target_are_flagged_and_fixed(tmp_path):
    # our former writer's h - 1 ids [2, 3, 5] for h[3, 4, 6]: on a DeepSeek-V3 target SGLang
    # 0.5.23 (first id not 1: as is) captures h[2, 3, 5] (deepseek_v2.py; also seen by running
    # benchmarks/engine_check_sglang.py by hand on deepseek_v3-mha-sglang-aux_custom with the
    # ids edited to [2, 3, 5]: not a case of the committed result)
    t = tgt(tmp_path, "deepseek_v3")
    old = tmp_path / "old"
    convert(str(source(tmp_path, aux_layers=(3, 4, 6))), "sglang", str(old))  # no verifier
    assert ids_of(old) == [2, 3, 5]
    res = compat(str(old), str(t), "sglang@0.5.23")
    assert res.engines["sglang"]["captures"] == [2, 3, 5]
    err = errors(res, "aux-convention")
    assert err and "convert --to sglang --verifier" in err[0].message
    fixed = tmp_path / "fixed"
    convert(str(old), "sglang", str(fixed), verifier=str(t))
    assert ids_of(fixed) == [3, 4, 6]
    assert not errors(compat(str(fixed), str(t), "sglang@0.5.23"))


def test_without_a_target_convert_says_the_ids_depend_on_it(tmp_path):
    res = convert(str(source(tmp_path, aux_layers=(3, 4, 6))), "sglang", str(tmp_path / "o1"))
    assert any("--verifier" in n for n in res.notes)
    # h[2, ...] is written [1, ...], which both capture rules read as the same layers
    res = convert(str(source(tmp_path, aux_layers=(2, 4, 5))), "sglang", str(tmp_path / "o2"))
    assert not any("--verifier" in n for n in res.notes)


def test_h1_first_cannot_be_written_for_a_deepseek_target(tmp_path):
    # deepseek_v2.py reads a first id 1 as h[2]; h[1] written as id 0 is read as h[0]
    t = tgt(tmp_path, "deepseek_v3")
    src = source(tmp_path, aux_layers=(1, 4, 6))
    with pytest.raises(Eagle3Error, match=r"h\[1, 4, 6\].*first"):
        convert(str(src), "sglang", str(tmp_path / "out"), verifier=str(t))
    assert not (tmp_path / "out").exists()
    out = tmp_path / "llama"  # llama.py adds 1 to every id: [0, 3, 5]
    convert(str(src), "sglang", str(out), verifier=str(tgt(tmp_path, "llama")))
    assert ids_of(out) == [0, 3, 5]
    res = compat(str(out), str(t), "sglang@0.5.23")  # that file on the DeepSeek target: h[0, 3, 5]
    assert res.engines["sglang"]["captures"] == [0, 3, 5]
    (err,) = errors(res, "aux-convention")
    assert "no ids make SGLang capture h[1, 4, 6]" in err.message


def test_ids_for_inverts_the_capture_rules():
    assert E.ids_for("sglang", None, "llama", [3, 4, 6]) == [2, 3, 5]
    assert E.ids_for("sglang", None, "llama", [0, 4, 6]) is None
    assert E.ids_for("sglang", None, "deepseek", [2, 4, 5]) == [1, 3, 4]
    assert E.ids_for("sglang", None, "deepseek", [3, 4, 6]) == [3, 4, 6]
    assert E.ids_for("sglang", None, "deepseek", [1, 4, 6]) is None
    assert E.ids_for("sglang", (0, 5, 12), "deepseek", [3, 4, 6]) == [2, 3, 5]  # before PR #25454
    assert E.ids_for("vllm", None, "deepseek", [3, 4, 6]) == [3, 4, 6]


EXTRA = {
    "norm_before_fc": {"input_norm.weight": (3 * 64,)},
    "fc_norm": {f"fc_norm.{i}.weight": (64,) for i in range(3)},
    "norm_output": {},
}


@pytest.mark.parametrize("model_type", ["llama", "deepseek_v3"])
@pytest.mark.parametrize("flag", ["norm_before_fc", "fc_norm", "norm_output"])
def test_sglang_implements_the_mha_flags(tmp_path, flag, model_type):
    # llama-mha-sglang-<flag>, deepseek_v3-mha-sglang-<flag>: the flag took effect
    # (llama_eagle3.py input_norm / fc_norm / norm_output) and every tensor was consumed
    t = tgt(tmp_path, model_type)
    out = tmp_path / "out"
    convert(str(source(tmp_path, **{flag: True})), "sglang", str(out), verifier=str(t))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg[flag] is True
    res = compat(str(out), str(t), "sglang@0.5.23")
    assert not errors(res), [f.message for f in errors(res)]


def test_sglang_ignores_norm_before_residual(tmp_path):
    # llama-mha-sglang-norm_before_residual (forced): served, the flag not in effect
    src = source(tmp_path, norm_before_residual=True)
    with pytest.raises(Eagle3Error, match="norm_before_residual"):
        convert(str(src), "sglang", str(tmp_path / "out"))
    forced = source(
        tmp_path / "f", layout="sglang", over={"norm_before_residual": True}
    )  # a third party's SGLang-layout file
    res = compat(str(forced), str(tgt(tmp_path, "llama")), "sglang@0.5.23")
    assert [f.code for f in errors(res)] == ["norm-flag"]


def test_mla_flags(tmp_path):
    t = tgt(tmp_path, "kimi_k2")
    # kimi_k2-mla-sglang-fc_norm: fc_norm took effect, every tensor consumed
    src = source(tmp_path / "a", layout="sglang", fc_norm=True, **MLA)
    out = tmp_path / "fc"
    convert(str(src), "sglang", str(out), verifier=str(t))
    assert json.loads((out / "config.json").read_text())["fc_norm"] is True
    assert not errors(compat(str(out), str(t), "sglang@0.5.23"))
    # kimi_k2-mla-sglang-norm_before_fc (forced): input_norm.weight left unused
    forced = source(
        tmp_path / "b",
        layout="sglang",
        over={"norm_before_fc": True},
        extra={"input_norm.weight": (3 * 64,)},
        **MLA,
    )
    with pytest.raises(Eagle3Error, match="norm_before_fc"):
        convert(str(forced), "sglang", str(tmp_path / "nbf"), verifier=str(t))
    res = compat(str(forced), str(t), "sglang@0.5.23")
    assert "norm-flag" in [f.code for f in errors(res)]


def test_mla_sglang_layout_names_the_v2_class(tmp_path):
    # SGLang 0.5.23 registers only Eagle3DeepseekV2ForCausalLM (kimi_k25_eagle3.py EntryClass):
    # the V3 name is refused at model_class ("... is not a registered model"; the probe run by
    # hand on kimi_k2-mla-sglang-plain renamed V3, not a case of the committed result)
    src = source(tmp_path, layout="vllm", **{**MLA, "architecture": "Eagle3DeepseekV3ForCausalLM"})
    out = tmp_path / "out"
    convert(str(src), "sglang", str(out))
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Eagle3DeepseekV2ForCausalLM"]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]  # h[2, 4, 5]
    res = compat(str(src), str(tgt(tmp_path, "kimi_k2")), "sglang@0.5.23")
    assert "architecture" in [f.code for f in errors(res)]


def test_layers0_names_load_in_sglang(tmp_path):
    # llama_eagle3.py maps midlayer -> layers.0 and loads layers.0.* as they are: the probe run
    # by hand on llama-mha-sglang-plain renamed to layers.0.* (not a case of the committed
    # result) saw every tensor but t2d consumed, no parameter unfilled but the embedding
    import torch
    from safetensors.torch import load_file, save_file

    d = source(tmp_path, layout="sglang")
    f = d / "model.safetensors"
    tensors = {k.replace("midlayer.", "layers.0."): v for k, v in load_file(str(f)).items()}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(f))
    assert any(k.startswith("layers.0.") for k in tensors) and torch.is_tensor(tensors["fc.weight"])
    res = compat(str(d), str(tgt(tmp_path, "llama")), "sglang@0.5.23")
    assert not errors(res), [f.message for f in errors(res)]


RESULT = Path(__file__).resolve().parents[1] / "benchmarks/results/engine_check-sglang-0.5.23.json"


def test_the_records_cited_above():
    """The engine records the expected values above are taken from say what is cited."""
    recs = {r["case"]: r for r in json.loads(RESULT.read_text())["records"]}
    ids = {n: (recs[n]["engine_layer_ids"], recs[n]["captured_h"]) for n in recs}
    assert ids["llama-mha-sglang-aux_custom"] == ([2, 3, 5], [3, 4, 6])
    assert ids["llama-mha-sglang-plain"] == ([1, 3, 4], [2, 4, 5])
    assert ids["deepseek_v3-mha-sglang-aux_custom"] == ([3, 4, 6], [3, 4, 6])
    assert ids["deepseek_v3-mha-sglang-plain"] == ([1, 3, 4], [2, 4, 5])
    assert ids["kimi_k2-mla-sglang-aux_custom"] == ([3, 4, 6], [3, 4, 6])
    for fam in ("llama", "deepseek_v3"):
        for flag in ("norm_before_fc", "fc_norm", "norm_output"):
            r = recs[f"{fam}-mha-sglang-{flag}"]
            assert r["outcome"] == "served" and r["flags_effective"][flag], r
            assert r["tensors_unused"] == ["t2d"]
            assert r["params_unfilled"] == r["params_from_target"]
    for fam in ("deepseek_v3", "kimi_k2"):
        assert recs[f"{fam}-mla-sglang-fc_norm"]["flags_effective"]["fc_norm"]
        nbf = recs[f"{fam}-mla-sglang-norm_before_fc"]
        assert not nbf["flags_effective"]["norm_before_fc"]
        assert "input_norm.weight" in nbf["tensors_unused"]
    for name, r in recs.items():
        if name.endswith("norm_before_residual") and r["outcome"] == "served":
            assert not r["flags_effective"]["norm_before_residual"], name
        if "-mha-vllm-" in name:
            assert r["stage"] == "config" and "`model_type`" in r["error"], name
        if "-mla-sglang-" in name:
            assert r["architecture"] == "Eagle3DeepseekV2ForCausalLM", name
