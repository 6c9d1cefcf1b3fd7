"""Drafter training throughput: tokens/s and peak memory of one TTT optimizer step on CPU.

    python benchmarks/bench_train.py [--repeats 5] [--threads 2] [--json] [--setup-peer]
                                     [--method eagle3|eagle3.1|peagle]
                                     [--out benchmarks/results/bench_train.json]
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

The peer, vllm-project/speculators' Eagle3DraftModel, runs for real in its own venv
(benchmarks/peers/: `bash benchmarks/peers/setup_speculators.sh` builds it, or pass
--setup-peer), on the same shapes (its own TTT loop, sdpa attention), in steps alternating with
a fresh copy of ours so both see the same host load; it is printed beside ours with the median
per-pair ratio and the work each step does (tokens, TTT steps, trained parameters). A peer that
cannot run is reported as not run, with the reason; no figure stands in for it.

`--method eagle3.1` sets fc_norm + norm_output on both sides (ours: DraftSpec flags; the peer:
the same Eagle3DraftModel with its 3.1 flags). `--method peagle` times P-EAGLE's step on both
sides: ours `methods/peagle/train.py` `cod_loss` (the drafter warm-started from the same EAGLE-3 one
with `mask_hidden` added), the peer's PEagleDraftModel forward; k is the number of depths, COD
at ratio 0.7 and floor 0.2 on both, each side drawing its own subsets (about
T x (1 + sum_d max(0.7^d, 0.2)) elements per step), batch 1 (speculators packs P-EAGLE into
one row), the embedding frozen on both (speculators trains it by default for P-EAGLE).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))

SHAPES = {
    "issue (H=512, T=512, k=3, V=8192, Vd=2048)": dict(
        h=512, heads=8, inter=1536, t=512, k=3, v=8192, vd=2048
    ),
    "zoo dsv3/llama (H=128, T=512, k=7, V=4096, Vd=2048)": dict(
        h=128, heads=2, inter=352, t=512, k=7, v=4096, vd=2048
    ),
}


def make(shape: dict, b: int, device: str, method: str = "eagle3"):
    import torch

    from eagle3kit.core.spec import DraftSpec
    from eagle3kit.methods.peagle.model import PEagleDrafter
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
        fc_norm=method == "eagle3.1",
        norm_output=method == "eagle3.1",
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
    if method == "peagle":  # the warm start train --method peagle does: mask_hidden added
        m = PEagleDrafter.from_eagle3(m, v - 1)
    return m, feats


def passes(shape: dict, method: str) -> float:
    """Drafter passes over the T tokens one step makes: k TTT steps, or P-EAGLE's COD
    elements / T (1 + sum over depths 1..k-1 of max(0.7^d, 0.2), n ~ T)."""
    if method != "peagle":
        return shape["k"]
    return 1 + sum(max(0.7**d, 0.2) for d in range(1, shape["k"]))


def ours_step(shape: dict, b: int, device: str, method: str = "eagle3"):
    """One training step of our drafter on `shape`: ttt_loss (P-EAGLE: cod_loss, the loss
    divided by its count as the trainer does) forward, backward, clip, AdamW."""
    import torch

    from eagle3kit.methods.peagle.train import cod_loss
    from eagle3kit.train.ttt import ttt_loss

    m, f = make(shape, b, device, method)
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)

    def step() -> None:
        if method == "peagle":
            s, n = cod_loss(m, f, shape["k"])
            loss = s / n.clamp(min=1)
        else:
            loss, _ = ttt_loss(m, f, shape["k"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def step_gflop(shape: dict, b: int, device: str, method: str = "eagle3") -> float:
    """GFLOP of one step as 6 x trained parameters x tokens x passes (forward 2, backward
    4 per weight and token; attention's quadratic part left out, so a lower bound)."""
    m, _ = make(shape, b, device, method)
    n = sum(p.numel() for p in m.parameters() if p.requires_grad)
    return 6 * n * b * shape["t"] * passes(shape, method) / 1e9


def timed(step, device: str) -> float:
    """Wall seconds of one call of `step`."""
    import torch

    t0 = time.perf_counter()
    step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def time_ours(shape: dict, b: int, repeats: int, device: str, method: str) -> list[float]:
    step = ours_step(shape, b, device, method)
    return [timed(step, device) for _ in range(repeats + 1)][1:]  # step 1 warms up allocators


PEERS = Path(__file__).parent / "peers"


def peer_python() -> tuple[str | None, str]:
    """(the peer venv's python, "") or (None, why there is none).

    $EAGLE3KIT_PEER_PYTHON names it; else the venv benchmarks/peers/setup_speculators.sh makes
    ($EAGLE3KIT_PEERS or ~/.cache/eagle3kit-peers, /speculators), once its ready stamp exists.
    """
    if os.environ.get("EAGLE3KIT_PEER_PYTHON"):
        return os.environ["EAGLE3KIT_PEER_PYTHON"], ""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    root = os.environ.get("EAGLE3KIT_PEERS") or Path(cache) / "eagle3kit-peers"
    venv = Path(root) / "speculators"
    if not (venv / ".eagle3kit-ready").is_file():
        return None, (
            f"no peer venv at {venv} (run `bash benchmarks/peers/setup_speculators.sh`, "
            "or pass --setup-peer)"
        )
    return str(venv / "bin" / "python"), ""


def setup_peer() -> str:
    """Run benchmarks/peers/setup_speculators.sh (pip, minutes the first time); "" or why not."""
    script = str(PEERS / "setup_speculators.sh")
    r = subprocess.run(["bash", script], capture_output=True, text=True)
    return "" if r.returncode == 0 else f"setup_speculators.sh failed: {r.stderr.strip()[-300:]}"


class PeerSteps:
    """A peer's step script (benchmarks/peers/) with --serve in the peer's venv: `step()` times
    one of its steps there; `head` is the header it printed once ready."""

    def __init__(self, python: str, script: str, args: list[str]) -> None:
        self.err = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            [python, str(PEERS / script), *args, "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
        )
        self.head = self._read()  # after its model is built and one warm-up step is done

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            self.err.seek(0)
            tail = self.err.read().strip().splitlines()[-3:]
            raise RuntimeError(f"peer exited {self.proc.returncode}: {' | '.join(tail)}")
        return json.loads(line)

    def step(self) -> float:
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()
        return float(self._read()["step_s"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        self.err.close()


def time_pair(
    shape: dict, b: int, repeats: int, device: str, threads: int, method: str = "eagle3"
) -> dict:
    """Ours and the peer in alternating steps, so both see the same host load.

    The host's speed swings several-fold within minutes; timed one after the other, the ratio
    would measure the swing. The peer runs in its own venv (benchmarks/peers/), one step per
    request; pair i is our step then its step, back to back. Returns {"ran": False, "reason"}
    when the peer cannot run: no figure stands in for it.
    """
    python, why = peer_python()
    if python is None:
        return {"ran": False, "reason": why}
    try:
        args = [f"--{n}={shape[n]}" for n in ("h", "heads", "inter", "t", "k", "v", "vd")]
        args += [f"--batch={b}", f"--device={device}", f"--threads={threads}"]
        args += [f"--method={method}"]
        peer = PeerSteps(python, "speculators_step.py", args)
    except (OSError, RuntimeError, ValueError) as e:
        return {"ran": False, "reason": str(e)}
    try:
        ours = ours_step(shape, b, device, method)
        ours()  # warm-up (the peer warmed up before answering)
        pairs = [(timed(ours, device), peer.step()) for _ in range(repeats)]
    except (OSError, RuntimeError, ValueError) as e:
        return {"ran": False, "reason": str(e)}
    finally:
        peer.close()
    m, _ = make(shape, b, device, method)
    n = b * shape["t"]
    o_s, p_s = [o for o, _ in pairs], [p for _, p in pairs]
    h = peer.head
    return {
        "ran": True,
        "peer": h["peer"],
        "versions": h["versions"],
        "attention": h["attention"],
        "loss": h["loss"],
        "method": h.get("method", "eagle3"),
        "equal_work": {
            "tokens_per_step": {"ours": n, "peer": h["tokens_per_step"]},
            "ttt_steps": {"ours": shape["k"], "peer": h["ttt_steps"]},
            "trained_parameters": {
                "ours": sum(p.numel() for p in m.parameters() if p.requires_grad),
                "peer": h["trained_parameters"],
            },
        },
        "tokens_per_s": _spread([h["tokens_per_step"] / s for s in p_s]),
        "step_s": p_s,
        "ours_tokens_per_s": _spread([n / s for s in o_s]),
        "ours_step_s": o_s,
        "ours_over_peer": statistics.median(p / o for o, p in pairs),
    }


def peer_line(r: dict, repeats: int) -> str:
    """One row's peer result in words: its speed beside ours and the work, or why not run."""
    p = r["peer"]
    if not p["ran"]:
        return f"peer (speculators Eagle3DraftModel), {r['shape']}: not run: {p['reason']}"
    w, t, s = p["equal_work"], p["tokens_per_s"], p["step_s"]
    return (
        f"peer {p['peer']} {p['versions']['speculators']}, own venv, {r['shape']}: "
        f"{t['median']:.0f} tokens/s (min {t['min']:.0f}, max {t['max']:.0f}; step "
        f"{statistics.median(s):.2f} s); ours in the same alternating steps "
        f"{p['ours_tokens_per_s']['median']:.0f} tokens/s; ours/peer {p['ours_over_peer']:.2f}x "
        f"(median over {repeats} step pairs). Work per step, ours/peer: tokens "
        f"{w['tokens_per_step']['ours']}/{w['tokens_per_step']['peer']}, TTT steps "
        f"{w['ttt_steps']['ours']}/{w['ttt_steps']['peer']}, trained parameters "
        f"{w['trained_parameters']['ours']:,}/{w['trained_parameters']['peer']:,}"
    )


def _spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


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
    ap.add_argument("--method", choices=("eagle3", "eagle3.1", "peagle"), default="eagle3")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--draft-step", nargs="+", metavar="DRAFTER", help="time draft steps instead")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--setup-peer", action="store_true", help="build the peer's venv first")
    ap.add_argument("--out", help="also write the result JSON here (benchmarks/results/...)")
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
                f"{r['ms_median']:.2f} ms (min {r['ms_min']:.2f}, max {r['ms_max']:.2f}) at "
                f"context {r['context']}"
            )
        return
    gflops = matmul_gflops()
    rows = []
    for name, shape in SHAPES.items():
        times = time_ours(shape, a.batch, a.repeats, a.device, a.method)
        toks = [a.batch * shape["t"] / s for s in times]
        work = step_gflop(shape, a.batch, a.device, a.method)
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
                "step_gflop": work,
                "fraction_of_matmul": work / statistics.median(times) / gflops,
            }
        )
    # the peer runs after ours (our rows' peak RSS excludes it), in steps alternating with ours
    why = setup_peer() if a.setup_peer else ""
    for r, shape in zip(rows, SHAPES.values(), strict=True):
        if why:
            r["peer"] = {"ran": False, "reason": why}
        else:
            r["peer"] = time_pair(shape, a.batch, a.repeats, a.device, a.threads, a.method)
    doc = {
        "method": a.method,
        "env": environment_info(),
        "rows": rows,
        "matmul_gflops": gflops,
    }
    if a.out:
        from _results import write_result

        write_result(a.out, "eagle3kit.bench_train", doc)
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
            f"peak RSS {r['peak_memory_mb']:.0f} MB; {r['step_gflop']:.1f} GFLOP/step (6 x "
            f"params x tokens x passes) = {100 * r['fraction_of_matmul']:.0f}% of the "
            "matmul speed"
        )
    for r in rows:
        print(peer_line(r, a.repeats))


if __name__ == "__main__":
    main()
