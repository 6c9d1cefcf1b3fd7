"""Manifests and result files say nothing a reader on another machine cannot use: no absolute
path of the machine that wrote them (the shipped zoo.json files, benchmarks/results and
lab/results), and the writers that make them write none."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "src" / "eagle3kit" / "zoo" / "shipped").glob("*/zoo.json"))
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
LAB = sorted((ROOT / "lab" / "results").glob("*.json"))
# A token that starts at "/" and names a folder in it ("/tmp/x", "/home/u/f.json"); an
# endpoint of one component ("/metrics", "/v1") is no path of a machine.
PATHLIKE = re.compile(r"/[^\s/'\"=,:;()\[\]]+/[^\s'\"=,;()\[\]]*")
CUTS = re.compile(r"[\s'\"=,:;(\[]")


def absolute_paths(text: str) -> list[str]:
    """Every absolute path in ``text``: a token (cut at spaces, quotes, '=', ',', ':', ';',
    brackets) that starts with '/' and has a second component."""
    found = []
    for token in CUTS.split(text):
        if token.startswith("/") and PATHLIKE.match(token):
            found.append(token)
    return found


def strings(obj) -> list[str]:
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in (*strings(k), *strings(v))]
    if isinstance(obj, list):
        return [s for v in obj for s in strings(v)]
    return [obj] if isinstance(obj, str) else []


def test_the_detector_finds_paths_and_only_paths():
    assert absolute_paths("python b.py --home /tmp/demo-cold --json x.json") == ["/tmp/demo-cold"]
    assert absolute_paths("dir=/root/.cache/eagle3kit/zoo/x") == ["/root/.cache/eagle3kit/zoo/x"]
    assert absolute_paths("'/work/a/b'") == ["/work/a/b"]
    assert absolute_paths("/server_info (VLLM_SERVER_DEV_MODE)") == []
    assert absolute_paths("http://127.0.0.1:8000/v1/completions 82 tok/s 3/4") == []
    assert absolute_paths("src/eagle3kit/zoo $TMPDIR/demo …/zoo/llama-v1 ~/x") == []


@pytest.mark.parametrize(
    "path", SHIPPED + RESULTS + LAB, ids=lambda p: p.parent.name + "/" + p.name
)
def test_no_absolute_path_of_the_writing_machine(path):
    bad = [p for s in strings(json.loads(path.read_text())) for p in absolute_paths(s)]
    assert bad == [], f"{path.relative_to(ROOT)}: {bad[:5]}"


def test_the_result_writer_writes_portable_paths(tmp_path, monkeypatch):
    """benchmarks/_results.write_result: this checkout's paths become relative ones, the
    zoo home and the temp folder symbolic ones; the figures stay as they were."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setenv("EAGLE3KIT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "argv", ["bench.py", "--home", str(tmp_path / "h"), "--n", "3"])
    import _results

    doc = {
        "drafter": str(ROOT / "src" / "eagle3kit" / "zoo" / "shipped" / "k2-drafter"),
        "member": str(tmp_path / "home" / "zoo" / "dsv3-v1"),
        "elsewhere": "served from /models/zoo-drafter on port 8000",
        "tok_s": 82.5,
    }
    out = _results.write_result(tmp_path / "r.json", "eagle3kit.test", doc)
    got = json.loads(out.read_text())
    assert got["drafter"] == "src/eagle3kit/zoo/shipped/k2-drafter"
    assert got["member"] == "$EAGLE3KIT_HOME/zoo/dsv3-v1"
    assert got["tok_s"] == 82.5 and got["command"].endswith("--n 3")
    assert [p for s in strings(got) for p in absolute_paths(s)] == []


def test_a_shipped_manifest_names_its_build_not_a_path(tmp_path):
    from eagle3kit.zoo import corpus

    assert absolute_paths(corpus.stdlib_name()) == []
    for f in SHIPPED:
        doc = json.loads(f.read_text())
        assert "/" not in doc["shipped"]["from"], f
