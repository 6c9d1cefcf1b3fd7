"""The docs stand alone: every relative link in README.md, docs/*.md and lab/*.md resolves
inside the repository (and its #anchor, when given, names a heading of the target), and
nothing cites documents that are not in the repository. benchmarks/results/ holds only result
files that README.md or docs/ cite (trials live in lab/results/, named in lab's docs), and every
cited result file exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LAB_DOCS = sorted((ROOT / "lab").glob("*.md"))
DOCS = USER_DOCS + LAB_DOCS
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CITED = re.compile(r"(?:benchmarks|lab)/results/[\w.\-]+\.json")


def _anchors(md: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in md.read_text().splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            out.add(text.replace(" ", "-"))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_links_resolve_inside_the_repo(doc):
    bad = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists() or ROOT not in dest.parents and dest != ROOT:
            bad.append(f"{target}: no such file in the repository")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not bad, f"{doc.name}: " + "; ".join(bad)


def test_nothing_cites_documents_outside_the_repo():
    r = subprocess.run(
        ["git", "grep", "-n", "-I", "-E", r"FORMATS\.md|DESIGN\.md|ENGINES\.md|\.\./shared"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    hits = [h for h in r.stdout.splitlines() if not h.startswith("tests/test_docs.py")]
    assert not hits, "\n".join(hits)


def _cited(docs: list[Path]) -> set[str]:
    return {c for d in docs for c in CITED.findall(d.read_text())}


def test_benchmarks_results_holds_only_cited_files():
    cited = _cited(USER_DOCS)
    files = sorted((ROOT / "benchmarks" / "results").glob("*"))
    uncited = [f.name for f in files if f"benchmarks/results/{f.name}" not in cited]
    assert files and not uncited, (
        f"benchmarks/results/ holds files no README.md or docs/*.md figure cites: {uncited} "
        "(a trial's result belongs in lab/results/, named in lab/README.md or lab/notebook.md)"
    )


def test_lab_results_are_named_in_the_lab_docs():
    text = "\n".join(d.read_text() for d in LAB_DOCS)
    files = sorted((ROOT / "lab" / "results").glob("*.json"))
    unnamed = [
        f.name for f in files if not _named(f.name, text) and _no_pattern_covers(f.name, text)
    ]
    assert files and not unnamed, f"lab/results/ files lab/*.md never names: {unnamed}"


def _named(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w.\-]){re.escape(name)}", text) is not None


def _no_pattern_covers(name: str, text: str) -> bool:
    """True when no `prefix-*.json` pattern in ``text`` covers ``name`` either."""
    return not any(name.startswith(p) for p in re.findall(r"([\w.\-]+)\*\.json", text))


def test_every_cited_result_file_exists():
    missing = sorted(c for c in _cited(DOCS) if not (ROOT / c).exists())
    assert not missing, f"cited but not in the repository: {missing}"
