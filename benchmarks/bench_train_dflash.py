"""DFlash training step beside speculators' DFlash training step: tokens/s at equal shapes.

    python benchmarks/bench_train_dflash.py [--repeats 5] [--threads 2] [--json]
                                            [--out benchmarks/results/bench_train_dflash.json]

One step, on both sides: anchors drawn on the loss mask (--anchors of them, every token is
an answer token), blocks of mask tokens after each anchor, every block in one pass of the
drafter with the block mask, KL to the verifier's law of each slot with the exp(-(k-1)/γ)
position weights (γ = 4), backward, clip_grad_norm 1.0, AdamW over the drafter's body (fc,
hidden_norm, the layers, norm; the embedding and lm_head are the target's and frozen on both
sides). Ours: `methods/dflash/train/step.py` `make_blocks`, `block_logits`, `block_loss`; the
teacher's
log-probabilities are computed in the step from the verifier's last hidden state through its
norm and head, as speculators does (so both steps do the same work). The peer,
vllm-project/speculators' DFlashDraftModel, runs for real in its own venv
(benchmarks/peers/speculators_dflash_step.py, the venv of benchmarks/peers/), sdpa attention
and its eager KL (its fused one needs Triton), in steps alternating with ours so both see the
same host load. tokens/s = T / step time; median/min/max over --repeats after a warm-up step.
Inputs are random tensors of the right shapes (one row of T tokens, n target layers).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_train import PeerSteps, peer_python, timed  # noqa: E402

SHAPES = {
    "H=512, 2 layers, 3 target layers, T=512, B=8, 32 anchors, V=8192": dict(
        h=512, heads=8, inter=1536, layers=2, aux=3, t=512, block=8, anchors=32, v=8192
    ),
    "zoo (H=128, 2 layers, 3 target layers, T=512, B=8, 32 anchors, V=4096)": dict(
        h=128, heads=2, inter=352, layers=2, aux=3, t=512, block=8, anchors=32, v=4096
    ),
}


def ours_step(s: dict):
    """(one training step of ours, trained parameter count) on random inputs of shape `s`."""
    import torch
    import torch.nn.functional as F

    from eagle3kit.data.features import Features
    from eagle3kit.methods.dflash.checkpoint.spec import DFlashSpec
    from eagle3kit.methods.dflash.model import DFlashDrafter
    from eagle3kit.methods.dflash.train.step import block_logits, block_loss, make_blocks
    from eagle3kit.model.attention import RMSNorm

    h, v, t = s["h"], s["v"], s["t"]
    spec = DFlashSpec(
        hidden_size=h,
        intermediate_size=s["inter"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["heads"],
        num_key_value_heads=s["heads"],
        head_dim=h // s["heads"],
        vocab_size=v,
        draft_vocab_size=v,
        target_hidden_size=h,
        block_size=s["block"],
        mask_token_id=v - 1,
        target_layer_ids=tuple(range(1, 1 + s["aux"])),
        max_position_embeddings=4 * t,
        dtype="float32",
    )
    torch.manual_seed(0)
    d = DFlashDrafter(spec).train()
    head = torch.randn(v, h) * 0.02
    d.target_io = (torch.randn(v, h) * 0.02, head)
    verifier_norm = RMSNorm(h, 1e-6).requires_grad_(False)
    g = torch.Generator().manual_seed(1)
    last = torch.randn(1, t, h, generator=g)  # the verifier's last hidden state [1, T, H]
    f = Features(
        input_ids=torch.randint(0, v - 1, (1, t), generator=g),
        attention_mask=torch.ones(1, t, dtype=torch.bool),
        loss_mask=torch.ones(1, t, dtype=torch.bool),
        aux=torch.randn(1, t, s["aux"] * h, generator=g),
        target_argmax=torch.zeros(1, t, dtype=torch.long),
        teacher_ids=torch.zeros(1, t, 1, dtype=torch.long),
        teacher_logp=torch.zeros(1, t, 1),
    )
    params = [p for p in d.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)

    def step() -> None:
        with torch.no_grad():
            f.teacher_logp = F.log_softmax(F.linear(verifier_norm(last), head), -1)  # [1, T, V]
        gen = torch.Generator().manual_seed(2)
        blocks = make_blocks(f, s["anchors"], s["block"], v - 1, gen)
        loss = block_loss(block_logits(d, f, blocks), f, blocks, 4.0, "kl")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, sum(p.numel() for p in params)


def spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def run_shape(name: str, s: dict, repeats: int, threads: int) -> dict:
    step, n_ours = ours_step(s)
    step()  # warm-up
    python, why = peer_python()
    row = {"shape": name, **s, "trained_parameters": {"ours": n_ours}}
    if python is None:
        times = [timed(step, "cpu") for _ in range(repeats)]
        row["ours_tokens_per_s"] = spread([s["t"] / x for x in times])
        row["peer"] = {"ran": False, "reason": why}
        return row
    args = [f"--{n}={s[n]}" for n in s] + [f"--threads={threads}"]
    peer = PeerSteps(python, "speculators_dflash_step.py", args)
    try:
        pairs = [(timed(step, "cpu"), peer.step()) for _ in range(repeats)]
    finally:
        peer.close()
    row["trained_parameters"]["peer"] = peer.head["trained_parameters"]
    row["ours_tokens_per_s"] = spread([s["t"] / o for o, _ in pairs])
    row["peer_tokens_per_s"] = spread([s["t"] / p for _, p in pairs])
    row["ours_over_peer"] = statistics.median(p / o for o, p in pairs)
    row["step_s"] = {"ours": [o for o, _ in pairs], "peer": [p for _, p in pairs]}
    row["peer"] = {k: peer.head[k] for k in ("peer", "versions", "attention", "loss")}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import torch
    from _env import environment
    from _results import write_result

    torch.set_num_threads(a.threads)
    t0 = time.time()
    rows = [run_shape(n, s, a.repeats, a.threads) for n, s in SHAPES.items()]
    print(environment())
    for r in rows:
        o = r["ours_tokens_per_s"]
        line = (
            f"{r['shape']}: ours {o['median']:.0f} tokens/s "
            f"(min {o['min']:.0f}, max {o['max']:.0f})"
        )
        if "peer_tokens_per_s" in r:
            p = r["peer_tokens_per_s"]
            line += (
                f"; speculators {r['peer']['versions']['speculators']} {p['median']:.0f} "
                f"(min {p['min']:.0f}, max {p['max']:.0f}); ours/peer "
                f"{r['ours_over_peer']:.2f}x (median over {a.repeats} step pairs); trained "
                f"parameters {r['trained_parameters']}"
            )
        else:
            line += f"; peer not run: {r['peer']['reason']}"
        print(line)
    doc = {"repeats": a.repeats, "threads": a.threads, "rows": rows, "wall_s": time.time() - t0}
    if a.out:
        print("wrote", write_result(a.out, "eagle3kit.bench_train_dflash", doc))
    if a.json:
        print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
