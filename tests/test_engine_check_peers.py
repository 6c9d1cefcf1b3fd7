"""compat against what vLLM's own code did with the drafters the peers' own code wrote.

benchmarks/engine_check.py runs vLLM's probe (benchmarks/engine_check_vllm.py) on every file in
tests/fixtures/peers (speculators 0.9.0's trainer, z-lab dflash 0.1.0), served as eagle3kit's
launch line for the method it detects; its records are `peer_records` in
benchmarks/results/engine_check-vllm-*.json. Here each record is held against `compat
--engine vllm@VERSION` on the same file and zoo member:

- the engine refused the file          -> compat reports an error for vLLM;
- it served it                          -> compat's captured layers are the engine's, and
  compat reports an error exactly when the engine did not serve it as trained: other layers
  captured, a layer run with other causality than trained (`dflash-causality`), a file tensor
  unused, a drafter parameter unfilled but those taken from the target or never read.

A file whose method eagle3kit has no package for is read as another method and not judged
(`unjudged`); none may be left once its package exists (test_every_peer_file_is_judged).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest

from eagle3kit.checkpoint.compat import compat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import engine_check  # noqa: E402

PEERS = ROOT / "tests" / "fixtures" / "peers"
NEVER_READ = {"t2d"}  # no engine reads t2d (docs/formats.md "d2t and t2d")
# Parameters vLLM leaves unfilled that the file cannot and need not fill:
# - model.mask_embedding: an optional override read from mask_embedding.pt; without that file
#   the mask token's own embedding is used (vllm 0.33 qwen3_dflash.py has_separate_mask_embedding)
# - layers.{i >= 1}.hidden_norm: vLLM's EAGLE-3 LlamaDecoderLayer builds it in every layer;
#   only layer 0's forward reads it (vllm 0.33 llama_eagle3.py LlamaDecoderLayer.forward)
NEVER_USED = re.compile(r"^model\.mask_embedding$|^model\.layers\.[1-9]\d*\.hidden_norm\.weight$")
RESULTS = [p for p in engine_check.result_files() if "peer_records" in json.loads(p.read_text())]


def _pairs(path: Path) -> list[tuple[dict, dict | None]]:
    doc = json.loads(path.read_text())
    recs = {r["case"]: r for r in doc["peer_records"]}
    return [({**c, "version": doc["version"]}, recs.get(c["name"])) for c in doc["peer_cases"]]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def unjudged(case: dict) -> str | None:
    """Why a file is not judged: its method has no package here (read as another)."""
    from eagle3kit.checkpoint.io.safetensors_io import load_checkpoint
    from eagle3kit.checkpoint.methods import detect_method
    from eagle3kit.core import registry

    ckpt = load_checkpoint(str(PEERS / case["fixture"]))
    found = detect_method(ckpt.config, set(ckpt.tensors))
    return None if registry.find(found) else f"method {found!r} has no package here"


def _member(case: dict) -> str:
    from eagle3kit import zoo

    return str(zoo.get(case["verifier"].removesuffix("-tiny"), size="tiny"))


def as_trained(rec: dict, entry: dict, trained_causal: list[bool] | None) -> list[str]:
    """How the engine's run differs from the file as trained (empty: as trained)."""
    out = []
    if rec.get("captured_h") != entry.get("trained_on"):
        out.append(f"captured h{rec.get('captured_h')}, trained on h{entry.get('trained_on')}")
    ran = (rec.get("method") or {}).get("layer_causal")
    if ran is not None and trained_causal is not None and ran != trained_causal:
        out.append(f"layers run causal {ran}, trained {trained_causal}")
    unused = set(rec.get("tensors_unused") or []) - NEVER_READ
    if unused:
        out.append(f"file tensors unused: {sorted(unused)}")
    left = set(rec.get("params_unfilled") or []) - set(rec.get("params_from_target") or [])
    left = {n for n in left if not NEVER_USED.match(n)}
    if left:
        out.append(f"parameters unfilled: {sorted(left)}")
    return out


def mismatches(case: dict, rec: dict | None) -> list[str]:
    if rec is None or rec.get("outcome") not in ("served", "refused"):
        return [f"no engine verdict: {rec and rec.get('error')}"]
    d = PEERS / case["fixture"]
    now = {n: _sha(d / n) for n in ("config.json", "model.safetensors")}
    if now != case["files"]:
        return ["the fixture changed since the engine ran: rerun benchmarks/engine_check.py"]
    res = compat(str(d), _member(case), f"vllm@{case['version']}").to_json()
    mine = [
        f["code"]
        for f in res["findings"]
        if f["severity"] == "error" and f["engine"] in (None, "vllm")
    ]
    if rec["outcome"] == "refused":
        return [] if mine else [f"vLLM refused it ({rec['error']}); compat: no error"]
    entry = res["engines"]["vllm"]
    out = []
    if entry.get("captures") != rec.get("captured_h"):
        out.append(f"vLLM captured h{rec['captured_h']}; compat says h{entry.get('captures')}")
    from eagle3kit.checkpoint.inspection import inspect_checkpoint

    doc = inspect_checkpoint(str(d)).to_json()
    wrong = as_trained(rec, entry, doc.get("layer_causal"))
    if bool(wrong) != bool(mine):
        how = "wrongly: " + "; ".join(wrong) if wrong else "as trained"
        out.append(f"vLLM served it {how}; compat errors: {mine}")
    if any(w.startswith("layers run causal") for w in wrong) and "dflash-causality" not in mine:
        out.append("vLLM ran other causality than trained; compat: no dflash-causality")
    return out


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_there_is_a_record_of_the_peers_files():
    assert RESULTS, "no engine_check result with peer_records (python benchmarks/engine_check.py)"
    cases = [c["fixture"] for c, _ in _pairs(RESULTS[-1])]
    found = sorted(f"{m.parent.name}/{m.stem}" for m in PEERS.glob("*/*.json"))
    assert sorted(cases) == found


@pytest.mark.parametrize("path", RESULTS, ids=_ids(RESULTS))
def test_compat_predicts_vllm_on_the_peers_files(path):
    bad = []
    for case, rec in _pairs(path):
        if unjudged(case):
            continue
        bad += [f"{case['name']}: {m}" for m in mismatches(case, rec)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("path", RESULTS, ids=_ids(RESULTS))
def test_the_check_catches_a_wrong_record(path):
    """Each kind of disagreement is caught: the check above can fail."""
    pairs = [(c, r) for c, r in _pairs(path) if not unjudged(c) and r and r["outcome"] == "served"]
    case, rec = next((c, r) for c, r in pairs if c["fixture"].endswith("dflash-fullvocab"))
    assert mismatches(case, {**rec, "method": {**rec["method"], "layer_causal": [False, False]}})
    case, rec = next((c, r) for c, r in pairs if c["fixture"].endswith("dflash-b4"))
    assert mismatches(case, rec) == []
    assert mismatches(case, {**rec, "captured_h": [1, 5]})
    assert mismatches(case, {**rec, "outcome": "refused", "error": "x"})
    assert mismatches(case, {**rec, "tensors_unused": ["fc.weight"]})
    assert mismatches(case, {**rec, "params_unfilled": ["model.fc.weight"]})
