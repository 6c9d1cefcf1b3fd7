"""Do the zoo's chat answers depend on the request? Figures on held-out requests.

    python benchmarks/bench_zoo_chat.py [--members llama-v1,...] [--json out.json]
    python benchmarks/bench_zoo_chat.py --phases llama-v1 [--set chat_aligned=True ...]

Default: for each member (built first if missing, in ``$EAGLE3KIT_HOME``), greedy answers
through the tokenizer's own chat template and ``generate`` (not the build's code path) to
``--requests`` held-out requests (functions of held-out files, ``corpus.PHRASINGS`` in turn,
with and without the docstring): the share whose first line names the requested function
(``def f(``), the share of distinct first lines, distinct answers, pooled distinct-4 over
all answers, mean per-answer distinct-4; next to the figures the build recorded in zoo.json.

``--phases NAME``: builds NAME's recipe (with ``--set field=value`` overrides) into a temp
dir and measures the same requests after likelihood training and after the unloop phase,
with the build's held-out loss and greedy distinct-4 at the end: where conditioning is lost.
``--seed N`` builds it from another seed (the same recipe, another draw): how far one
build's figures move by chance.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _env import environment  # noqa: E402


def _answers(path: Path, requests: list[dict], max_new: int) -> list[list[int]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    out = []
    for r in requests:
        enc = tok.apply_chat_template(r["messages"], add_generation_prompt=True, return_dict=True)
        ids = torch.tensor([list(enc["input_ids"])])  # [1, T]
        with torch.no_grad():
            g = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new,
                do_sample=False,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )[0, ids.shape[1] :].tolist()
        out.append(g[: g.index(tok.eos_token_id)] if tok.eos_token_id in g else g)
    return out, tok


def measure_member(name: str, n: int, max_new: int, size: str = "full") -> dict:
    from eagle3kit import zoo
    from eagle3kit.core.diversity import distinct_ngram_ratio, pooled_distinct
    from eagle3kit.zoo import corpus
    from eagle3kit.zoo.builder import chat_figures

    m = zoo.member(name)
    path = zoo.get(name, size=size)
    signed = zoo.recipe(name, size).chat_signature
    requests = corpus.held_out_requests(corpus.files(m.slice, held_out=True), n, signed)
    t = time.time()
    ids, tok = _answers(path, requests, max_new)
    texts = [tok.decode(a) for a in ids]
    fig = chat_figures(texts, [r["name"] for r in requests], ids)
    fig["distinct4_mean"] = round(sum(map(distinct_ngram_ratio, ids)) / len(ids), 4)
    fig["seconds"] = round(time.time() - t, 1)
    true = [tok.encode(r["answer"], add_special_tokens=False)[:max_new] for r in requests]
    reference = {  # the same figures of the requested functions' true sources
        "pooled_distinct4": round(pooled_distinct(true, 4), 4),
        "distinct4_mean": round(sum(map(distinct_ngram_ratio, true)) / len(true), 4),
    }
    doc = json.loads((path / zoo.MANIFEST).read_text())
    keys = ("names_function", "distinct_openings", "distinct_answers", "pooled_distinct4")
    build = {k: doc["metrics"]["chat"].get(k) for k in keys}
    samples = [
        {"request": r["messages"][0]["content"], "answer": a[:200]}
        for r, a in list(zip(requests, texts, strict=True))[:4]
    ]
    return {
        "member": name,
        "measured": fig,
        "reference": reference,
        "build": build,
        "build_seconds": doc.get("build_seconds"),
        "build_cpu_seconds": doc.get("build_cpu_seconds"),
        "heldout_loss": doc["metrics"]["heldout_loss"],
        "distinct4_mean": doc["metrics"]["distinct4_mean"],
        "samples": samples,
    }


def _parse_set(items: list[str]) -> dict:
    out = {}
    for it in items:
        k, v = it.split("=", 1)
        out[k] = ast.literal_eval(v)
    return out


def phases(
    name: str,
    overrides: dict,
    keep: Path | None = None,
    parent: Path | None = None,
    seed: int | None = None,
):
    """Without overrides the member is built into the cache (``zoo.build``, bar checked);
    with them (or another ``seed``: the same recipe from another draw), into ``keep`` (kept)
    or a temp dir (bar not checked), continuing from ``parent`` (a v2 candidate's own v1
    candidate) or the cached parent."""
    from eagle3kit import zoo
    from eagle3kit.core.errors import Eagle3Error
    from eagle3kit.zoo.builder import build_into, chat_eval

    m = zoo.member(name)
    if seed is not None:
        m = replace(m, seed=seed)
    recipe = replace(zoo.recipe(name), **overrides)
    if m.parent and parent is None:
        parent = zoo.get(m.parent)
    rows: dict = {}

    def on_phase(phase, model, tok, special, d):
        t = time.time()
        fig, _ = chat_eval(model, tok, special, d.requests, recipe.gen_tokens)
        fig["seconds"] = round(time.time() - t, 1)
        rows[phase] = fig
        print(f"{name} after {phase}: {fig}", flush=True)

    t0, c0 = time.time(), _cpu()
    if not overrides and seed is None:
        try:
            doc = json.loads((zoo.build(name, on_phase=on_phase) / zoo.MANIFEST).read_text())
        except Eagle3Error as e:
            return {"member": name, "phases": rows, "error": str(e)}
    else:
        with tempfile.TemporaryDirectory() as tmp:
            out = keep or Path(tmp) / name
            build_into(m, "full", recipe, out, parent, None, on_phase)
            doc = json.loads((out / zoo.MANIFEST).read_text())
    met = doc["metrics"]
    return {
        "member": name,
        "overrides": overrides,
        "seed": m.seed,
        "recipe_digest": doc.get("recipe_digest"),
        "phases": rows,
        "final_chat": {k: v for k, v in met["chat"].items() if k != "sample"},
        "chat_sample": met["chat"]["sample"],
        "heldout_loss": met["heldout_loss"],
        "heldout_loss_other_slice": met["heldout_loss_other_slice"],
        "distinct4_mean": met["distinct4_mean"],
        "distinct4_other_slice_mean": met["distinct4_other_slice_mean"],
        "build_seconds": round(time.time() - t0, 1),
        "build_cpu_seconds": round(_cpu() - c0, 1),
        "stage_seconds": doc["stage_seconds"],
    }


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", default="llama-v1,llama-v2,dsv3-v1,dsv3-v2")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--size", default="full", help="full, or tiny (a smoke test)")
    ap.add_argument("--phases", default=None, help="a member: measure after each build phase")
    ap.add_argument("--set", action="append", default=[], help="recipe override field=value")
    ap.add_argument(
        "--keep", type=Path, default=None, help="with --set or --seed: build into this dir"
    )
    ap.add_argument(
        "--parent", type=Path, default=None, help="with --set or --seed: the v2's parent dir"
    )
    ap.add_argument("--seed", type=int, default=None, help="with --phases: another seed")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(2)
    print("environment: " + environment())
    if args.phases:
        rows = [phases(args.phases, _parse_set(args.set), args.keep, args.parent, args.seed)]
    else:
        rows = [
            measure_member(n, args.requests, args.max_new, args.size)
            for n in args.members.split(",")
        ]
    for r in rows:
        print(json.dumps(r, indent=1))
    if args.json:
        from _results import write_result

        home = os.environ.get("EAGLE3KIT_HOME")
        write_result(args.json, "eagle3kit.bench_zoo_chat", {"eagle3kit_home": home, "rows": rows})


if __name__ == "__main__":
    main()
