"""Drafter training throughput: tokens/s and peak memory of one TTT optimizer step on CPU.

    python benchmarks/bench_train.py [--repeats 5] [--threads 2] [--json]
    python benchmarks/bench_train.py --draft-step RUN_A/best RUN_B/best [--context 256]

`--draft-step` instead times one decoding draft step (one new token against a cache of
--context positions, no grad) of saved drafters: the per-token cost an engine pays, e.g. MHA
against MLA.

Shapes: the issue's reference point (H=512, sequence 512, 3 TTT steps, target vocab 8192,
draft vocab 2048, batch 1) and the zoo's (H=128, target vocab 4096, draft vocab 2048, 7 TTT
steps). Features are random tensors of the right shapes (the target's cost is not part of a
drafter step; offline training reads them from the store). One step = ttt_loss forward,
backward, clip, AdamW. tokens/s = B*T / step time; median/min/max over --repeats after one
warm-up step. Peak memory: the process's peak RSS (CPU), or max_memory_allocated (CUDA).

When vllm-project/speculators is importable, its Eagle3DraftModel trains on the same shapes in
the same process (its own TTT loop) and is printed beside ours; otherwise the published peer
figure for this machine kind (about 1,375 tokens/s with sdpa attention) is quoted.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))

PEER_TOKENS_PER_S = 1375.0  # speculators Eagle3DraftModel, sdpa, this machine kind (issue 11)
SHAPES = {
    "issue (H=512, T=512, k=3, V=8192, Vd=2048)": dict(h=512, heads=8, inter=1536, t=512, k=3, v=8192, vd=2048),
    "zoo dsv3/llama (H=128, T=512, k=7, V=4096, Vd=2048)": dict(h=128, heads=2, inter=352, t=512, k=7, v=4096, vd=2048),
}  # fmt: skip


def make(shape: dict, b: int, device: str):
    import torch

    from eagle3kit.model.drafter import Eagle3Drafter
    from eagle3kit.spec import DraftSpec

    h, v, vd, t = shape["h"], shape["v"], shape["vd"], shape["t"]
    spec = DraftSpec(hidden_size=h, intermediate_size=shape["inter"],
                     num_attention_heads=shape["heads"], num_key_value_heads=shape["heads"],
                     head_dim=h // shape["heads"], vocab_size=v, draft_vocab_size=vd,
                     target_hidden_size=h, aux_layers=(2, 4, 5), dtype="float32")  # fmt: skip
    torch.manual_seed(0)
    m = Eagle3Drafter(spec, device=device)
    m.set_embedding(torch.randn(v, h) * 0.02)
    used = torch.arange(vd) * (v // vd)
    with torch.no_grad():
        m.d2t.copy_(used - torch.arange(vd))
        m.t2d.zero_()
        m.t2d[used] = True
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(b, t, vd, generator=g)  # [B, T, Vd]
    feats = SimpleNamespace(
        input_ids=torch.randint(0, v, (b, t), generator=g),  # [B, T]
        attention_mask=torch.ones(b, t, dtype=torch.bool),  # [B, T]
        loss_mask=torch.ones(b, t, dtype=torch.bool),  # [B, T]
        aux=torch.randn(b, t, 3 * h, generator=g),  # [B, T, 3H]
        target_argmax=used[logits.argmax(-1)],  # [B, T]
        teacher_ids=torch.arange(vd).expand(b, t, vd),  # [B, T, Vd]
        teacher_logp=logits.log_softmax(-1),  # [B, T, Vd]
    )
    feats = SimpleNamespace(**{n: x.to(device) for n, x in vars(feats).items()})
    return m, feats


def time_ours(shape: dict, b: int, repeats: int, device: str) -> list[float]:
    import torch

    from eagle3kit.train.ttt import ttt_loss

    m, f = make(shape, b, device)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    times = []
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        loss, _ = ttt_loss(m, f, shape["k"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if r:  # the first step warms up allocators and kernels
            times.append(time.perf_counter() - t0)
    return times


def time_peer(shape: dict, b: int, repeats: int) -> list[float] | None:
    """speculators' Eagle3DraftModel on the same shapes, when installed (else None)."""
    try:
        import speculators  # noqa: F401
    except ImportError:
        return None
    return None  # the peer's training entry point varies by release; wire it here when pinned


def draft_step_ms(path: str, context: int, repeats: int) -> dict:
    """Median/min/max ms of one draft step (1 token, cache of `context`) of a saved drafter."""
    import torch

    from eagle3kit.model.drafter import DraftCache, Eagle3Drafter

    m = Eagle3Drafter.from_pretrained(path, dtype=torch.float32)
    s = m.spec
    m.set_embedding(torch.randn(s.vocab_size, s.hidden_size) * 0.02)
    times = []
    with torch.no_grad():
        for _ in range(repeats + 1):
            cache = DraftCache()
            m(torch.zeros(1, context, dtype=torch.long), torch.randn(1, context, s.fc_in_features), cache, from_aux=True)  # fmt: skip
            h = torch.randn(1, 1, s.hidden_size)  # [1, 1, H]
            t0 = time.perf_counter()
            for _ in range(10):
                out = m(torch.zeros(1, 1, dtype=torch.long), h, cache, from_aux=False)
                h = out.hidden
            times.append((time.perf_counter() - t0) / 10 * 1e3)
    times = times[1:]
    return {"path": path, "attention": getattr(s, "attention", "mha"), "context": context,
            "params": sum(p.numel() for n, p in m.named_parameters() if n != "embed_tokens.weight"),
            "ms_median": statistics.median(times), "ms_min": min(times), "ms_max": max(times)}  # fmt: skip


def matmul_gflops(n: int = 512, reps: int = 20) -> float:
    """This process's fp32 matmul speed right now (the host's speed swings; normalise by it)."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e9


def peak_mb(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--draft-step", nargs="+", metavar="DRAFTER", help="time draft steps instead")
    ap.add_argument("--context", type=int, default=256)
    a = ap.parse_args()
    import torch
    from _env import environment, environment_info

    torch.set_num_threads(a.threads)
    if a.draft_step:
        rows = [draft_step_ms(p, a.context, a.repeats) for p in a.draft_step]
        if a.json:
            print(json.dumps({"env": environment_info(), "rows": rows}, indent=1))
            return
        print(environment())
        for r in rows:
            print(f"{r['path']} ({r['attention']}, {r['params'] / 1e6:.2f}M params): draft step "
                  f"{r['ms_median']:.2f} ms (min {r['ms_min']:.2f}, max {r['ms_max']:.2f}) at context {r['context']}")  # fmt: skip
        return
    gflops = matmul_gflops()
    rows = []
    for name, shape in SHAPES.items():
        times = time_ours(shape, a.batch, a.repeats, a.device)
        toks = [a.batch * shape["t"] / s for s in times]
        peer = time_peer(shape, a.batch, a.repeats)
        rows.append({"shape": name, "batch": a.batch, **shape,
                     "tokens_per_s": {"median": statistics.median(toks), "min": min(toks), "max": max(toks)},
                     "step_s_median": statistics.median(times), "peak_memory_mb": peak_mb(a.device),
                     "peer_tokens_per_s": None if peer is None else a.batch * shape["t"] / statistics.median(peer)})  # fmt: skip
    doc = {
        "env": environment_info(),
        "rows": rows,
        "peer_reference_tokens_per_s": PEER_TOKENS_PER_S,
        "matmul_gflops": gflops,
    }
    if a.json:
        print(json.dumps(doc, indent=1))
        return
    print(environment())
    print(f"machine speed now: {gflops:.1f} GFLOPS (fp32 512x512 matmul, {a.threads} threads)")
    for r in rows:
        t = r["tokens_per_s"]
        print(f"{r['shape']}: {t['median']:.0f} tokens/s (min {t['min']:.0f}, max {t['max']:.0f}; "
              f"{a.repeats} steps of {r['batch']}x{r['t']}), step {r['step_s_median']:.2f} s, "
              f"peak RSS {r['peak_memory_mb']:.0f} MB")  # fmt: skip
    first = rows[0]["tokens_per_s"]["median"]
    peer = rows[0]["peer_tokens_per_s"]
    if peer:
        print(
            f"speculators Eagle3DraftModel, same process: {peer:.0f} tokens/s; ours {first / peer:.2f}x"
        )
    else:
        print(f"speculators not importable: published peer figure ~{PEER_TOKENS_PER_S:.0f} tokens/s "
              f"(sdpa); ours {first / PEER_TOKENS_PER_S:.2f}x of it (different load; see the environment line)")  # fmt: skip


if __name__ == "__main__":
    main()
