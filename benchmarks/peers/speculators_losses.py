"""The training losses as speculators' own code computes them, for tests/test_loss_methods.py.

Runs INSIDE the speculators venv (benchmarks/peers/setup_speculators.sh), never eagle3kit's:

    SPEC_PY benchmarks/peers/speculators_losses.py

writes tests/fixtures/peer-losses/speculators-<version>.safetensors and .json beside it (not
under tests/fixtures/peers/, which holds drafters only).
Inputs (torch seed 1234, float32, [1, T, V] with T = 8, V = 11): draft logits `logits`
(standard normal x 2) and target logits `targets` (standard normal x 3, so some laws are
peaked), and a weight per position `w` (uniform). For each loss of
`speculators.losses.utils._EAGER_LOSS_FN_MAP` (the eager reference implementations,
`speculators/losses/eager.py`): its per-position values `<name>.value` [1, T] and the
gradient of sum(w * value) with respect to the draft logits, `<name>.grad` [1, T, V].
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import torch
from safetensors.torch import save_file
from speculators.losses.utils import _EAGER_LOSS_FN_MAP

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "peer-losses"
SEED, T, V = 1234, 8, 11


def main() -> None:
    g = torch.Generator().manual_seed(SEED)
    logits = torch.randn(1, T, V, generator=g) * 2
    targets = torch.randn(1, T, V, generator=g) * 3
    w = torch.rand(1, T, generator=g)
    out = {"logits": logits, "targets": targets, "w": w}
    for name, fn in sorted(_EAGER_LOSS_FN_MAP.items()):
        x = logits.clone().requires_grad_()
        value = fn(x, targets)
        (value * w).sum().backward()
        out[f"{name}.value"], out[f"{name}.grad"] = value.detach(), x.grad
    stem = OUT / f"speculators-{version('speculators')}"
    save_file({k: v.contiguous() for k, v in out.items()}, f"{stem}.safetensors")
    doc = {
        "kind": "eagle3kit.peer_fixture",
        "schema": 1,
        "peer": "speculators",
        "version": version("speculators"),
        "versions": {"speculators": version("speculators"), "torch": torch.__version__},
        "what": "per-position training losses and their gradients, eager implementations",
        "made_by": {
            "command": "SPEC_PY benchmarks/peers/speculators_losses.py",
            "path": "speculators/losses/utils.py _EAGER_LOSS_FN_MAP -> losses/eager.py",
            "seed": SEED,
            "inputs": "logits randn*2, targets randn*3, w rand; [1, 8, 11] float32",
        },
        "losses": sorted(_EAGER_LOSS_FN_MAP),
    }
    Path(f"{stem}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {stem}.safetensors: {', '.join(sorted(_EAGER_LOSS_FN_MAP))}")


if __name__ == "__main__":
    main()
