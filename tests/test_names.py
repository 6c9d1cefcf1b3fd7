"""One name per accept length (docs/ARCHITECTURE.md, "Glossary"): no retired name is written
as a JSON key by the package or the benchmark scripts, nor used in the docs; result files
written before the rename are still read (`core/retired.py`).

"Written as a JSON key" is read from the code (AST): a string key of a dict literal, a
subscript assignment `doc["..."] = ...`, a `dict(...=...)` keyword, or a dataclass field (a
class-level annotated name, which `asdict` turns into a key). `core/retired.py` is the one
module that names the retired keys, to read old files."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "eagle3kit"

# retired name -> today's name (or names, by meaning)
RETIRED = {
    "accept_len": "tau_walk | tau_every_position | tau_online | tau (plan), by meaning",
    "walk_tau": "tau_walk",
    "walk_accept_len": "tau_walk",
    "sim_accept_len": "tau_every_position",
    "sim_accept_len_by_depth": "tau_every_position_by_depth",
    "best_sim_accept_len": "best_tau_every_position",
    "break_even_accept_len": "break_even_tau",
    "best_depth_accept_len": "best_depth_tau",
    "ideal_accept_len": "ideal_tau",
    "margin_accept_len": "margin_tau_every_position",
    "server_life_accept_len": "server_life_tau",
}
# and any new name built on `accept_len` (an engine's own `..._accept_length` is its name)
BUILT_ON_RETIRED = re.compile(r"\w*accept_len(?!gth)\w*")
READS_OLD_FILES = {SRC / "core" / "retired.py"}


def retired(name: str) -> bool:
    return name in RETIRED or bool(BUILT_ON_RETIRED.fullmatch(name))


def _written_keys(tree: ast.AST) -> list[tuple[str, int]]:
    """(key, line) of every string the code writes as a JSON key (module docstring)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            out += [(k.value, k.lineno) for k in node.keys if isinstance(k, ast.Constant)]
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            if isinstance(node.slice, ast.Constant):
                out.append((node.slice.value, node.lineno))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict":
            out += [(k.arg, node.lineno) for k in node.keywords if k.arg]
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    out.append((item.target.id, item.lineno))
    return [(k, n) for k, n in out if isinstance(k, str)]


def _code() -> list[Path]:
    files = sorted(SRC.rglob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))
    return [p for p in files if p not in READS_OLD_FILES]


def test_no_retired_name_is_written_as_a_json_key():
    bad = [
        f"{p.relative_to(ROOT)}:{line}: {key!r} (today: {RETIRED.get(key, 'see the glossary')})"
        for p in _code()
        for key, line in _written_keys(ast.parse(p.read_text()))
        if retired(key)
    ]
    assert not bad, "retired accept-length names written:\n" + "\n".join(bad)


def test_no_retired_name_in_the_docs():
    docs = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
    bad = [
        f"{p.relative_to(ROOT)}:{n}: {word}"
        for p in docs
        for n, line in enumerate(p.read_text().splitlines(), 1)
        for word in re.findall(r"\w+", line)
        if retired(word)
    ]
    assert not bad, "retired accept-length names in the docs:\n" + "\n".join(bad)


TODAY = [
    "tau_walk",
    "tau_every_position",
    "tau_online",
    "tokens_per_forward",
    "tau",
    "break_even_tau",
    "server_life_tau",
    "margin_tau_every_position",
]


def test_the_glossary_names_every_current_name():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    glossary = doc.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    missing = [n for n in TODAY if f"`{n}`" not in glossary]
    assert not missing, f"docs/ARCHITECTURE.md Glossary lacks {missing}"


def test_the_check_finds_a_retired_key():
    """The AST reading catches each way a key is written (so the tests above can fail)."""
    code = (
        'doc = {"accept_len": 1}\n'
        'doc["sim_accept_len"] = 2\n'
        "x = dict(walk_accept_len=3)\n"
        "class R:\n    best_depth_accept_len: float\n"
        'y = doc["accept_len"]  # a read, allowed\n'
    )
    found = {k for k, _ in _written_keys(ast.parse(code)) if retired(k)}
    assert found == {"accept_len", "sim_accept_len", "walk_accept_len", "best_depth_accept_len"}


# Files as the commands wrote them before the rename (keys and meanings of that time)
SPEEDS = ("--baseline-tps", "80", "--cycle-ms", "25")
OLD = {
    "eval": (
        {
            "kind": "eagle3kit.eval",
            "schema": 1,
            "mode": "offline",
            "depth": 3,
            "accept_len": 2.5,
            "per_position_acceptance": [0.7, 0.5, 0.3],
            "all_positions": {"accept_len": 2.61},
        },
        2.5,
    ),
    "eval-online": (
        {
            "kind": "eagle3kit.eval",
            "schema": 1,
            "mode": "online",
            "depth": 3,
            "accept_len": 2.4,
            "per_position_acceptance": [0.7, 0.4, 0.3],
            "decode_ms": 12.5,
            "cycle_ms": 20.0,
        },
        2.4,
    ),
    "bench": (
        {
            "kind": "eagle3kit.bench",
            "schema": 1,
            "decode_ms": 10.0,
            "methods": [
                {"name": "greedy", "accept_len": 1.0},
                {
                    "name": "chain",
                    "accept_len": 2.19,
                    "tau": 2.2,
                    "depth": 3,
                    "cycle_ms": 20.0,
                    "per_position_acceptance": [0.6, 0.4, 0.2],
                },
            ],
        },
        2.2,
    ),
    "bench-live": (
        {
            "kind": "eagle3kit.bench-live",
            "schema": 1,
            "accept_len": 3.0,
            "cycle_ms": 30.0,
            "depth": 4,
            "decode_ms": 15.0,
            "deployments": [],
        },
        3.0,
    ),
    "probe": (
        {
            "kind": "eagle3kit.probe",
            "schema": 1,
            "depth": 3,
            "acceptance": {"target": {"acc": [0.7], "accept_len": 2.1}, "reference": None},
            "accept_len": {"target": 2.1, "reference": None, "online": None},
            "break_even": {"baseline_tps": 50.0, "cycle_ms": 40.0, "depth": 3},
        },
        2.1,
    ),
    "probe-live": (
        {
            "kind": "eagle3kit.probe-live",
            "schema": 1,
            "url": "http://new",
            "accept_len": {"new": 3.0, "reference": 3.8},
            "bench": {
                "kind": "eagle3kit.bench-live",
                "schema": 1,
                "accept_len": 3.0,
                "deployments": [],
            },
        },
        3.0,
    ),
}


@pytest.mark.parametrize("name", sorted(OLD))
def test_plan_reads_files_written_before_the_rename(tmp_path, name):
    from conftest import run_cli

    doc, tau = OLD[name]
    f = tmp_path / f"{name}.json"
    f.write_text(json.dumps(doc))
    r = run_cli("plan", "--from", str(f), *SPEEDS, "--json")
    assert r.code in (0, 1), r.err
    assert json.loads(r.out)["tau"] == pytest.approx(tau)


def test_old_keys_read_as_todays():
    from eagle3kit.core.retired import current, current_row

    probe = current(json.loads(json.dumps(OLD["probe"][0])))
    assert probe["tau_every_position"] == {"target": 2.1, "reference": None}
    assert probe["tau_online"] is None and "accept_len" not in probe
    assert probe["acceptance"]["target"] == {"acc": [0.7], "tau_every_position": 2.1}
    bench = current(json.loads(json.dumps(OLD["bench"][0])))
    assert bench["methods"][1]["tau_online"] == 2.2
    assert bench["methods"][1]["tokens_per_forward"] == 2.19
    row = {"step": 3, "sim_accept_len": 1.9, "walk_accept_len": 1.7, "tau_walk": 1.7}
    assert current_row(row) == {"step": 3, "tau_every_position": 1.9, "tau_walk": 1.7}
    plan = current(
        {
            "kind": "eagle3kit.plan",
            "schema": 1,
            "accept_len": 2.0,
            "break_even_accept_len": 2.4,
            "targets": [{"tps": 9, "accept_len": 3.0}],
        }
    )
    assert (plan["tau"], plan["break_even_tau"], plan["targets"][0]["tau"]) == (2.0, 2.4, 3.0)


def test_report_reads_a_run_written_before_the_rename(tmp_path):
    """An old train run (summary and metrics lines) and an old plan, rendered by `report`."""
    from eagle3kit.report import report

    run = tmp_path / "run"
    (run / "state").mkdir(parents=True)
    rows = [
        {"step": 0, "loss": [3.0], "sim_accept_len": 1.25},
        {"step": 10, "loss": [2.0], "sim_accept_len": 1.75},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "summary.json").write_text(
        json.dumps(
            {
                "kind": "eagle3kit.train",
                "schema": 1,
                "steps": 10,
                "best_step": 10,
                "sim_accept_len": 1.75,
                "init_from": None,
                "tokens_per_s": 100.0,
            }
        )
    )
    (tmp_path / "plan.json").write_text(json.dumps(OLD_PLAN))
    report([tmp_path], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "1.750" in md and "2.46" in md, md


OLD_PLAN = {
    "kind": "eagle3kit.plan",
    "schema": 1,
    "baseline_tps": 82.0,
    "cycle_ms": 30.0,
    "accept_len": 2.0496,
    "throughput_tps": 68.32,
    "speedup": 0.833,
    "break_even_accept_len": 2.46,
    "best_depth": None,
    "targets": [],
    "pays": False,
    "depth": 2,
}
