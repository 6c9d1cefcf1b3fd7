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

When vllm-project/speculators is importable (written against 0.9.0), its Eagle3DraftModel
trains on the same shapes in the same process (its own TTT loop, sdpa attention), in steps
alternating with a fresh copy of ours so both see the same host load, and is printed beside
ours with the median per-pair ratio; otherwise the published peer figure for this machine kind
(about 1,375 tokens/s with sdpa attention) is quoted.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))

PEER_TOKENS_PER_S = 1375.0  # speculators Eagle3DraftModel, sdpa, this machine kind (issue 11)
SHAPES = {
    "issue (H=512, T=512, k=3, V=8192, Vd=2048)": dict(
        h=512, heads=8, inter=1536, t=512, k=3, v=8192, vd=2048
    ),
    "zoo dsv3/llama (H=128, T=512, k=7, V=4096, Vd=2048)": dict(
        h=128, heads=2, inter=352, t=512, k=7, v=4096, vd=2048
    ),
}


def make(shape: dict, b: int, device: str):
    import torch

    from eagle3kit.core.spec import DraftSpec
    from eagle3kit.model.drafter import Eagle3Drafter

    h, v, vd, t = shape["h"], shape["v"], shape["vd"], shape["t"]
    spec = DraftSpec(
        hidden_size=h,
        intermediate_size=shape["inter"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["heads"],
        head_dim=h // shape["heads"],
        vocab_size=v,
        draft_vocab_size=vd,
        target_hidden_size=h,
        aux_layers=(2, 4, 5),
        dtype="float32",
    )
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


def ours_step(shape: dict, b: int, device: str):
    """One training step of our drafter on `shape`: ttt_loss forward, backward, clip, AdamW."""
    import torch

    from eagle3kit.train.ttt import ttt_loss

    m, f = make(shape, b, device)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)

    def step() -> None:
        loss, _ = ttt_loss(m, f, shape["k"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def timed(step, device: str) -> float:
    """Wall seconds of one call of `step`."""
    import torch

    t0 = time.perf_counter()
    step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def time_ours(shape: dict, b: int, repeats: int, device: str) -> list[float]:
    step = ours_step(shape, b, device)
    return [timed(step, device) for _ in range(repeats + 1)][1:]  # step 1 warms up allocators


def peer_step(shape: dict, b: int, device: str = "cpu"):
    """One training step of speculators' Eagle3DraftModel on `shape`, when installed (else None).

    Written against speculators 0.9.0. One step = its forward (its own TTT loop over
    shape["k"] steps, its default KL loss against a frozen verifier head), backward, clip,
    AdamW over the parameters it leaves trainable (embedding and lm_head frozen). Sequences
    are packed into one row of B*T with a document id each, the layout its trainer feeds;
    sdpa attention.
    """
    try:
        import speculators  # noqa: F401
    except ImportError:
        return None
    import torch
    from speculators import (
        Eagle3DraftModel,
        Eagle3SpeculatorConfig,
        SpeculatorsConfig,
        VerifierConfig,
    )
    from speculators.losses import resolve_loss_config
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    h, v, vd, t, k = shape["h"], shape["v"], shape["vd"], shape["t"], shape["k"]
    layer = LlamaConfig(
        hidden_size=h,
        intermediate_size=shape["inter"],
        num_hidden_layers=1,
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["heads"],
        head_dim=h // shape["heads"],
        vocab_size=v,
        max_position_embeddings=4 * t,
    )
    layer._attn_implementation = "sdpa"
    spec = SpeculatorsConfig(
        algorithm="eagle3",
        default_proposal_method="greedy",
        proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=k)],
        verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"]),
    )
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=vd,
        eagle_aux_hidden_state_layer_ids=[2, 4, 5],
        speculators_config=spec,
    )
    torch.manual_seed(0)
    m = Eagle3DraftModel(config).float()
    used = torch.arange(vd) * (v // vd)
    t2d = torch.zeros(v, dtype=torch.bool)
    t2d[used] = True
    m.load_vocab_mappings(t2d, used - torch.arange(vd))
    with torch.no_grad():  # the verifier's weights, which its trainer loads (NaN until then)
        m.embed_tokens.weight.copy_(torch.randn(v, h) * 0.02)
        m.lm_head.weight.copy_(torch.randn(vd, h) * 0.02)
        m.verifier_lm_head.weight.copy_(torch.randn(vd, h) * 0.02)
    m.to(device).train()
    warnings.filterwarnings("ignore", "`past_key_values` is deprecated", FutureWarning)
    g = torch.Generator().manual_seed(1)
    batch = dict(
        hidden_states=torch.randn(1, b * t, 3 * h, generator=g),  # [1, B*T, 3H]
        input_ids=torch.randint(0, v, (1, b * t), generator=g),  # [1, B*T]
        document_ids=torch.arange(b).repeat_interleave(t)[None],  # [1, B*T]
        loss_mask=torch.ones(1, b * t, dtype=torch.bool),  # [1, B*T]
        position_ids=torch.arange(t).repeat(b)[None],  # [1, B*T]
        verifier_last_hidden_states=torch.randn(1, b * t, h, generator=g),  # [1, B*T, H]
    )
    batch = {n: x.to(device) for n, x in batch.items()}
    # its default KL loss; "eager" is its non-Triton implementation (its fused one needs Triton)
    loss_config = resolve_loss_config("kl_div", "fused" if device.startswith("cuda") else "eager")
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)

    def step() -> None:
        _, loss, _ = m(**batch, ttt_steps=k, loss_config=loss_config)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def time_peer(shape: dict, b: int, repeats: int, device: str = "cpu") -> list[float] | None:
    """Per-step wall seconds of speculators' Eagle3DraftModel on `shape` (None if not installed)."""
    step = peer_step(shape, b, device)
    if step is None:
        return None
    return [timed(step, device) for _ in range(repeats + 1)][1:]  # step 1 warms up allocators


def time_pair(
    shape: dict, b: int, repeats: int, device: str
) -> tuple[list[float], list[float]] | None:
    """Ours and the peer in alternating steps, so both see the same host load (None: no peer).

    The host's speed swings several-fold within minutes; timed one after the other, the ratio
    would measure the swing. Returns (our step times, the peer's), pair i run back to back.
    """
    peer = peer_step(shape, b, device)
    if peer is None:
        return None
    ours = ours_step(shape, b, device)
    ours(), peer()  # warm-up
    pairs = [(timed(ours, device), timed(peer, device)) for _ in range(repeats)]
    return [o for o, _ in pairs], [p for _, p in pairs]


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
            m(
                torch.zeros(1, context, dtype=torch.long),
                torch.randn(1, context, s.fc_in_features),
                cache,
                from_aux=True,
            )
            h = torch.randn(1, 1, s.hidden_size)  # [1, 1, H]
            t0 = time.perf_counter()
            for _ in range(10):
                out = m(torch.zeros(1, 1, dtype=torch.long), h, cache, from_aux=False)
                h = out.hidden
            times.append((time.perf_counter() - t0) / 10 * 1e3)
    times = times[1:]
    return {
        "path": path,
        "attention": getattr(s, "attention", "mha"),
        "context": context,
        "params": sum(p.numel() for n, p in m.named_parameters() if n != "embed_tokens.weight"),
        "ms_median": statistics.median(times),
        "ms_min": min(times),
        "ms_max": max(times),
    }


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
            print(
                f"{r['path']} ({r['attention']}, {r['params'] / 1e6:.2f}M params): draft step "
                f"{r['ms_median']:.2f} ms (min {r['ms_min']:.2f}, max {r['ms_max']:.2f}) at context {r['context']}"
            )
        return
    gflops = matmul_gflops()
    rows = []
    for name, shape in SHAPES.items():
        times = time_ours(shape, a.batch, a.repeats, a.device)
        toks = [a.batch * shape["t"] / s for s in times]
        rows.append(
            {
                "shape": name,
                "batch": a.batch,
                **shape,
                "tokens_per_s": {
                    "median": statistics.median(toks),
                    "min": min(toks),
                    "max": max(toks),
                },
                "step_s_median": statistics.median(times),
                "peak_memory_mb": peak_mb(a.device),
            }
        )
    # the peer runs after ours (our rows' peak RSS excludes it), in steps alternating with ours
    for r, shape in zip(rows, SHAPES.values(), strict=True):
        pair = time_pair(shape, a.batch, a.repeats, a.device)
        r["peer"] = None
        if pair is not None:
            ours, peer = pair
            n = a.batch * shape["t"]
            r["peer"] = {
                "tokens_per_s": n / statistics.median(peer),
                "step_s": peer,
                "ours_tokens_per_s": n / statistics.median(ours),
                "ours_step_s": ours,
                "ours_over_peer": statistics.median(p / o for o, p in zip(ours, peer, strict=True)),
            }
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
        print(
            f"{r['shape']}: {t['median']:.0f} tokens/s (min {t['min']:.0f}, max {t['max']:.0f}; "
            f"{a.repeats} steps of {r['batch']}x{r['t']}), step {r['step_s_median']:.2f} s, "
            f"peak RSS {r['peak_memory_mb']:.0f} MB"
        )
    first = rows[0]["tokens_per_s"]["median"]
    if rows[0]["peer"]:
        for r in rows:
            p = r["peer"]
            print(
                f"speculators Eagle3DraftModel, same process, {r['shape']}: {p['tokens_per_s']:.0f} tokens/s "
                f"(step {statistics.median(p['step_s']):.2f} s, min {min(p['step_s']):.2f}, max {max(p['step_s']):.2f}); "
                f"ours in the same alternating steps {p['ours_tokens_per_s']:.0f} tokens/s; "
                f"ours/peer {p['ours_over_peer']:.2f}x (median over {a.repeats} step pairs)"
            )
    else:
        print(
            f"speculators not importable: published peer figure ~{PEER_TOKENS_PER_S:.0f} tokens/s "
            f"(sdpa); ours {first / PEER_TOKENS_PER_S:.2f}x of it (different load; see the environment line)"
        )


if __name__ == "__main__":
    main()
