"""Can the zoo's full Llama shape learn to copy within a build-sized budget? (lab/notebook.md)

    python lab/copy_toy.py [--steps 400] [--vocab 4096] [--lr 1e-3] [--gap 0]
                                        [--json lab/results/copy_toy.json]

Naming a requested function means copying its name from the prompt (an induction pattern).
This is that pattern alone: sequences of ``--span`` random tokens followed by the same tokens
again, next-token loss on all of it, AdamW at a constant ``--lr``. Every ``--every`` steps it
prints the loss and the accuracy of predicting the repeated half (positions past the first
repeated token; chance is 1 / vocab): an induction circuit shows as that accuracy climbing
towards 1. The model is ``zoo.training.ARCHS["llama"]["full"]`` at ``--vocab``, seeded.

With ``--gap 0`` the repeat always starts ``--span`` tokens after the first copy, so a head
that attends a fixed distance back solves it without matching tokens; ``--gap N`` puts
0..N random filler tokens between the copies (one length per batch), so only a head that
finds the earlier occurrence of the current token (induction) does. ``--circuit`` starts
from ``zoo.circuit.install`` (a previous-token head and an induction head set by hand).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))  # _env, _results
from _env import environment  # noqa: E402


def run(
    steps: int,
    vocab: int,
    lr: float,
    span: int,
    batch: int,
    every: int,
    gap: int = 0,
    circuit: bool = False,
) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from eagle3kit.zoo.training import ARCHS

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, max_position_embeddings=2048, **ARCHS["llama"]["full"])
    model = AutoModelForCausalLM.from_config(cfg)
    if circuit:
        from eagle3kit.zoo.circuit import install

        install(model, "llama", torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(1)
    rows, t0 = [], time.time()
    for step in range(steps):
        half = torch.randint(0, vocab, (batch, span), generator=gen)
        g = int(torch.randint(0, gap + 1, (1,), generator=gen)) if gap else 0
        fill = torch.randint(0, vocab, (batch, g), generator=gen)
        x = torch.cat([half, fill, half], 1)  # [B, 2 * span + g]
        logits = model(x[:, :-1]).logits  # [B, 2 * span + g - 1, V]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % every == 0 or step == steps - 1:
            with torch.no_grad():  # targets past the second copy's first token: copies
                hit = logits.argmax(-1)[:, span + g :] == x[:, span + g + 1 :]
            rows.append(
                {
                    "step": step,
                    "loss": round(loss.item(), 4),
                    "copy_accuracy": round(hit.float().mean().item(), 4),
                    "seconds": round(time.time() - t0, 1),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--span", type=int, default=48)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--gap", type=int, default=0, help="0..N filler tokens between copies")
    ap.add_argument("--circuit", action="store_true", help="start from zoo.circuit.install")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    print("environment: " + environment())
    rows = run(a.steps, a.vocab, a.lr, a.span, a.batch, a.every, a.gap, a.circuit)
    if a.json:
        from _results import write_result

        doc = {
            "settings": {k: v for k, v in vars(a).items() if k != "json"},
            "chance": round(1 / a.vocab, 6),
            "curve": rows,
            "final_copy_accuracy": rows[-1]["copy_accuracy"],
        }
        write_result(a.json, "eagle3kit.bench_copy_toy", doc)


if __name__ == "__main__":
    main()
