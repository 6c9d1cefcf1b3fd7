"""Train the drafters `benchmarks/bench_decode.py` measures, from the zoo alone.

    python benchmarks/decode_drafters.py --member dsv3-v2 --out DIR [--prompts 2304]
        [--steps 800] [--lr 3e-3] [--threads 2]
    python benchmarks/bench_decode.py --drafter-dsv3 DIR/run/best ...

1. Prompts: `--prompts` chat requests ("Write the Python function `f` from `m`." + its
   docstring summary) for functions of the zoo's *training* stdlib files, evenly spaced. The
   bench's prompts come from the held-out files, which no prompt here touches (checked).
2. Answers: the target's own greedy decoding, 160 new tokens at most, in batches of 32 with
   left padding (transformers `generate`): what `eagle3kit data regenerate --target` writes,
   batched. A drafter learns the target it will serve, not the corpus.
3. `eagle3kit data prepare`, `data vocab --draft-vocab-size 1024`, `data capture --topk 32`.
4. `eagle3kit train --ttt-steps 4 --steps 800 --batch-size 16 --max-len 320` from scratch
   (MHA, one layer), the best held-out checkpoint in DIR/run/best.

Every step resumes: a finished step's output is kept, so a rerun after a kill goes on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from eagle3kit import zoo
from eagle3kit.zoo.corpus import chat_samples, files, spaced


def prompts(n: int) -> list[dict]:
    """`n` evenly spaced chat requests from the training files, distinct, none held out."""
    held = {json.dumps(c["messages"][0]) for c in chat_samples(files("lib", held_out=True))}
    seen, out = set(), []
    for c in spaced(chat_samples(files("lib")), n):
        key = json.dumps(c["messages"][0])
        if key not in seen and key not in held:
            seen.add(key)
            out.append({"messages": c["messages"][:1]})
    return out


def regenerate(member: str, convs: list[dict], out: Path, batch: int = 32) -> None:
    """Answer each request with the target's greedy decoding (OpenAI-form JSONL)."""
    from eagle3kit.model.target import TargetModel

    tm = TargetModel.from_pretrained(zoo.get(member))
    tok = tm.tokenizer
    tok.padding_side = "left"
    t0, lines = time.perf_counter(), []
    for i in range(0, len(convs), batch):
        chunk = convs[i : i + batch]
        texts = [
            tok.apply_chat_template(c["messages"], add_generation_prompt=True, tokenize=False)
            for c in chunk
        ]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            g = tm.model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=160,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )
        for c, row in zip(chunk, g[:, enc["input_ids"].shape[1] :].tolist(), strict=True):
            row = row[: row.index(tok.eos_token_id)] if tok.eos_token_id in row else row
            answer = {"role": "assistant", "content": tok.decode(row)}
            lines.append(json.dumps({"messages": c["messages"] + [answer]}) + "\n")
        print(
            f"regenerate: {i + len(chunk)}/{len(convs)} in {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(lines))
    tmp.replace(out)


def cli(*args: str) -> None:
    print("$ eagle3kit " + " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "eagle3kit", *args], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--member", default="dsv3-v2")
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompts", type=int, default=2304)
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--lr", default="3e-3")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    d, target = Path(a.out), str(zoo.get(a.member))
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if not (d / "regen.jsonl").is_file():
        regenerate(a.member, prompts(a.prompts), d / "regen.jsonl")
    if not (d / "data" / "data.json").is_file():
        cli("data", "prepare", str(d / "regen.jsonl"), "--target", target, "-o", str(d / "data"))
    if not (d / "vocab.safetensors").is_file():
        cli(
            "data",
            "vocab",
            str(d / "data"),
            "--draft-vocab-size",
            "1024",
            "-o",
            str(d / "vocab.safetensors"),
        )
    cli(
        "data",
        "capture",
        str(d / "data"),
        "--target",
        target,
        "-o",
        str(d / "store"),
        "--vocab",
        str(d / "vocab.safetensors"),
        "--topk",
        "32",
    )
    if not (d / "run" / "summary.json").is_file():
        resume = ["--resume"] if (d / "run" / "state").is_dir() else []
        cli(
            "train",
            "--target",
            target,
            "--features",
            str(d / "store"),
            "-o",
            str(d / "run"),
            "--ttt-steps",
            "4",
            "--steps",
            str(a.steps),
            "--batch-size",
            "16",
            "--lr",
            a.lr,
            "--max-len",
            "320",
            "--threads",
            str(a.threads),
            *resume,
        )
    s = json.loads((d / "run" / "summary.json").read_text())
    print(
        f"{a.member}: held-out tau_every_position {s['tau_every_position']:.2f} at depth 4 (step "
        f"{s['best_step']}); drafter {d / 'run' / 'best'}; {time.perf_counter() - t0:.0f} s"
    )


if __name__ == "__main__":
    main()
