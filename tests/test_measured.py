"""Every figure in README.md's "## Measured" section traces to a committed result JSON under
benchmarks/results/ (named next to it), which carries its command, commit and environment.

The checker is benchmarks/check_measured.py (`python benchmarks/check_measured.py` lists what
does not trace). The README test skips, saying why, while the section does not exist or cites
no result file at all (its figures predate result files and are being re-measured); once one
figure names a result file, every figure must.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from check_measured import CITE, figures, measured_section, untraced  # noqa: E402

RESULT = {
    "kind": "eagle3kit.bench_decode",
    "schema": 1,
    "command": "python benchmarks/bench_decode.py --repeats 5",
    "commit": "0" * 40,
    "environment": {"python": "3.11.7", "cpu_count": 2},
    "methods": [
        {"name": "greedy", "tokens_per_s": {"median": 143.04}},
        {"name": "chain", "speedup": 2.2874, "fraction_of_bound": 0.9412},
    ],
    "decode_s": 0.00659,
}


def readme(body: str) -> str:
    return f"# x\n\nintro 1.5x\n\n## Measured\n\n{body}\n\n## Next\n\nafter 9.9x\n"


@pytest.fixture
def root(tmp_path):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "dec.json").write_text(json.dumps(RESULT))
    return tmp_path


def test_readme_measured_figures_trace_to_results():
    text = (ROOT / "README.md").read_text()
    section = measured_section(text)
    if section is None:
        pytest.skip("README.md has no '## Measured' section yet")
    problems = untraced(text, ROOT)
    if not CITE.search(section):
        pytest.skip(
            f"README.md's Measured section names no benchmarks/results/*.json yet: "
            f"{len(problems)} figures untraced until they are re-measured and cited "
            f"(python benchmarks/check_measured.py lists them)"
        )
    assert not problems, "\n".join(problems)


def test_traced_figures_pass(root):
    body = (
        "Greedy 143.0 tok/s, chain 2.29x at 94% of the bound, step 6.59 ms "
        "(benchmarks/results/dec.json)."
    )
    assert untraced(readme(body), root) == []


def test_figure_not_in_the_file_fails(root):
    body = "Greedy 143.0 tok/s, chain 2.31x (benchmarks/results/dec.json)."
    problems = untraced(readme(body), root)
    assert len(problems) == 1 and "'2.31x'" in problems[0]


def test_figure_without_a_named_file_fails(root):
    body = "Greedy 143.0 tok/s (benchmarks/results/dec.json).\n\nChain 2.29x, measured."
    problems = untraced(readme(body), root)
    assert len(problems) == 1 and "2.29x" in problems[0] and "no result file" in problems[0]


def test_table_sees_its_caption_and_outside_the_section_is_ignored(root):
    body = (
        "Speed (benchmarks/results/dec.json):\n\n| method | tok/s |\n|---|---|\n"
        "| greedy | 143.0 |\n| chain | 2.29x |"
    )
    assert untraced(readme(body), root) == []  # 1.5x and 9.9x lie outside the section


def test_result_file_missing_or_without_provenance_fails(root):
    bare = {k: v for k, v in RESULT.items() if k != "commit"}
    (root / "benchmarks" / "results" / "bare.json").write_text(json.dumps(bare))
    problems = untraced(readme("2.29x (benchmarks/results/bare.json)"), root)
    assert any("missing ['commit']" in p for p in problems)
    problems = untraced(readme("2.29x (benchmarks/results/gone.json)"), root)
    assert any("gone.json" in p for p in problems) and any("'2.29x'" in p for p in problems)


def test_what_counts_as_a_figure():
    shown = [
        f[0]
        for f in figures(
            "dsv3-v2 and Kimi-K2.5 at H=7168, `--sizes 32,128` and 8 prompts: 0.51 and "
            "216x, 94%, 21,781 bytes/token, 8.7 ms, 17 GFLOPS, 2.22 GiB, −0.6%"
        )
    ]
    assert shown == [
        "0.51",
        "216x",
        "94%",
        "21,781 bytes/token",
        "8.7 ms",
        "17 GFLOPS",
        "2.22 GiB",
        "−0.6%",
    ]


def test_result_records_the_code_state_at_the_start(tmp_path, monkeypatch):
    """A benchmark of many minutes records the commit it started at; a commit made while it
    ran (HEAD differs at the end) is flagged, not recorded as the run's code."""
    import _results

    start = {"commit": "a" * 40, "dirty": False}
    monkeypatch.setattr(_results, "AT_START", start)
    monkeypatch.setattr(_results, "git_commit", lambda: {"commit": "b" * 40, "dirty": False})
    doc = json.loads(_results.write_result(tmp_path / "r.json", "k", {"x": 1}).read_text())
    assert (doc["commit"], doc["dirty"], doc["changed_during_run"]) == ("a" * 40, False, True)
    monkeypatch.setattr(_results, "git_commit", lambda: dict(start))
    doc = json.loads(_results.write_result(tmp_path / "s.json", "k", {}).read_text())
    assert doc["commit"] == "a" * 40 and "changed_during_run" not in doc
