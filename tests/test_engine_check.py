"""compat and convert against what the engines' own code did (benchmarks/engine_check.py).

Every committed benchmarks/results/engine_check-<engine>-<version>.json (any engine, any
release) is read case by case. Each case's drafter and target are written again from the
result's own record of the files the engine was given (`files`: configs, tensor names, dtypes,
shapes, index values), `compat --engine <engine>@<version>` is run on them, and its prediction
is held against the engine's record:
- the engine refused the file            -> compat reports an error for that engine;
- it served it                            -> compat's `captures` is what the engine captured;
  a flag the engine ignored (or turned on) -> compat reports `norm-flag` for it;
  a sliding window it did not build        -> compat reports `sliding-window` (an error);
  it served it as trained (the layers the drafter was trained on, every flag as set, every
  tensor used, no drafter parameter left unfilled but those taken from the target)
                                          <-> compat reports no error for that engine;
- vLLM's V1 runner captured other layers  <-> compat warns `aux-runner`.
And every file `convert --to <engine>` writes (regenerated with today's code, which must write
the very files the result holds, else the result is stale) was served as trained, but for a
flag the release does not implement, which compat reports for it (an old release lacks the
feature; no file convert could write would help).
No engine is installed here; the records are the engine's word.

Not every case is checked, and those that are not are never counted as agreement: a case the
probe could not build on a CPU (outcome "not-run", e.g. vLLM 0.21's MLA attention: "MLA is not
supported on CPU") has no verdict, and where the target model could not run on the CPU
(`captured_h` null: vLLM 0.21 on the DeepSeek-V3 MLA targets) only the ids the engine read are
held against compat's, not the layers they name. `unchecked` says which, and
test_unchecked_cases_are_known fails on any other reason.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from eagle3kit.checkpoint.compat import compat
from eagle3kit.checkpoint.engines.rules import parse_engines, vllm_refuses_local_verifier

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


def as_trained(case: dict, rec: dict, lacking: frozenset[str] = frozenset()) -> bool:
    """The engine served the file as it was trained (`captured_h` null: the layers are not
    known, everything else is judged); flags in `lacking` may go unapplied."""
    if rec.get("outcome") != "served":
        return False
    if rec.get("captured_h") is not None and rec["captured_h"] != case["aux_layers"]:
        return False
    flags = rec["flags_effective"]
    if any(bool(flags.get(f)) != case["flags"][f] for f in FLAGS if f not in lacking):
        return False
    if not window_as_trained(case, rec):
        return False
    return not engine_check.unfilled(case, rec) and not set(rec["tensors_unused"]) - NEVER_READ


def window_as_trained(case: dict, rec: dict) -> bool:
    """Every attention layer the engine built runs the case's window (None: full attention);
    a record without `window_effective` (a probe before the window cases) is not judged."""
    built = rec.get("window_effective")
    return built is None or all(w == case.get("sliding_window") for w in built)


def unchecked(rec: dict | None) -> str | None:
    """Why a case (or its captured layers) is not checked against compat, or None."""
    if rec is None:
        return None
    if rec.get("outcome") == "not-run":
        return f"not run: {rec.get('error')}"
    if rec.get("outcome") == "served" and rec.get("captured_h") is None:
        why = [n for n in rec.get("notes") or [] if n.startswith("target forward not run")]
        return f"captures unknown: {why[0] if why else 'no target forward recorded'}"
    return None


def _captures(rec: dict, entry: dict) -> list[str]:
    """compat's ids and captured layers against the engine's (only the ids it read when the
    target could not run)."""
    if rec.get("captured_h") is None:
        got = rec.get("engine_layer_ids")
        if got != entry["ids"]:
            return [f"engine read the ids {got}; compat says it reads {entry['ids']}"]
        return []
    if entry["captures"] != rec["captured_h"]:
        return [f"engine captured h{rec['captured_h']}; compat says h{entry['captures']}"]
    return []


def mismatches(case: dict, rec: dict | None, res: dict) -> list[str]:
    """Where compat's verdict (`compat --json`) disagrees with the engine's record (none for a
    case the probe could not build on a CPU, outcome "not-run" with its reason: `unchecked`)."""
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
    out += _captures(rec, res["engines"][eng])
    for f in FLAGS:
        took = bool(rec["flags_effective"].get(f))
        said = any(e["code"] == "norm-flag" and e["message"].startswith(f) for e in errors)
        if case["flags"][f] and took == said:
            out.append(f"{f}: engine {'applied' if took else 'ignored'} it; compat disagrees")
        if not case["flags"][f] and took:
            out.append(f"{f}: engine applied a flag the drafter does not set")
    if rec.get("window_effective") is not None and case.get("sliding_window"):
        said = any(e["code"] == "sliding-window" for e in errors)
        if window_as_trained(case, rec) == said:
            out.append(f"engine ran windows {rec['window_effective']}; compat disagrees")
    if rec.get("captured_h") is None:  # the layers are unknown: so is compat's word on them
        errors = [e for e in errors if not e["code"].startswith("aux-")]
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


# `--only swa` runs: the sliding-window cases of a release whose full run predates them
WINDOW_RESULTS = sorted(
    p for p in engine_check.RESULTS.glob("engine_check-*-partial.json") if "swa" in p.read_text()
)


@pytest.mark.parametrize("path", WINDOW_RESULTS, ids=_ids(WINDOW_RESULTS))
def test_compat_predicts_the_window_cases(path, tmp_path):
    """Each sliding-window case: compat's verdict against the window the engine built
    (`window_effective`), and every file `convert` writes for it is the file the engine had."""
    data = _load(path)
    version = data["doc"]["version"]
    bad, windowed = [], 0
    for case, rec in data["pairs"]:
        case = {**case, "version": version}
        windowed += bool(case.get("sliding_window") and rec and rec.get("window_effective"))
        for m in mismatches(case, rec, compat_json(case, tmp_path)):
            bad.append(f"{case['name']}: {m}")
        plan = next(p for p in C.plan() if p["name"] == case["name"])
        now = json.loads(
            (C.write_case(tmp_path / "now", plan, case["engine"]) / "case.json").read_text()
        )
        if now["files"] != case["files"]:
            bad.append(f"{case['name']}: convert now writes another file; rerun engine_check")
    assert windowed and not bad, "\n".join(bad)


@pytest.mark.parametrize("path", RESULTS, ids=_ids(RESULTS))
def test_convert_output_is_served_as_trained(path, tmp_path):
    data = _load(path)
    eng = data["doc"]["engine"]
    mine = [(c, r) for c, r in data["pairs"] if c["layout"] == eng and c["written_by"] == "convert"]
    mine = [(c, r) for c, r in mine if r and r.get("outcome") != "not-run"]
    assert mine, f"{path.name}: no case of a file `convert --to {eng}` writes"
    version = data["doc"]["version"]
    sel = parse_engines(f"{eng}@{version}")[0].version
    bad = []
    for case, rec in mine:
        plan = next(p for p in C.plan() if p["name"] == case["name"])
        now = json.loads((C.write_case(tmp_path, plan, eng) / "case.json").read_text())
        res = compat_json({**case, "version": version}, tmp_path / "compat")
        lacking = _lacking(res, eng, case)
        if now["written_by"] != "convert" or now["files"] != case["files"]:
            bad.append(f"{case['name']}: convert now writes another file; rerun engine_check")
        elif rec["outcome"] == "refused" and "engine-refuses" in lacking.values():
            pass  # the release lacks the flag and refuses its tensor, as compat says
        elif not as_trained(case, rec, frozenset(lacking)):
            bad.append(f"{case['name']}: {eng} did not serve it as trained: {rec}")
        direct = rec.get("direct_serve")  # `vllm serve DRAFTER` alone (vLLM probe)
        said = any("`vllm serve DRAFTER` alone is refused" in n for n in case["notes"])
        said = said and vllm_refuses_local_verifier(sel)  # the note names the releases
        if direct is not None and direct.startswith("refused") != said:
            bad.append(f"{case['name']}: vllm serve DRAFTER {direct}; convert's notes: {said}")
    assert not bad, "\n".join(bad)


def _lacking(res: dict, engine: str, case: dict) -> dict[str, str]:
    """The drafter's flags compat says `engine` at this release lacks: {flag: "norm-flag"
    (ignored) | "engine-refuses" (the file fails to load for the flag's tensor)}."""
    out = {}
    for f in res["findings"]:
        for flag in (g for g in FLAGS if case["flags"][g] and f["engine"] == engine):
            ignored = f["code"] == "norm-flag" and f["message"].startswith(flag)
            if ignored or (f["code"] == "engine-refuses" and f"({flag})" in f["message"]):
                out[flag] = f["code"]
    return out


@pytest.mark.parametrize("path", RESULTS, ids=_ids(RESULTS))
def test_unchecked_cases_are_known(path):
    """A case goes unchecked only for a CPU limit the probe names; every layout is checked."""
    data = _load(path)
    why = [(c["name"], unchecked(r)) for c, r in data["pairs"]]
    limits = engine_check.CPU_LIMITS
    odd = [f"{n}: {w}" for n, w in why if w and not any(lim in w for lim in limits)]
    assert not odd, "\n".join(odd)
    layouts = {c["layout"] for c, r in data["pairs"] if unchecked(r) is None}
    assert layouts == {c["layout"] for c, _ in data["pairs"]}, f"{path.name}: checked {layouts}"


def test_unchecked_is_not_agreement():
    """A not-run record is no verdict, and a record without captured layers judges the ids."""
    case, rec = _one("vllm", lambda c, r: c["name"] == "llama-mha-vllm-aux_custom")
    assert unchecked(rec) is None
    assert unchecked({**rec, "outcome": "not-run", "error": "x"}) == "not run: x"
    blind = {**rec, "captured_h": None, "notes": ["target forward not run: y"]}
    assert unchecked(blind) == "captures unknown: target forward not run: y"
    entry = {"ids": [3, 4, 6], "captures": [3, 4, 6]}
    assert _captures(blind, {**entry, "ids": None}) and not _captures(blind, entry)


def test_zero_map_counts_only_on_a_full_vocabulary():
    """vLLM 0.21's zero draft_id_to_target_id is the identity: harmless only when the draft
    vocabulary is the target's."""
    case, rec = _one("vllm", lambda c, r: c["name"] == "llama-mha-vllm-vocab_full", "0.21.0")
    rec["params_unfilled"] = rec["params_unfilled"] + ["draft_id_to_target_id"]
    assert as_trained(case, rec)
    reduced = {**case, "draft_vocab": "reduced"}
    assert not as_trained(reduced, {**rec, "draft_vocab_size": 64})


def _one(engine: str, pick, version: str = "") -> tuple[dict, dict]:
    """A case and its record from `engine`'s result for `version` (default: the newest)."""
    path = [p for p in RESULTS if f"-{engine}-{version}" in p.name][-1]
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
