"""The zoo bar (issue 33): does a built member answer the request, signed and as users ask?

    python benchmarks/zoo_bar.py DIR [--requests 32] [--bf16] [--slice S] [--json OUT.json]

For the member built in DIR (``eagle3kit zoo build`` output, with its zoo.json), greedy
answers (stop at EOS, at most ``--max-new`` tokens; the tokenizer's own chat template, one
left-padded batch) to held-out requests for functions of the held-out files of the member's
slice, in five styles:

- ``signed``: the zoo's own requests with the function's signature in the prompt
  (``corpus.SIGNED_PHRASINGS``, the phrasings the recipe trains on);
- ``unsigned``: requests phrased as users write them, no signature, in phrasings no recipe
  trains on (``corpus.HELD_OUT_PHRASINGS``, e.g. "Please write `m.f`.");
- ``unsigned_b``: the same in a second held-out set made differently
  (``corpus.HELD_OUT_PHRASINGS_B``: verbs and word orders no training phrasing has, e.g.
  "Could you draft m.f?"), so that the figure does not hang on four phrasings;
- ``unsigned_c``: a third such set (``corpus.HELD_OUT_PHRASINGS_C``), written before the
  recipe-10 trials that the second set's figures had shaped;
- ``unsigned_d``: a fourth (``corpus.HELD_OUT_PHRASINGS_D``), written in round 8 before any
  trial of a knob made after reading the third set's misses.

``--slice`` asks for functions of another slice than the member's own (a v1 asked what its
v2 is asked). Per style: the share whose first line names the requested function
(``def f(``), the share of distinct first lines, the number of distinct answers (a
canned-output check) and pooled distinct-4 over all answers, beside the true sources'
pooled distinct-4. The bar: names >= 0.8 and distinct openings >= 0.8 in every style.
``--bf16`` measures the weights after a round trip through bfloat16 (cast down and back),
the way the zoo ships them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _env import environment  # noqa: E402

BAR = {"names_function": 0.8, "distinct_openings": 0.8}
STYLES = ("signed", "unsigned", "unsigned_b", "unsigned_c", "unsigned_d")


def table_for(style: str):
    """The phrasing table of ``style``."""
    from eagle3kit.zoo import corpus

    return dict(zip(STYLES, (corpus.SIGNED_PHRASINGS, *corpus.HELD_OUT_SETS), strict=True))[style]


def requests_for(slice_name: str, style: str, n: int) -> list[dict]:
    """``n`` held-out requests of ``style`` for functions of ``slice_name``'s held-out files."""
    from eagle3kit.zoo import corpus

    held = corpus.files(slice_name, held_out=True)
    if style == "signed":
        return corpus.held_out_requests(held, n, signed=True)
    return corpus.held_out_requests(held, n, table=table_for(style))


def load(path: Path, bf16: bool):
    """The member's tokenizer and model (float32; through bfloat16 and back when ``bf16``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    if bf16:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    return tok, model


def answers(tok, model, requests: list[dict], max_new: int) -> list[list[int]]:
    """Greedy answers (token ids, EOS dropped) to ``requests`` through the chat template."""
    from eagle3kit.zoo import training as tr

    prompts = [
        list(
            tok.apply_chat_template(r["messages"], add_generation_prompt=True, return_dict=True)[
                "input_ids"
            ]
        )
        for r in requests
    ]
    return tr.greedy(model, prompts, max_new, tok.eos_token_id, tok.pad_token_id, True)


def by_phrasing(reqs: list[dict], texts: list[str], style: str) -> dict[str, float]:
    """The share of answers naming the function per phrasing (request i uses phrasing
    ``i % len(table)``, ``corpus.held_out_requests``)."""
    from eagle3kit.zoo.builder import names_function

    table = table_for(style)
    out: dict[str, list[bool]] = {}
    for i, (r, a) in enumerate(zip(reqs, texts, strict=True)):
        key = table[i % len(table)].split("\n")[0]
        out.setdefault(key, []).append(names_function(a, r["name"]))
    return {k: round(sum(v) / len(v), 4) for k, v in out.items()}


def measure_style(tok, model, slice_name: str, style: str, n: int, max_new: int) -> dict:
    from eagle3kit.core.diversity import pooled_distinct
    from eagle3kit.zoo.builder import chat_figures

    reqs = requests_for(slice_name, style, n)
    t = time.time()
    ids = answers(tok, model, reqs, max_new)
    texts = [tok.decode(a) for a in ids]
    fig = chat_figures(texts, [r["name"] for r in reqs], ids)
    fig["seconds"] = round(time.time() - t, 1)
    true = [tok.encode(r["answer"], add_special_tokens=False)[:max_new] for r in reqs]
    fig["reference_pooled_distinct4"] = round(pooled_distinct(true, 4), 4)
    fig["below_bar"] = [f"{k} {fig[k]} < {v}" for k, v in BAR.items() if fig[k] < v]
    fig["names_by_phrasing"] = by_phrasing(reqs, texts, style)
    fig["first_lines"] = [
        {"name": r["name"], "first_line": a.split("\n", 1)[0][:120]}
        for r, a in zip(reqs, texts, strict=True)
    ]
    fig["samples"] = [
        {"request": r["messages"][0]["content"], "answer": a[:240]}
        for r, a in list(zip(reqs, texts, strict=True))[:6]
    ]
    return fig


def measure(path: Path, n: int, max_new: int, bf16: bool, slice_name: str | None = None) -> dict:
    """The zoo bar's figures of the member in ``path`` on requests for held-out functions of
    its own slice (or of ``slice_name``: e.g. a v1 asked what its v2 is asked)."""
    doc = json.loads((path / "zoo.json").read_text())
    from eagle3kit import zoo

    slice_name = slice_name or zoo.member(doc["member"]).slice
    tok, model = load(path, bf16)
    styles = {s: measure_style(tok, model, slice_name, s, n, max_new) for s in STYLES}
    return {
        "member": doc["name"],
        "dir": str(path),
        "weights": "bf16 round trip" if bf16 else "float32 as built",
        "slice": slice_name,
        "params": doc.get("params"),
        "build_seconds": doc.get("build_seconds"),
        "recipe": doc.get("recipe"),
        "bar": BAR,
        "meets_bar": all(not styles[s]["below_bar"] for s in STYLES),
        **styles,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path, nargs="+", help="built member dir(s)")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--bf16", action="store_true", help="also measure after a bf16 round trip")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--slice", default=None, help="ask for functions of this slice instead")
    ap.add_argument("--json", type=Path, default=None, help="result file (one member)")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    print("environment: " + environment(), flush=True)
    rows = []
    for d in args.dir:
        for bf16 in (False, True) if args.bf16 else (False,):
            row = measure(d, args.requests, args.max_new, bf16, args.slice)
            rows.append(row)
            brief = {
                s: {
                    k: row[s][k]
                    for k in (
                        "names_function",
                        "distinct_openings",
                        "distinct_answers",
                        "pooled_distinct4",
                        "reference_pooled_distinct4",
                    )
                }
                for s in STYLES
            }
            print(
                json.dumps(
                    {
                        "member": row["member"],
                        "weights": row["weights"],
                        "meets_bar": row["meets_bar"],
                        **brief,
                    }
                ),
                flush=True,
            )
    if args.json:
        from _results import write_result

        write_result(args.json, "eagle3kit.zoo_bar", {"rows": rows})


if __name__ == "__main__":
    main()
