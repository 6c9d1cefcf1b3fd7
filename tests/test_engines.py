"""Engine rules by version and target family (docs/formats.md "Engine rules by release",
"Norm flags").

Every expected h-index list below is written by hand from docs/formats.md's tables, not computed by
the code under test. Targets have L = 64 layers, so the engines' default h[2, L//2, L-3] is
D = [2, 32, 61], distinct from every reading of the ids [1, 29, 57] and [2, 30, 58].
"""

from __future__ import annotations

import json
import re

import pytest
from ckpt_helpers import tiny_spec
from conftest import run_cli

from eagle3kit.checkpoint.compat import compat
from eagle3kit.checkpoint.eagle3.synthetic import write_sparse_drafter
from eagle3kit.checkpoint.engines import rules as E
from eagle3kit.core.errors import Eagle3Error

A, B = [1, 29, 57], [2, 30, 58]
D = [2, 32, 61]  # default h[2, L//2, L-3] for L = 64
TARGETS = {  # family -> (architectures, model_type)
    "llama": ("LlamaForCausalLM", "llama"),
    "deepseek": ("DeepseekV3ForCausalLM", "deepseek_v3"),
    "gpt-oss": ("GptOssForCausalLM", "gpt_oss"),
}
VERSIONS = ("sglang@0.5.12", "sglang@0.5.13", "sglang@0.5.17", "vllm@0.21", "vllm@0.22")
# ids in eagle_config (SGLang layout, as the AQ-MedAI Kimi-K2 drafter writes them)
NESTED = {
    ("llama", "A"): [[2, 30, 58], [2, 30, 58], [2, 30, 58], D, A],
    ("llama", "B"): [[3, 31, 59], [3, 31, 59], [3, 31, 59], D, B],
    ("deepseek", "A"): [[2, 30, 58], [2, 30, 58], [2, 30, 58], D, A],
    ("deepseek", "B"): [[3, 31, 59], [2, 30, 58], [2, 30, 58], D, B],
    ("gpt-oss", "A"): [[2, 30, 58], [2, 30, 58], A, D, A],
    ("gpt-oss", "B"): [[3, 31, 59], [3, 31, 59], B, D, B],
}
# ids at the top level (speculators layout): SGLang ignores them, vLLM reads them as h-indices
TOP = {
    ("llama", "A"): [D, D, D, A, A],
    ("deepseek", "B"): [D, D, D, B, B],
    ("gpt-oss", "A"): [D, D, D, A, A],
}


def target(tmp_path, family: str, layers: int = 64):
    arch, mt = TARGETS[family]
    d = tmp_path / f"target-{family}-{layers}"
    d.mkdir(exist_ok=True)
    cfg = {
        "architectures": [arch],
        "model_type": mt,
        "num_hidden_layers": layers,
        "hidden_size": 64,
        "vocab_size": 512,
        "max_position_embeddings": 1024,
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def third_party(tmp_path, name: str, *, nested=None, top=None, layout="sglang", **spec_kw):
    """A header-only drafter whose config carries no eagle3kit key: the ids are all there is."""
    over = {"eagle3kit": None, "eagle_config": None, "eagle_aux_hidden_state_layer_ids": None}
    if nested is not None:
        over["eagle_config"] = {
            "eagle_aux_hidden_state_layer_ids": nested,
            "use_aux_hidden_state": True,
        }
    if top is not None:
        over["eagle_aux_hidden_state_layer_ids"] = top
    spec = tiny_spec(aux_layers=None, **spec_kw)
    return write_sparse_drafter(tmp_path / name, spec, layout, config_overrides=over)


def captures(drafter, tgt, engine: str) -> list[int]:
    res = compat(str(drafter), str(tgt), engine)
    (entry,) = res.engines.values()
    assert entry["version"] == engine.split("@")[1]
    return entry["captures"]


@pytest.mark.parametrize("family,which", sorted(NESTED))
def test_nested_ids_by_engine_version(tmp_path, family, which):
    d = third_party(tmp_path, "d", nested={"A": A, "B": B}[which])
    t = target(tmp_path, family)
    got = [captures(d, t, v) for v in VERSIONS]
    assert got == NESTED[(family, which)]


@pytest.mark.parametrize("family,which", sorted(TOP))
def test_top_level_ids_by_engine_version(tmp_path, family, which):
    d = third_party(tmp_path, "d", top={"A": A, "B": B}[which])
    t = target(tmp_path, family)
    assert [captures(d, t, v) for v in VERSIONS] == TOP[(family, which)]


@pytest.mark.parametrize("family", sorted(TARGETS))
def test_no_ids_is_the_default_and_an_error_everywhere(tmp_path, family):
    d = third_party(tmp_path, "d")
    t = target(tmp_path, family)
    for v in VERSIONS:
        res = compat(str(d), str(t), v)
        name = v.split("@")[0]
        assert res.engines[name]["captures"] == D
        errs = [f for f in res.findings if f.code == "aux-default"]
        assert [f.severity for f in errs] == ["error"] and errs[0].engine == name
        assert "[2, 32, 61]" in errs[0].message and "1.036" in errs[0].message
        assert "0.70-0.79x" in errs[0].message
        assert ("warning in its log" in res.engines[name]["why"]) == (v == "vllm@0.22")  # PR #50170


def test_no_version_warns_about_older_releases(tmp_path):
    """The user's case: AQ-MedAI's Kimi-K2 drafter ([2, 30, 58] in eagle_config) on Kimi-K2.5."""
    d = third_party(tmp_path, "k2", nested=B)
    t = target(tmp_path, "deepseek", layers=61)
    res = compat(str(d), str(t), "sglang")
    assert res.engines["sglang"]["version"] == "latest"
    assert res.engines["sglang"]["captures"] == [2, 30, 58]
    old = [f for f in res.findings if f.code == "aux-older-releases"]
    assert len(old) == 1 and old[0].severity == "warning" and old[0].engine == "sglang"
    assert "SGLang < 0.5.13 captures h[3, 31, 59]" in old[0].message
    assert "inferred" in old[0].message  # 0.5.13 comes from a merge date
    pinned = compat(str(d), str(t), "sglang@0.5.13")
    assert not [f for f in pinned.findings if f.code == "aux-older-releases"]


def test_unknown_writer_gives_both_readings_and_the_releases_serving_each(tmp_path):
    d = third_party(tmp_path, "k2", nested=B)
    t = target(tmp_path, "deepseek", layers=61)
    res = compat(str(d), str(t), "both")
    sg, vl = res.engines["sglang"], res.engines["vllm"]
    assert sg["writer"]["name"] == "unknown" and sg["writer"]["confidence"] == "none"
    assert sg["trained_on"] == {"layer_output": [3, 31, 59], "h_index": [2, 30, 58]}
    assert sg["serves_if"] == {
        "layer_output": ["SGLang < 0.5.13"],
        "h_index": ["SGLang 0.5.13 to < 0.5.17", "SGLang >= 0.5.17"],
    }
    # vLLM <= 0.21 ignores eagle_config and uses its default, which for L = 61 is [2, 30, 58]
    # (and so does vLLM >= 0.33's V2 runner, which reads no nested ids)
    assert vl["serves_if"] == {
        "layer_output": [],
        "h_index": ["vLLM < 0.22", "vLLM 0.22 to < 0.33", "vLLM >= 0.33"],
    }
    amb = [f for f in res.findings if f.code == "aux-ambiguous"]
    assert {f.engine for f in amb} == {"sglang", "vllm"}
    assert all(f.severity == "warning" and "eagle3kit probe" in f.message for f in amb)
    assert res.compatible  # right under one reading: a warning, not an error
    old = compat(str(d), str(t), "sglang@0.5.12")
    assert old.engines["sglang"]["captures"] == [3, 31, 59]
    assert [f.code for f in old.findings if f.code.startswith("aux-")] == ["aux-ambiguous"]


def test_known_writer_decides(tmp_path):
    """The same ids written by speculators (h-indices) vs ModelOpt (layer outputs)."""
    t = target(tmp_path, "deepseek", layers=61)
    mo = third_party(tmp_path, "mo", nested=B)
    cfg = json.loads((mo / "config.json").read_text())
    cfg["eagle_config"]["use_last_layernorm"] = False  # a ModelOpt export template key
    (mo / "config.json").write_text(json.dumps(cfg))
    res = compat(str(mo), str(t), "sglang@0.5.13")
    assert res.writer["name"] == "ModelOpt" and res.writer["confidence"] == "high"
    assert res.engines["sglang"]["trained_on"] == [3, 31, 59]
    errs = [f for f in res.findings if f.code == "aux-convention"]
    assert errs and errs[0].engine == "sglang" and not res.compatible
    assert compat(str(mo), str(t), "sglang@0.5.12").compatible
    sp = third_party(tmp_path, "sp", top=B, layout="vllm")
    res = compat(str(sp), str(t), "vllm@0.21")
    assert res.writer["name"] == "speculators"
    assert res.engines["vllm"]["trained_on"] == [2, 30, 58] == res.engines["vllm"]["captures"]


def test_eagle3kit_key_makes_our_files_unambiguous(tmp_path):
    spec = tiny_spec(aux_layers=(2, 30, 58))
    d = write_sparse_drafter(tmp_path / "ours", spec, "sglang")
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["eagle3kit"] == {"aux_layers_hf": [2, 30, 58]}
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 29, 57]
    res = compat(str(d), str(target(tmp_path, "deepseek", layers=61)), "both")
    assert res.writer["name"] == "eagle3kit" and res.writer["confidence"] == "certain"
    assert res.engines["sglang"]["trained_on"] == [2, 30, 58] == res.engines["sglang"]["captures"]
    # vLLM >= 0.33's V2 runner ignores the nested ids: its default h[2, 30, 58] is right here;
    # its V1 runner, like 0.22-0.32, reads them as h-indices: off by one
    assert res.engines["vllm"]["captures"] == [2, 30, 58]
    runner = next(f for f in res.findings if f.code == "aux-runner")
    assert runner.engine == "vllm" and "captures h[1, 29, 57]" in runner.message
    old = [f.message for f in res.findings if f.code == "aux-older-releases"]
    assert any(m.startswith("vLLM 0.22 to < 0.33 captures h[1, 29, 57]") for m in old)
    res = compat(str(d), str(target(tmp_path, "deepseek", layers=61)), "vllm@0.22")
    assert res.engines["vllm"]["captures"] == [1, 29, 57]
    err = next(f for f in res.findings if f.code == "aux-convention")
    assert err.engine == "vllm" and "convert --to vllm" in err.message
    # vLLM 0.21 ignores the ids, and its default is what the latest rules capture
    assert not any(m.startswith("vLLM < 0.22") for m in old)


@pytest.mark.parametrize(
    "flag,engine,family,is_error",
    [
        ("norm_before_residual", "sglang", "llama", True),
        ("norm_before_residual", "vllm@0.21", "llama", False),
        # SGLang 0.5.23 builds and loads input_norm for a Llama drafter on any target
        # (benchmarks/results/engine_check-sglang-0.5.23.json, llama-mha-sglang-norm_before_fc)
        ("norm_before_fc", "sglang", "llama", False),
        ("norm_before_fc", "sglang", "deepseek", False),
        ("norm_before_fc", "sglang@0.5.13", "gpt-oss", True),
        ("norm_before_fc", "sglang@0.5.17", "gpt-oss", False),
        ("norm_before_fc", "vllm", "deepseek", False),
        ("fc_norm", "sglang@0.5.12", "llama", False),
        ("fc_norm", "vllm@0.21", "llama", True),
        ("fc_norm", "vllm@0.22", "llama", False),
        ("norm_output", "sglang", "deepseek", False),
        # vLLM 0.21.0 ignores norm_output; 0.33.0 applies it
        # (benchmarks/results/engine_check-vllm-0.21.0.json, llama-mha-vllm-norm_output)
        ("norm_output", "vllm@0.21", "gpt-oss", True),
        ("norm_output", "vllm@0.33", "gpt-oss", False),
        ("norm_output", "vllm", "llama", False),
    ],
)
def test_norm_flags_per_engine(tmp_path, flag, engine, family, is_error):
    d = write_sparse_drafter(
        tmp_path / "d", tiny_spec(aux_layers=(2, 32, 61), **{flag: True}), "vllm"
    )
    res = compat(str(d), str(target(tmp_path, family)), engine)
    # ignored (norm-flag), or refused for the flag's tensor (engine-refuses: vLLM 0.21's fc_norm)
    errs = [f for f in res.findings if f.code == "norm-flag" or f"({flag})" in f.message]
    assert bool(errs) == is_error, [f.message for f in errs]
    if errs:
        assert errs[0].engine == engine.split("@")[0] and flag in errs[0].message


def test_speculators_file_refused_by_sglang_at_config_parsing(tmp_path):
    # SGLang 0.5.23 refuses every speculators-layout file in ModelConfig (transformers'
    # AutoConfig: "Unrecognized model in DIR. Should have a `model_type` key in its
    # config.json"), before it looks at Eagle3Speculator or a tensor name
    # (benchmarks/results/engine_check-sglang-0.5.23.json, *-mha-vllm-* cases, stage "config")
    d = write_sparse_drafter(tmp_path / "d", tiny_spec(aux_layers=(2, 32, 61)), "vllm")
    res = compat(str(d), str(target(tmp_path, "llama")), "both")
    by = {(f.code, f.engine) for f in res.findings if f.severity == "error"}
    assert ("config-parse", "sglang") in by
    assert ("skipped-names", "sglang") not in by and ("architecture", "sglang") not in by
    msg = next(f.message for f in res.findings if f.code == "config-parse")
    assert "model_type" in msg and "convert --to sglang" in msg
    assert not [c for c, e in by if e == "vllm"]
    assert "SGLang" in res.verdict and "vLLM" in res.verdict


@pytest.mark.parametrize("text", ["sglang@x", "both@0.5", "tgi", "vllm,vllm@0.21", "sglang@"])
def test_bad_engine_spec(text):
    with pytest.raises(Eagle3Error, match="--engine"):
        E.parse_engines(text)


def test_engine_parsing():
    assert E.parse_engines("both") == [E.EngineSel("sglang"), E.EngineSel("vllm")]
    assert E.parse_engines("sglang@0.5.12,vllm@0.21") == [
        E.EngineSel("sglang", (0, 5, 12)),
        E.EngineSel("vllm", (0, 21)),
    ]
    assert E.band_label("sglang", (0, 5, 12)) == "< 0.5.13"
    assert E.band_label("sglang", (0, 5, 14)) == "0.5.13 to < 0.5.17"
    assert E.band_label("vllm", None) == ">= 0.33"
    assert E.band_label("vllm", (0, 25)) == "0.22 to < 0.33"


def test_every_rule_cites_a_source():
    rows = E.ID_SOURCES + E.CAPTURE_RULES + E.FLAG_RULES + E.ARCH_RULES
    assert all(re.search(r"PR #\d+|\.py\b", r.source) for r in rows), rows
    for eng in E.ENGINES:  # one id-source rule and one capture rule per release and family
        for _, rep in E.bands(eng):
            assert (
                sum(E._in_range(rep, r.since, r.until) for r in E.ID_SOURCES if r.engine == eng)
                == 1
            )
            for fam in E.FAMILIES:
                n = sum(
                    fam in r.families and E._in_range(rep, r.since, r.until)
                    for r in E.CAPTURE_RULES
                    if r.engine == eng
                )
                assert n == 1, (eng, rep, fam)


def test_cli_engine_version_json(tmp_path):
    d = third_party(tmp_path, "k2", nested=B)
    t = target(tmp_path, "deepseek", layers=61)
    r = run_cli("compat", d, t, "--engine", "sglang@0.5.12", "--json")
    doc = json.loads(r.out)
    e = doc["engines"]["sglang"]
    assert e["version"] == "0.5.12" and e["captures"] == [3, 31, 59]
    assert set(e["writer"]) >= {"name", "evidence", "confidence"}
    assert e["trained_on"] == {"layer_output": [3, 31, 59], "h_index": [2, 30, 58]}
    assert all(set(f) == {"severity", "code", "message", "engine"} for f in doc["findings"])
    r = run_cli("compat", d, t, "--engine", "sglang@next")
    assert r.code == 2 and "--engine" in r.err


def test_kimi_k25_mla_drafter_on_k25(tmp_path):
    """lightseekorg's K2.5 MLA drafter as TorchSpec's native export writes it ([1, 29, 57]
    layer outputs in eagle_config = h[2, 30, 58]), header-exact and sparse, on a K2.5 config."""
    from eagle3kit.checkpoint.eagle3.synthetic import kimi_k25_mla_spec, kimi_k25_target_config
    from eagle3kit.checkpoint.eagle3.synthetic import write_target_config as write_target

    over = {"eagle3kit": None, "_torchspec_version": "0.3.0"}
    d = write_sparse_drafter(tmp_path / "mla", kimi_k25_mla_spec(), "sglang", config_overrides=over)
    t = write_target(tmp_path / "k25", kimi_k25_target_config())
    for engine in ("sglang", "sglang@0.5.12", "sglang@0.5.13"):
        res = compat(str(d), str(t), engine)
        assert res.compatible, (engine, [f.message for f in res.findings if f.severity == "error"])
        assert res.writer["name"] == "TorchSpec" and res.writer["reading"] == "layer_output"
        assert next(iter(res.engines.values()))["captures"] == [2, 30, 58]
    # vLLM 0.33 refuses a full-vocabulary file carrying d2t (engine_check on 0.33.0); 0.21
    # loads it (a zero-initialised map it always registers; engine_check on 0.21.0) and,
    # reading no nested ids, captures its default h[2, 30, 58]: what it was trained on
    res = compat(str(d), str(t), "vllm@0.21")
    assert res.engines["vllm"]["captures"] == [2, 30, 58]
    assert [f.code for f in res.findings if f.severity == "error"] == []
    res = compat(str(d), str(t), "vllm@0.22")  # reads the nested ids as h-indices: h[1, 29, 57]
    assert res.engines["vllm"]["captures"] == [1, 29, 57]
    errs = sorted(f.code for f in res.findings if f.severity == "error")
    assert errs == ["aux-convention"]  # the d2t refusal is taken from 0.33 (release not pinned)
    res = compat(str(d), str(t), "vllm@0.33")
    assert "engine-refuses" in {f.code for f in res.findings if f.severity == "error"}
    omit = ("embed_tokens.weight", "d2t", "t2d")  # as convert --to vllm writes it
    ours = write_sparse_drafter(tmp_path / "mla-v", kimi_k25_mla_spec(), "vllm", omit=omit)
    for engine in ("vllm@0.21", "vllm@0.22", "vllm@0.33"):
        assert compat(str(ours), str(t), engine).compatible


# SGLang 0.5.23's kimi_k25_eagle3.py builds fc_norm but no input_norm: input_norm.weight is left
# unused (benchmarks/results/engine_check-sglang-0.5.23.json, kimi_k2-mla-*-norm_before_fc)
@pytest.mark.parametrize("flag,engine", [("norm_before_fc", "vllm"), ("norm_before_fc", "sglang")])
def test_mla_norm_flags_the_engine_lacks(tmp_path, flag, engine):
    from eagle3kit.checkpoint.eagle3.synthetic import kimi_k25_mla_spec, kimi_k25_target_config
    from eagle3kit.checkpoint.eagle3.synthetic import write_target_config as write_target

    spec = kimi_k25_mla_spec()  # the writer refuses the flag for vLLM; a third party's file has it
    extra = {
        "norm_before_fc": {"input_norm.weight": (3 * 7168,)},
        "fc_norm": {f"fc_norm.{i}.weight": (7168,) for i in range(3)},
    }[flag]
    d = write_sparse_drafter(
        tmp_path / "mla", spec, "vllm", config_overrides={flag: True}, extra_tensors=extra
    )
    t = write_target(tmp_path / "k25", kimi_k25_target_config())
    found = compat(str(d), str(t), engine).findings
    if engine == "vllm":  # its MLA class has no input_norm: the load fails (engine_check)
        errs = [f for f in found if f.code == "engine-refuses" and "input_norm" in f.message]
        assert len(errs) == 1 and not [f for f in found if f.code == "norm-flag"]
        return
    errs = [f for f in found if f.code == "norm-flag"]
    assert len(errs) == 1 and errs[0].engine == engine and "MLA" in errs[0].message


LLAMA_NAMES = {"fc.weight", "midlayer.self_attn.q_proj.weight"}
VLLM_NAMES = {"fc.weight", "layers.0.self_attn.q_proj.weight"}


@pytest.mark.parametrize(
    "config,names,files,name,reading,confidence",
    [
        (
            {"eagle3kit": {"aux_layers_hf": [2, 30, 58]}},
            LLAMA_NAMES,
            (),
            "eagle3kit",
            "explicit",
            "certain",
        ),
        (
            {"eagle3kit_aux_layers": [2, 30, 58]},
            LLAMA_NAMES,
            (),
            "eagle3kit",
            "explicit",
            "certain",
        ),
        (
            {"eagle3kit_verifier": "org/t", "eagle_config": {}},
            LLAMA_NAMES,
            (),
            "eagle3kit",
            "layer_output",
            "high",
        ),
        (
            {"speculators_config": {}, "architectures": ["Eagle3Speculator"]},
            VLLM_NAMES,
            (),
            "speculators",
            "h_index",
            "high",
        ),
        (
            {"_torchspec_version": "0.3", "model_type": "kimi_k2"},
            LLAMA_NAMES,
            (),
            "TorchSpec",
            "layer_output",
            "high",
        ),
        (
            {"_torchspec_version": "0.3", "model_type": "kimi_k2"},
            VLLM_NAMES,
            (),
            "TorchSpec",
            "h_index",
            "high",
        ),
        (
            {"_torchspec_version": "0.3", "model_type": "llama"},
            VLLM_NAMES,
            (),
            "TorchSpec",
            "layer_output",
            "medium",
        ),
        (
            {"eagle_config": {"use_mtp_layernorm": False}},
            LLAMA_NAMES,
            (),
            "ModelOpt",
            "layer_output",
            "high",
        ),
        (
            {"architectures": ["LlamaForCausalLMEagle3"]},
            LLAMA_NAMES,
            ("training_state.pt",),
            "SpecForge",
            "layer_output",
            "medium",
        ),
        (
            {"architectures": ["LlamaForCausalLM"], "draft_vocab_size": 32000},
            LLAMA_NAMES,
            (),
            "EAGLE",
            "h_index",
            "medium",
        ),
        (
            {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {}},
            LLAMA_NAMES,
            (),
            "unknown",
            None,
            "none",
        ),
    ],
)
def test_writer_markers(tmp_path, config, names, files, name, reading, confidence):
    from eagle3kit.checkpoint.eagle3.writers import infer_writer

    (tmp_path / "config.json").write_text(json.dumps(config))
    for f in files:
        (tmp_path / f).write_bytes(b"")
    w = infer_writer(config, names, "config.json", str(tmp_path))
    assert (w.name, w.reading, w.confidence) == (name, reading, confidence)
    assert w.evidence


def test_trained_on_by_reading():
    from eagle3kit.checkpoint.eagle3.writers import Writer, trained_on

    ids = {"top": None, "nested": (1, 29, 57)}
    out = Writer("ModelOpt", "layer_output", ["x"], "high")
    assert trained_on(out, {}, ids, 61, "c") == [2, 30, 58]
    h = Writer("TorchSpec", "h_index", ["x"], "high")
    assert trained_on(h, {}, ids, 61, "c") == [1, 29, 57]
    unk = Writer("unknown", None, [], "none")
    assert trained_on(unk, {}, ids, 61, "c") == {
        "layer_output": [2, 30, 58],
        "h_index": [1, 29, 57],
    }
    ours = Writer("eagle3kit", "explicit", ["x"], "certain")
    assert trained_on(ours, {"eagle3kit": {"aux_layers_hf": [3, 31, 59]}}, ids, 61, "c") == [
        3,
        31,
        59,
    ]
    assert trained_on(unk, {}, {"top": None, "nested": None}, 61, "c") == [2, 30, 58]  # the default


def test_bad_ids_in_the_config_are_refused(tmp_path):
    d = third_party(tmp_path, "d", nested=[1, "x", 3])
    r = run_cli("compat", d, target(tmp_path, "llama"))
    assert r.code == 2 and "eagle_aux_hidden_state_layer_ids" in r.err and "'x'" in r.err
