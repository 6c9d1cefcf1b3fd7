"""The engines' own code as the judge of compat and convert (issue 31).

    python benchmarks/engine_check.py                        # vLLM 0.33.0 and SGLang 0.5.23
    python benchmarks/engine_check.py --engine vllm@0.33.0   # one engine
    python benchmarks/engine_check.py --engine sglang@0.5.23 --only kimi_k2-mla
    python benchmarks/engine_check.py --table                # rewrite docs/formats.md's table

Installs each engine on demand into its own venv, ~/.cache/eagle3kit-engines/<engine>-<version>/
(`pip install <engine>==<version>`; nothing is installed into the project's venv), writes every
case (benchmarks/_engine_cases.py: drafters as `eagle3kit convert` writes them, tiny, no
network), and runs `<venv>/bin/python benchmarks/engine_check_<engine>.py CASE` on each: a probe
that does not import eagle3kit, builds the speculative config with the engine's own code,
builds the engine's draft model class on the CPU, runs its own `load_weights` on our file, and
prints one JSON record as its last stdout line (and for vLLM, the drafters the peers' own code
wrote, tests/fixtures/peers: `peer_cases`, `peer_records`, launched as eagle3kit serves their
method):

    {"engine", "version", "outcome": "served"|"refused", "stage": null|"config"|"model_class"|
     "load_weights", "error", "architecture", "engine_layer_ids", "captured_h",
     "flags_effective", "draft_vocab_size", "vocab_map", "tensors_consumed", "tensors_unused",
     "params_unfilled", "params_from_target", "shims", "notes"}

`captured_h` uses eagle3kit's h-index convention (h[k] = HF output_hidden_states[k], the input
of decoder layer k). Results: benchmarks/results/engine_check-<engine>-<version>.json.
tests/test_engine_check.py checks `compat` and `convert` against every committed result file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _engine_cases import peer_plan, plan, write_case, write_peer_case  # noqa: E402
from _results import RESULTS, write_result  # noqa: E402

DEFAULT_ENGINES = ("vllm@0.33.0", "sglang@0.5.23")
VENVS = Path(os.environ.get("EAGLE3KIT_ENGINES", Path.home() / ".cache" / "eagle3kit-engines"))
# pip arguments per engine (the package pinned to the version asked for)
PACKAGES = {"vllm": ["vllm=={v}"], "sglang": ["sglang=={v}"]}
DOC = HERE.parent / "docs" / "formats.md"
BEGIN, END = "<!-- engine-check table: begin -->", "<!-- engine-check table: end -->"
TIMEOUT_S = 600


def venv_dir(engine: str, version: str) -> Path:
    return VENVS / f"{engine}-{version}"


def install(engine: str, version: str, log=print) -> Path:
    """The engine's venv, created and installed on first use (marker file `.installed`)."""
    d = venv_dir(engine, version)
    py = d / "bin" / "python"
    if (d / ".installed").exists():
        return py
    log(f"installing {engine}=={version} into {d} (once; several minutes)")
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(d)], check=True)
    pkgs = [p.format(v=version) for p in PACKAGES[engine]]
    subprocess.run([str(py), "-m", "pip", "install", "-q", *pkgs], check=True)
    (d / ".installed").write_text(version + "\n")
    return py


def parse_engine(text: str) -> tuple[str, str]:
    m = re.fullmatch(r"(vllm|sglang)@(\d+(?:\.\d+)+)", text.strip().lower())
    if not m:
        raise SystemExit(f"--engine: expected vllm@X.Y.Z or sglang@X.Y.Z, found {text!r}")
    return m.group(1), m.group(2)


def run_probe(py: Path, engine: str, case_dirs: list[Path]) -> list[dict]:
    """One probe run on one case (or several, for a probe that declares ENGINE_CHECK_BATCH):
    the last stdout line is the record (one line per case, each naming its "case"); a case
    with no record gets a "probe-failed" one carrying the probe's last stderr line."""
    probe = HERE / f"engine_check_{engine}.py"
    t0 = time.monotonic()
    try:
        r = subprocess.run(
            [str(py), str(probe), *map(str, case_dirs)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S * len(case_dirs),
            env={**os.environ, "PYTHONPATH": "", "HF_HUB_OFFLINE": "1"},
        )
        out, err, rc = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = (e.stdout or b"").decode(), (e.stderr or b"").decode(), "timeout"
    found: dict[str, dict] = {}
    lines = [ln for ln in out.splitlines() if ln.strip().startswith("{")]
    for ln in lines:
        try:
            rec = json.loads(ln)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "outcome" in rec:
            found[rec.get("case") or case_dirs[-1].name] = rec
    if len(case_dirs) == 1 and lines and case_dirs[0].name not in found:
        try:  # the single-case interface: the last line is the record
            found[case_dirs[0].name] = json.loads(lines[-1])
        except json.JSONDecodeError:
            pass
    tail = (err.strip().splitlines() or ["no output"])[-1]
    secs = round((time.monotonic() - t0) / len(case_dirs), 1)
    recs = []
    for d in case_dirs:
        rec = found.get(d.name) or {
            "engine": engine,
            "outcome": "probe-failed",
            "error": f"rc={rc}: {tail[:500]}",
        }
        rec["case"], rec["seconds"] = d.name, secs
        recs.append(rec)
    return recs


def batches(engine: str, dirs: list[Path], size: int) -> list[list[Path]]:
    """Cases per probe process: one, or up to `size` of one target family (an engine's
    process-wide state, e.g. vLLM's expert-parallel group, is made for the first target)."""
    probe = (HERE / f"engine_check_{engine}.py").read_text()
    n = size if "ENGINE_CHECK_BATCH = True" in probe else 1
    out: list[list[Path]] = []
    fam = None
    for d in dirs:
        f = json.loads((d / "case.json").read_text())["target_family"]
        if not out or len(out[-1]) >= n or f != fam:
            out.append([])
        out[-1].append(d)
        fam = f
    return out


# engines whose probe reads the files the peers wrote (DFlash, DSpark, P-EAGLE, EAGLE-3)
PEER_ENGINES = ("vllm",)


def check_engine(
    engine: str, version: str, only: str | None, jobs: int, batch: int, keep: Path | None
) -> Path:
    py = install(engine, version)
    cases = [c for c in plan() if not only or only in c["name"]]
    peers = [c for c in peer_plan() if engine in PEER_ENGINES and (not only or only in c["name"])]
    root = keep or Path(tempfile.mkdtemp(prefix=f"engine_check-{engine}-"))
    dirs = [write_case(root, c, engine) for c in cases]
    peer_dirs = [write_peer_case(root, c, engine) for c in peers]
    print(f"{engine} {version}: {len(dirs)} cases, {len(peer_dirs)} peers' files under {root}")
    records = run_all(py, engine, dirs, jobs, batch)
    peer_records = run_all(py, engine, peer_dirs, jobs, batch)
    out = RESULTS / f"engine_check-{engine}-{version}.json"
    doc = {
        "engine": engine,
        "version": version,
        "engine_python": _engine_env(py),
        "cases": [json.loads((d / "case.json").read_text()) for d in dirs],
        "records": records,
        # drafters the peers' own code wrote (tests/fixtures/peers), as eagle3kit serves them
        "peer_cases": [json.loads((d / "case.json").read_text()) for d in peer_dirs],
        "peer_records": peer_records,
    }
    if only:
        out = out.with_name(out.stem + "-partial.json")
    write_result(out, "engine_check", doc)
    print(f"wrote {out}")
    return out


def run_all(py: Path, engine: str, dirs: list[Path], jobs: int, batch: int) -> list[dict]:
    records = []
    with ThreadPoolExecutor(max(1, jobs)) as ex:
        for recs in ex.map(lambda b: run_probe(py, engine, b), batches(engine, dirs, batch)):
            for rec in recs:
                print(f"  {rec['case']:<40} {rec.get('outcome')} {rec.get('error') or ''}"[:160])
                records.append(rec)
    return records


def _engine_env(py: Path) -> dict:
    code = (
        "import json, sys, platform, importlib.metadata as m\n"
        "v = {}\n"
        "for p in ('vllm', 'sglang', 'torch', 'transformers'):\n"
        "    try: v[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps({'python': sys.version.split()[0], 'packages': v}))"
    )
    r = subprocess.run([str(py), "-c", code], capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 else {"error": r.stderr[-300:]}


# ---------------------------------------------------------------- the docs table


def result_files() -> list[Path]:
    """The result files the docs table and tests/test_engine_check.py read: not a `--only` run
    (`-partial`), nor one whose disagreements with compat are not resolved yet (`-unchecked`,
    renamed by hand, said in the commit that adds it)."""
    names = ("partial", "unchecked")
    return sorted(
        p for p in RESULTS.glob("engine_check-*.json") if not any(n in p.name for n in names)
    )


NEVER_READ = {"t2d"}  # no engine reads t2d (docs/formats.md "d2t and t2d")
# Parameters an engine leaves unfilled that are right as initialised: vLLM <= 0.21 always
# registers draft_id_to_target_id as zeros and maps draft id i to target id i + map[i]
# (vllm 0.21.0 models/llama_eagle3.py Eagle3LlamaForCausalLM __init__ and compute_logits), so
# a full-vocabulary file without d2t (what `convert --to vllm` writes) keeps the identity map,
# which is right only when the draft vocabulary is the target's.
ZERO_IS_IDENTITY = {"vllm": "draft_id_to_target_id"}
# The CPU limits a probe may name for a case it could not check (outcome "not-run", or a
# served record whose target could not run: captured_h null).
CPU_LIMITS = ("MLA is not supported on CPU",)


def harmless_unfilled(case: dict, rec: dict) -> set[str]:
    """Unfilled parameters whose initial value is the right one for this case."""
    target_vocab = case["files"]["target_config"]["vocab_size"]
    full = case["draft_vocab"] == "full" and rec.get("draft_vocab_size") == target_vocab
    name = ZERO_IS_IDENTITY.get(case["engine"])
    return {name} if full and name else set()


def unfilled(case: dict, rec: dict) -> set[str]:
    """Drafter parameters the engine left unfilled: not taken from the target, not harmless."""
    left = set(rec.get("params_unfilled") or []) - set(rec.get("params_from_target") or [])
    return left - harmless_unfilled(case, rec)


def _cell(rec: dict, case: dict) -> str:
    if rec.get("outcome") == "not-run":
        return f"not run on this CPU: {rec.get('error')}"
    if rec.get("outcome") != "served":
        err = (rec.get("error") or "").split(". The avai")[0].replace("|", "/")[:110]
        return f"refused ({rec.get('stage')}): {err}"
    parts = []
    if rec.get("captured_h") is None:
        parts.append("captures unknown (target not run on this CPU)")
    elif rec.get("captured_h") != case["aux_layers"]:
        parts.append(f"captures h{rec.get('captured_h')}")
    flags = rec.get("flags_effective") or {}
    parts += [f"{f} ignored" for f, on in case["flags"].items() if on and not flags.get(f)]
    if unfilled(case, rec):
        parts.append("unfilled params")
    unused = sorted(set(rec.get("tensors_unused") or []) - NEVER_READ)
    if unused:
        parts.append(f"unused {', '.join(unused)}")
    text = "; ".join(parts) or "as trained"
    if harmless_unfilled(case, rec) & set(rec.get("params_unfilled") or []):
        text += " (zero d2t map: the identity on a full vocabulary)"
    v1 = rec.get("captured_h_v1")
    if v1 is not None and v1 != rec.get("captured_h"):
        text += f" (vLLM's V1 runner: h{v1})"
    return text


def _h(ids: list[int] | None) -> str:
    return "-" if ids is None else f"h{ids}"


def table() -> str:
    """The engine-check block of docs/formats.md, from the committed result files."""
    lines = [
        BEGIN,
        "",
        "Generated by `python benchmarks/engine_check.py --table` from "
        "benchmarks/results/engine_check-*.json (do not edit by hand). One row per case "
        "(target family, drafter attention, layout, variation); `forced` marks a file `convert` "
        "refuses to write, written with the flag forced on to see what the engine does. "
        '"as trained": served, capturing the layers it was trained on, every flag as set, '
        "every tensor but t2d (which no engine reads) used, no parameter unfilled but those "
        "taken from the target.",
        "",
    ]
    for path in result_files():
        doc = json.loads(path.read_text())
        recs = {r["case"]: r for r in doc["records"]}
        lines += [
            f"**{doc['engine']} {doc['version']}** ({path.name})",
            "",
            "| case | written by | architecture | captured (trained) | served |",
            "|---|---|---|---|---|",
        ]
        for c in doc["cases"]:
            r = recs.get(c["name"], {})
            lines.append(
                f"| {c['name']} | {c['written_by']} | {r.get('architecture') or '-'} | "
                f"{_h(r.get('captured_h'))} ({_h(c['aux_layers'])}) | {_cell(r, c)} |"
            )
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def rewrite_table(doc_path: Path = DOC) -> bool:
    """Replace the marked block of docs/formats.md; True when it changed."""
    text = doc_path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{doc_path}: expected the markers {BEGIN} ... {END}, found none")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    new = head + table() + tail
    if new != text:
        doc_path.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", action="append", help="vllm@0.33.0 / sglang@0.5.23 (repeatable)")
    ap.add_argument("--only", help="run only the cases whose name contains this")
    ap.add_argument("--jobs", type=int, default=1, help="probes run in parallel")
    ap.add_argument("--batch", type=int, default=8, help="cases per probe process (if it can)")
    ap.add_argument("--cases", type=Path, help="write the cases here (default: a temp dir)")
    ap.add_argument("--table", action="store_true", help="rewrite docs/formats.md's table only")
    a = ap.parse_args(argv)
    if a.table:
        print("docs/formats.md " + ("rewritten" if rewrite_table() else "already current"))
        return 0
    for text in a.engine or DEFAULT_ENGINES:
        engine, version = parse_engine(text)
        check_engine(engine, version, a.only, a.jobs, a.batch, a.cases)
    if not a.only:
        rewrite_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
