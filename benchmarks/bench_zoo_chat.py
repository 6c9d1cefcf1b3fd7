"""Do the zoo's chat answers depend on the request? Figures on held-out requests.

    python benchmarks/bench_zoo_chat.py [--members llama-v1,...] [--json out.json]

For each member (built first if missing, in ``$EAGLE3KIT_HOME``), greedy answers
through the tokenizer's own chat template and ``generate`` (not the build's code path) to
``--requests`` held-out requests (functions of held-out files, ``corpus.PHRASINGS`` in turn,
with and without the docstring): the share whose first line names the requested function
(``def f(``), the share of distinct first lines, distinct answers, pooled distinct-4 over
all answers, mean per-answer distinct-4; next to the figures the build recorded in zoo.json.

Recipe trials (a member built with overrides, measured after each phase) are
``lab/zoo_phases.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", default="llama-v1,llama-v2,dsv3-v1,dsv3-v2")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--size", default="full", help="full, or tiny (a smoke test)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(2)
    print("environment: " + environment())
    rows = [
        measure_member(n, args.requests, args.max_new, args.size) for n in args.members.split(",")
    ]
    for r in rows:
        print(json.dumps(r, indent=1))
    if args.json:
        from _results import write_result

        home = os.environ.get("EAGLE3KIT_HOME")
        write_result(args.json, "eagle3kit.bench_zoo_chat", {"eagle3kit_home": home, "rows": rows})


if __name__ == "__main__":
    main()
