"""The docs stand alone: every relative link in README.md and docs/*.md resolves inside the
repository (and its #anchor, when given, names a heading of the target), and nothing cites
documents that are not in the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


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
