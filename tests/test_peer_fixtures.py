"""Drafters written by the peers' own code (tests/fixtures/peers/; issue 47), without the peers.

speculators 0.9.0's trainer (`speculators train --dry-run`) and z-lab dflash 0.1.0's
`DFlashDraftModel.save_pretrained` wrote them (benchmarks/peers/make_peer_fixtures.py, in each
peer's venv). Checked here:
- the files: safetensors and JSON only, as the JSON beside each folder records them (sha256),
  every tensor named and shaped as the peer wrote it, and the layout facts the peers' source
  fixes (which tensors a speculators DFlash/DSpark file carries, DSpark's heads, P-EAGLE's
  mask_hidden, ...);
- what eagle3kit makes of them: `inspect` reports no error, `compat --engine vllm@0.33`
  finds what vLLM 0.33's code does with the file, `generate` with default options decodes
  token-identically to plain greedy, and our drafter's logits equal the peer's own forward
  outputs within 1e-4 (float32).
The last four are marked xfail (strict) where today's eagle3kit fails, with the reason found
(/work/helpers/peer-findings-47.md, benchmarks/results/peer_fixtures_today.json); a fix flips
them.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from conftest import run_cli
from peer_fixture_helpers import PEERS, meta, our_rows

SPEC = "speculators-0.9.0"
ZLAB = "dflash-0.1.0"
FIXTURES = [
    (ZLAB, "dflash-b4"),
    *(
        (SPEC, v)
        for v in (
            "dflash-defaults",
            "dflash-dsv3",
            "dflash-fullvocab",
            "dflash-reduced",
            "dspark-defaults",
            "dspark-reduced-gated",
            "dspark-small",
            "eagle3-defaults",
            "eagle3-reduced",
            "peagle-1layer",
            "peagle-2layer",
        )
    ),
]
IDS = [v for _, v in FIXTURES]
TARGETS = ("llama-v1-tiny", "dsv3-v1-tiny")
TOL = 1e-4

# Why today's eagle3kit fails a check (the findings). A fixture not named passes today.
INSPECT_FAILS: dict = {}
# The errors vLLM 0.33's code calls for (its source, read file by file):
# - dflash-causality: vLLM's update_dflash (transformers_utils/configs/speculators/algos.py)
#   sets dflash_config.causal = not sliding_window_non_causal (false: causal) for every layer;
#   speculators trains full-attention layers bidirectional (models/dflash/attention.py).
# - engine-refuses: the gated Markov head's gate_proj has no parameter in vLLM's
#   DSparkMarkovHead (model_executor/models/qwen3_dspark.py); AutoWeightsLoader raises.
# Nothing else: vLLM shares the target's embedding and lm_head when the file has none
# (qwen3_dflash.py / qwen3_dspark.py load_weights; dspark/utils.py load_dspark_model), serves
# DSpark's sample_from_anchor (dspark/speculator.py: N queries), leaves DSpark's layers
# causal only where sliding (update_dspark sets no dflash_config.causal).
VLLM_033 = {
    "dflash-dsv3": {"dflash-causality"},
    "dflash-fullvocab": {"dflash-causality"},
    "dflash-reduced": {"dflash-causality"},
    "dspark-reduced-gated": {"engine-refuses"},
}
COMPAT_FAILS: dict = {}
RUN_FAILS: dict = {}
GENERATE_FAILS: dict = {}
GENERATE_FAILS |= RUN_FAILS


def _params(fails: dict, items=None):
    out = []
    for folder, v in items or FIXTURES:
        marks = [pytest.mark.xfail(strict=True, reason=fails[v])] if v in fails else []
        out.append(pytest.param(folder, v, marks=marks, id=v))
    return out


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _header(path) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {
            k: {"shape": list(f.get_slice(k).get_shape()), "dtype": f.get_slice(k).get_dtype()}
            for k in f.keys()  # noqa: SIM118
        }


def test_every_fixture_is_there():
    """The fixtures on disk, this list and the maker's list are the same set."""
    import importlib.util

    path = PEERS.parents[2] / "benchmarks" / "peers" / "make_peer_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_peer_fixtures", path)
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    found = sorted((m.parent.name, m.stem) for m in PEERS.glob("*/*.json"))
    assert found == sorted(FIXTURES)
    assert sorted(maker.SPECULATORS) == sorted(v for f, v in FIXTURES if f == SPEC)


def test_only_safetensors_and_json():
    odd = [
        str(p.relative_to(PEERS))
        for p in PEERS.rglob("*")
        if p.is_file() and p.suffix not in (".json", ".safetensors")
    ]
    assert not odd


@pytest.mark.parametrize("folder,variant", _params({}))
def test_files_as_the_json_records(folder, variant):
    m, d = meta(folder, variant), PEERS / folder / variant
    assert (m["peer"], m["version"]) == tuple(folder.rsplit("-", 1))
    assert sorted(p.name for p in d.iterdir()) == ["config.json", "model.safetensors"]
    for name, rec in m["files"].items():
        assert (_sha(d / name), (d / name).stat().st_size) == (rec["sha256"], rec["bytes"])
    fwd = PEERS / folder / m["forward"]["file"]
    assert _sha(fwd) == m["forward"]["sha256"]
    for p in (d / "config.json", PEERS / folder / f"{variant}.json"):
        assert not re.search(r"(?:^|[\s\"'])/(?:root|home|tmp|work|Users)/", p.read_text())


@pytest.mark.parametrize("folder,variant", _params({}))
def test_tensors_as_the_peer_wrote_them(folder, variant):
    m = meta(folder, variant)
    assert _header(PEERS / folder / variant / "model.safetensors") == m["tensors"]
    assert _header(PEERS / folder / m["forward"]["file"]) == m["forward"]["tensors"]


def _shapes(folder, variant) -> tuple[dict, dict]:
    d = PEERS / folder / variant
    cfg = json.loads((d / "config.json").read_text())
    return cfg, {k: tuple(v["shape"]) for k, v in _header(d / "model.safetensors").items()}


@pytest.mark.parametrize("folder,variant", _params({}))
def test_layout_facts_from_the_peers_source(folder, variant):
    """What the peers' code fixes about their files (their source, not the JSON)."""
    cfg, t = _shapes(folder, variant)
    if folder == ZLAB:  # dflash/model.py: a Qwen3 model with no embedding or head of its own
        assert cfg["architectures"] == ["DFlashDraftModel"]
        assert cfg["dflash_config"]["target_layer_ids"] == [1, 5]  # build_target_layer_ids(8, 2)
        assert t["fc.weight"] == (32, 64) and "embed_tokens.weight" not in t
        return
    layer, kind = cfg["transformer_layer_config"], cfg["speculators_model_type"]
    v, h, vd = layer["vocab_size"], layer["hidden_size"], cfg["draft_vocab_size"]
    assert (
        cfg["speculators_config"]["verifier"]["name_or_path"]
        == meta(folder, variant)["verifier"]["zoo"]
    )
    reduced = vd < v
    assert ("d2t" in t, "t2d" in t) == (reduced, reduced)
    if reduced:
        assert (t["d2t"], t["t2d"]) == ((vd,), (v,))
    if kind in ("dflash", "dspark"):  # dflash/core.py __init__: _keys_to_ignore_on_save
        assert "embed_tokens.weight" not in t
        assert t.get("lm_head.weight") == ((vd, h) if reduced else None)
    if kind == "dspark":  # dspark/model_definitions.py MarkovHead, ConfidenceHead
        r = cfg["markov_rank"]
        assert (t["markov_head.markov_w1.weight"], t["markov_head.markov_w2.weight"]) == (
            (v, r),
            (vd, r),
        )
        assert t["confidence_head.proj.weight"] == (1, h + r)
        assert t["confidence_head.proj.bias"] == (1,)
        gated = cfg["markov_head_type"] == "gated"
        assert ("markov_head.gate_proj.weight" in t) == gated
    if kind in ("eagle3", "peagle"):  # eagle3/core.py: the embedding is saved, lm_head too
        n_aux = len(cfg["eagle_aux_hidden_state_layer_ids"])
        assert t["embed_tokens.weight"] == (v, h) and t["lm_head.weight"] == (vd, h)
        assert t["fc.weight"] == (h, n_aux * h)
        assert ("input_norm.weight" in t) == cfg["norm_before_fc"]
        n = layer["num_hidden_layers"]
        assert {int(k.split(".")[1]) for k in t if k.startswith("layers.")} == set(range(n))
    if kind == "peagle":  # peagle/core.py: mask_hidden [1, 1, n_aux x H]
        assert t["mask_hidden"] == (1, 1, n_aux * h)


@pytest.mark.parametrize("folder,variant", _params(INSPECT_FAILS))
def test_inspect_reports_no_error(folder, variant):
    r = run_cli("inspect", PEERS / folder / variant, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert (doc["missing"], doc["unexpected"], doc["shape_mismatches"]) == ([], [], [])
    want = meta(folder, variant)["method"]
    assert doc["method"] in ({"eagle3", "eagle3.1"} if want == "eagle3" else {want})


def _zoo(member: str) -> str:
    from eagle3kit import zoo

    return str(zoo.get(member.removesuffix("-tiny"), size="tiny"))


@pytest.mark.parametrize("folder,variant", _params(COMPAT_FAILS))
def test_compat_agrees_with_vllm_033(folder, variant):
    target = _zoo(meta(folder, variant)["verifier"]["zoo"])
    r = run_cli("compat", PEERS / folder / variant, target, "--engine", "vllm@0.33", "--json")
    assert r.code in (0, 1), r.err
    found = {f["code"] for f in json.loads(r.out)["findings"] if f["severity"] == "error"}
    want = VLLM_033.get(variant, set())
    assert (found, r.code) == (want, 1 if want else 0)


def _load(folder, variant):
    from eagle3kit.model.loading import load_pair

    return load_pair(meta(folder, variant)["verifier"]["zoo"], str(PEERS / folder / variant))


@pytest.mark.parametrize("folder,variant", _params(RUN_FAILS))
def test_logits_equal_the_peers(folder, variant):
    import torch
    from safetensors.torch import load_file

    _tm, d = _load(folder, variant)
    x = load_file(str(PEERS / folder / meta(folder, variant)["forward"]["file"]))
    with torch.no_grad():
        rows = our_rows(meta(folder, variant)["method"], d.eval(), x)
    assert rows
    assert max(float((a - b).abs().max()) for a, b in rows) <= TOL


_PLAIN: dict = {}


def _greedy(target: str, ids: list[int]) -> list[int]:
    from eagle3kit.decode import greedy_generate
    from eagle3kit.model.loading import load_target

    key = (target, tuple(ids))
    if key not in _PLAIN:
        tm = load_target(target)
        g = greedy_generate(tm, ids, max_new_tokens=16, eos_token_id=tm.tokenizer.eos_token_id)
        _PLAIN[key] = g.tokens
    return _PLAIN[key]


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("folder,variant", _params(GENERATE_FAILS))
def test_generate_defaults_equal_plain_greedy(folder, variant, target):
    d = PEERS / folder / variant
    args = ("--target", target, "--drafter", d, "--prompt", "def read_config(path):")
    r = run_cli("generate", *args, "--max-new-tokens", "16", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["tokens"] == _greedy(target, doc["prompt_ids"])
