"""The report's blocks written out: Markdown, and self-contained HTML (inline CSS, PNGs as
base64 data URIs, no script, no external request).

A block is a tuple: ("h2"|"h3"|"p"|"pre", text), ("list", [text]), ("table", head, rows),
("img", file name, PNG bytes, caption).
"""

from __future__ import annotations

import base64
import html

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:980px;margin:2em auto;
padding:0 1em;color:#1a1a1a;line-height:1.5}
h1{border-bottom:2px solid #2b6cb0;padding-bottom:.2em}h2{margin-top:1.6em;color:#2b6cb0}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #cbd5e0;padding:.3em .6em;text-align:left}th{background:#edf2f7}
td.src,span.src{color:#718096;font-size:.85em}figure{margin:1em 0}img{max-width:100%}
figcaption{color:#4a5568;font-size:.9em}
"""


def to_md(blocks: list[tuple], title: str) -> str:
    lines = [f"# {title}", ""]
    for b in blocks:
        if b[0] in ("h2", "h3"):
            lines += [("## " if b[0] == "h2" else "### ") + b[1], ""]
        elif b[0] == "p":
            lines += [b[1], ""]
        elif b[0] == "pre":
            lines += ["```", b[1].rstrip("\n"), "```", ""]
        elif b[0] == "list":
            lines += [f"- {x}" for x in b[1]] + [""]
        elif b[0] == "table":
            lines += ["| " + " | ".join(b[1]) + " |", "|" + "---|" * len(b[1])]
            lines += ["| " + " | ".join(r) + " |" for r in b[2]] + [""]
        elif b[0] == "img":
            lines += [f"![{b[3]}]({b[1]})", ""]
    return "\n".join(lines)


def to_html(blocks: list[tuple], title: str) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{e(title)}</h1>",
    ]
    for b in blocks:
        if b[0] in ("h2", "h3", "p", "pre"):
            parts.append(f"<{b[0]}>{e(b[1])}</{b[0]}>")
        elif b[0] == "list":
            parts.append("<ul>" + "".join(f"<li>{e(x)}</li>" for x in b[1]) + "</ul>")
        elif b[0] == "table":
            head = "".join(f"<th>{e(h)}</th>" for h in b[1])
            body = "".join(
                "<tr>"
                + "".join(
                    f'<td class="src">{e(c)}</td>'
                    if i == len(r) - 1 and b[1][-1] == "source"
                    else f"<td>{e(c)}</td>"
                    for i, c in enumerate(r)
                )
                + "</tr>"
                for r in b[2]
            )
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif b[0] == "img":
            data = base64.b64encode(b[2]).decode("ascii")
            parts.append(
                f'<figure><img alt="{e(b[3])}" src="data:image/png;base64,{data}">'
                f"<figcaption>{e(b[3])}</figcaption></figure>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)
