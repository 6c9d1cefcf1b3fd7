"""The --serve side of the peers' step scripts (speculators_step.py,
speculators_dflash_step.py), run in the peer's venv: the line protocol that
benchmarks/bench_train.py's `PeerSteps` speaks.

    peer -> {header JSON}        once its model is built and one warm-up step is done
    bench -> step                 per step to time
    peer -> {"step_s": s}
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version


def train_step(model, params: list, loss_of):
    """(step, trained parameter count): one step = `loss_of(model)`'s backward,
    clip_grad_norm 1.0, AdamW (lr 1e-4) over `params`, the peers' step on both sides."""
    import torch

    opt = torch.optim.AdamW(params, lr=1e-4)

    def step() -> None:
        loss_of(model).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, sum(p.numel() for p in params)


def header(peer: str, shape: dict) -> dict:
    """The first keys of the document a peer prints once ready: what ran (speculators'
    class `peer`), the versions, the shape; each script adds its own after them."""
    return {
        "kind": "eagle3kit.peer_step",
        "schema": 1,
        "peer": f"vllm-project/speculators {peer}",
        "versions": {p: version(p) for p in ("speculators", "torch", "transformers")},
        "shape": shape,
    }


def timed(step, device: str = "cpu") -> float:
    """Seconds one `step()` takes (CUDA work waited for)."""
    t0 = time.perf_counter()
    step()
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    return time.perf_counter() - t0


def serve(head: dict, step, device: str = "cpu") -> None:
    """Print `head`, then time one step per "step" line read on stdin."""
    print(json.dumps(head), flush=True)
    for line in sys.stdin:
        if line.strip() == "step":
            print(json.dumps({"step_s": timed(step, device)}), flush=True)
