"""Every reference to a section of docs/formats.md, in the code and the docs, names a section
that exists, and no file cites a document the repository does not hold."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REF = re.compile(r'docs/formats\.md,? "([^"]+)"(?: and "([^"]+)")?')


def _headings() -> set[str]:
    text = (ROOT / "docs" / "formats.md").read_text()
    return {m.group(1).strip() for m in re.finditer(r"^##+ (.+)$", text, re.M)}


def _files() -> list[Path]:
    return sorted([*(ROOT / "src").rglob("*.py"), *(ROOT / "docs").glob("*.md")])


def test_section_references_resolve():
    heads, bad = _headings(), []
    for p in _files():
        for m in REF.finditer(p.read_text()):
            bad += [(p.name, s) for s in m.groups() if s and s not in heads]
    assert not bad, (bad, sorted(heads))


def test_formats_doc_cites_its_sources():
    text = (ROOT / "docs" / "formats.md").read_text()
    for repo in ("sgl-project/sglang", "vllm-project/vllm", "vllm-project/speculators"):
        assert repo in text
    assert len(re.findall(r"PR #\d+", text)) >= 10
