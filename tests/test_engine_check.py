"""compat and convert against what the engines' own code did (benchmarks/engine_check.py).

Every committed benchmarks/results/engine_check-<engine>-<version>.json (any engine, any
release) is read case by case. Each case's drafter and target are written again from the
result's own record of the files the engine was given (`files`: configs, tensor names, dtypes,
shapes, index values), `compat --engine <engine>@<version>` is run on them, and its prediction
is held against the engine's record:
- the engine refused the file            -> compat reports an error for that engine;
- it served it                            -> compat's `captures` is what the engine captured;
  a flag the engine ignored (or turned on) -> compat reports `norm-flag` for it;
  it served it as trained (the layers the drafter was trained on, every flag as set, every
  tensor used, no drafter parameter left unfilled but those taken from the target)
                                          <-> compat reports no error for that engine;
- vLLM's V1 runner captured other layers  <-> compat warns `aux-runner`.
And every file `convert --to <engine>` writes (regenerated with today's code, which must write
the very files the result holds, else the result is stale) was served as trained.
No engine is installed here; the records are the engine's word.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from eagle3kit.checkpoint.compat import compat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _engine_cases as C  # noqa: E402
import engine_check  # noqa: E402

FLAGS = ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output")
NEVER_READ = {"t2d"}  # no engine reads t2d (docs/formats.md "d2t and t2d")
RESULTS = engine_check.result_files()


def _load(path: Path) -> dict:
    doc = json.loads(path.read_text())
    recs = {r["case"]: r for r in doc["records"]}
    return {"doc": doc, "pairs": [(c, recs.get(c["name"])) for c in doc["cases"]]}


def as_trained(case: dict, rec: dict) -> bool:
    """The engine served the file as it was trained."""
    if rec.get("outcome") != "served" or rec.get("captured_h") != case["aux_layers"]:
        return False
    if any(bool(rec["flags_effective"].get(f)) != case["flags"][f] for f in FLAGS):
        return False
    unfilled = set(rec["params_unfilled"]) - set(rec["params_from_target"])
    return not unfilled and not set(rec["tensors_unused"]) - NEVER_READ


def mismatches(case: dict, rec: dict | None, res: dict) -> list[str]:
    """Where compat's verdict (`compat --json`) disagrees with the engine's record (none for a
    case the probe could not build on a CPU, outcome "not-run" with its reason)."""
    eng = case["engine"]
    if rec is not None and rec.get("outcome") == "not-run" and rec.get("error"):
        return []  # the probe could not build the class on a CPU (named in the result): no verdict
    if rec is None or rec.get("outcome") not in ("served", "refused"):
        return [f"no engine verdict: {rec and rec.get('error')}"]
    mine = [f for f in res["findings"] if f["engine"] == eng]
    errors = [f for f in mine if f["severity"] == "error"]
    out = []
    if rec["outcome"] == "refused":
        if not errors:
            out.append(f"engine refused ({rec['stage']}: {rec['error']}); compat: no error")
        return out
    entry = res["engines"][eng]
    if rec.get("captured_h") is not None and entry["captures"] != rec["captured_h"]:
        out.append(f"engine captured h{rec['captured_h']}; compat says h{entry['captures']}")
    for f in FLAGS:
        took = bool(rec["flags_effective"].get(f))
        said = any(e["code"] == "norm-flag" and e["message"].startswith(f) for e in errors)
        if case["flags"][f] and took == said:
            out.append(f"{f}: engine {'applied' if took else 'ignored'} it; compat disagrees")
        if not case["flags"][f] and took:
            out.append(f"{f}: engine applied a flag the drafter does not set")
    if as_trained(case, rec) == bool(errors):
        out.append(
            f"engine served it {'as trained' if as_trained(case, rec) else 'wrongly'}; "
            f"compat errors: {[e['code'] for e in errors]}"
        )
    v1 = rec.get("captured_h_v1")
    runner = any(f["code"] == "aux-runner" for f in mine)
    if v1 is not None and rec.get("captured_h") is not None and (v1 != rec["captured_h"]) != runner:
        out.append(f"V1 runner captured h{v1}, V2 h{rec['captured_h']}; aux-runner: {runner}")
    return out


def compat_json(case: dict, tmp: Path) -> dict:
    drafter, target = C.rebuild(case, tmp)
    sel = f"{case['engine']}@{case.get('version') or ''}".rstrip("@")
    return compat(str(drafter), str(target), sel).to_json()


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_results_exist():
    assert any("vllm" in p.name for p in RESULTS), "no committed vLLM engine_check result"


@pytest.mark.parametrize("path", RESULTS, ids=_ids(RESULTS))
def test_compat_predicts_the_engine(path, tmp_path):
    data = _load(path)
    version = data["doc"]["version"]
    bad = []
    for case, rec in data["pairs"]:
        case = {**case, "version": version}
        for m in mismatches(case, rec, compat_json(case, tmp_path)):
            bad.append(f"{case['name']}: {m}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("path", RESULTS, ids=_ids(RESULTS))
def test_convert_output_is_served_as_trained(path, tmp_path):
    data = _load(path)
    eng = data["doc"]["engine"]
    mine = [(c, r) for c, r in data["pairs"] if c["layout"] == eng and c["written_by"] == "convert"]
    mine = [(c, r) for c, r in mine if r and r.get("outcome") != "not-run"]
    assert mine, f"{path.name}: no case of a file `convert --to {eng}` writes"
    bad = []
    for case, rec in mine:
        plan = next(p for p in C.plan() if p["name"] == case["name"])
        now = json.loads((C.write_case(tmp_path, plan, eng) / "case.json").read_text())
        if now["written_by"] != "convert" or now["files"] != case["files"]:
            bad.append(f"{case['name']}: convert now writes another file; rerun engine_check")
        elif not as_trained(case, rec):
            bad.append(f"{case['name']}: {eng} did not serve it as trained: {rec}")
        direct = rec.get("direct_serve")  # `vllm serve DRAFTER` alone (vLLM probe)
        said = any("`vllm serve DRAFTER` alone is refused" in n for n in case["notes"])
        if direct is not None and direct.startswith("refused") != said:
            bad.append(f"{case['name']}: vllm serve DRAFTER {direct}; convert's notes: {said}")
    assert not bad, "\n".join(bad)


def _one(engine: str, pick) -> tuple[dict, dict]:
    path = next(p for p in RESULTS if f"-{engine}-" in p.name)
    data = _load(path)
    case, rec = next((c, r) for c, r in data["pairs"] if pick(c, r))
    return {**case, "version": data["doc"]["version"]}, copy.deepcopy(rec)


def test_the_check_catches_a_wrong_record(tmp_path):
    """Each kind of disagreement is caught: the checks above can fail."""
    case, rec = _one("vllm", lambda c, r: c["name"] == "llama-mha-vllm-aux_custom")
    res = compat_json(case, tmp_path)
    assert mismatches(case, rec, res) == []
    rec2 = {**rec, "captured_h": [1, 2, 3]}  # the engine read other layers
    assert any("captured" in m for m in mismatches(case, rec2, res))
    rec3 = {**rec, "outcome": "refused", "stage": "config", "error": "x"}
    assert mismatches(case, rec3, res)  # compat says it serves; the engine refused
    rec4 = copy.deepcopy(rec)
    rec4["tensors_unused"] = ["fc.weight"]
    assert mismatches(case, rec4, res)  # served, but not as trained
    rec5 = {**rec, "captured_h_v1": [0, 1, 2]}
    assert any("V1 runner" in m for m in mismatches(case, rec5, res))


def test_cli_json_is_what_the_check_reads(tmp_path):
    """`eagle3kit compat --engine E@V --json` gives the verdict the checks above read."""
    from conftest import run_cli

    case, rec = _one("vllm", lambda c, r: c["name"] == "kimi_k2-mla-sglang-aux_custom")
    drafter, target = C.rebuild(case, tmp_path)
    r = run_cli("compat", drafter, target, "--engine", f"vllm@{case['version']}", "--json")
    doc = json.loads(r.out)
    assert r.code == 1 and mismatches(case, rec, doc) == []  # V2 reads no ids: h[2, 4, 5]
    assert doc["engines"]["vllm"]["captures"] == rec["captured_h"] != case["aux_layers"]


def test_the_check_catches_an_ignored_flag(tmp_path):
    case, rec = _one("vllm", lambda c, r: c["name"] == "llama-mha-vllm-fc_norm")
    res = compat_json(case, tmp_path)
    assert mismatches(case, rec, res) == []
    rec["flags_effective"]["fc_norm"] = False
    assert any(m.startswith("fc_norm") for m in mismatches(case, rec, res))


def test_docs_table_is_current():
    text = engine_check.DOC.read_text()
    block = text.split(engine_check.BEGIN, 1)[1].split(engine_check.END, 1)[0]
    assert engine_check.BEGIN + block + engine_check.END == engine_check.table(), (
        "docs/formats.md's engine-check table is stale: python benchmarks/engine_check.py --table"
    )
