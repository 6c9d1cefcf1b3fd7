"""Is every figure in README.md's "Measured" section traceable to a committed result JSON?

    python benchmarks/check_measured.py [README.md]      # lists untraced figures; exit 1 if any

The section runs from the "## Measured" heading to the next "## " heading. A figure is a number
with a decimal point (8.7, 0.51) or with a unit (216x, 94%, 143 tok/s, 0.60 s, 8.7 ms, 0 MiB,
2.22 GiB, 21,781 bytes, 17 GFLOPS); numbers inside `code`, glued to a name (dsv3-v2, K2.5,
H=7168) or in a link's address are not figures. Each paragraph (a table counts as one, and
also sees the paragraph just before it) must name its result files, e.g.
"(benchmarks/results/bench_decode.json)", and every figure in it must appear in one of them:
some number in the file (anywhere, strings included) that, times one of 1, 100, 1/100, 1000,
1/1000, 2^-20, 2^-30 (%, ms, MiB, GiB from ratios, seconds, bytes), rounds to the figure at
the precision printed. Each named file must exist and carry "command", "commit" and
"environment".
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNITS = r"tok/s|tokens/s|bytes/token|nats/token|GFLOPS|bytes|GiB|MiB|KiB|GB|MB|KB|ms|s|x|×|%"
FIGURE = re.compile(
    r"(?<![\w.=/\-])[+\-−]?(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    rf"(?:\s?(?P<unit>{UNITS})(?![\w/]))?"
)
CITE = re.compile(r"benchmarks/results/[\w.\-]+\.json")
SCALES = (1.0, 100.0, 0.01, 1e3, 1e-3, 2.0**-20, 2.0**-30)
NEEDS = ("command", "commit", "environment")


def measured_section(text: str) -> str | None:
    """The text under "## Measured" up to the next level-2 heading (None: no such section)."""
    m = re.search(r"^## Measured[^\n]*\n", text, re.M)
    if not m:
        return None
    end = re.search(r"^## ", text[m.end() :], re.M)
    return text[m.end() : m.end() + end.start()] if end else text[m.end() :]


def blocks(section: str) -> list[tuple[str, list[str]]]:
    """(paragraph, the result files it may draw on): its own, and for a table the caption's."""
    paras = [p for p in re.split(r"\n\s*\n", section) if p.strip()]
    out = []
    for i, p in enumerate(paras):
        files = CITE.findall(p)
        if p.lstrip().startswith("|") and i > 0:
            files += CITE.findall(paras[i - 1])
        out.append((p, sorted(set(files))))
    return out


def figures(paragraph: str) -> list[tuple[str, float, int]]:
    """(as written, value, decimals shown) of every figure in a paragraph."""
    text = re.sub(r"`[^`]*`", " ", paragraph)  # code: commands, paths, options
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link addresses
    text = CITE.sub(" ", text)
    out = []
    for m in FIGURE.finditer(text):
        num, unit = m.group("num"), m.group("unit")
        if "." not in num and not unit:
            continue
        plain = num.replace(",", "")
        decimals = len(plain.split(".")[1]) if "." in plain else 0
        out.append((m.group(0).strip(), float(plain), decimals))
    return out


def json_numbers(doc) -> list[float]:
    """Every number in a JSON document, those written inside strings included."""
    if isinstance(doc, bool) or doc is None:
        return []
    if isinstance(doc, int | float):
        return [float(doc)]
    if isinstance(doc, str):
        return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", doc.replace(",", ""))]
    items = doc.values() if isinstance(doc, dict) else doc
    return [x for v in items for x in json_numbers(v)]


def appears(value: float, decimals: int, numbers: list[float]) -> bool:
    tol = 0.5 * 10.0**-decimals * (1 + 1e-9) + 1e-12
    return any(abs(abs(v * k) - value) <= tol for v in numbers for k in SCALES)


def untraced(readme: str, root: Path = ROOT) -> list[str]:
    """Problems, one line each: a figure no named result file holds, a paragraph that names
    none, a named file missing or without command/commit/environment. [] when all trace."""
    section = measured_section(readme)
    if section is None:
        return []
    problems, cache = [], {}
    for para, files in blocks(section):
        numbers = []
        for f in files:
            if f not in cache:
                cache[f] = _load(root / f, problems)
            numbers += cache[f]
        where = " ".join(para.split())[:60]
        for shown, value, decimals in figures(para):
            if not files:
                problems.append(f"{shown!r} in '{where}...': no result file named in its paragraph")
            elif not appears(value, decimals, numbers):
                problems.append(f"{shown!r} in '{where}...': in none of {', '.join(files)}")
    return problems


def _load(path: Path, problems: list[str]) -> list[float]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        problems.append(f"{path}: expected a result JSON, found {type(e).__name__}: {e}")
        return []
    missing = [k for k in NEEDS if not isinstance(doc, dict) or k not in doc]
    if missing:
        problems.append(f"{path}: expected keys {list(NEEDS)}, missing {missing}")
    return json_numbers(doc)


def main() -> None:
    readme = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "README.md"
    text = readme.read_text()
    if measured_section(text) is None:
        print(f"{readme}: no '## Measured' section")
        return
    problems = untraced(text, readme.resolve().parent)
    for p in problems:
        print(p)
    print(f"{len(problems)} untraced" if problems else "every figure traces to a result file")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
