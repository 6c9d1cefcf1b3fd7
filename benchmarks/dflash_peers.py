"""Our DFlash checkpoint in the peers' models: strict load, same logits (fp32, CPU).

    python benchmarks/dflash_peers.py [--out benchmarks/results/dflash_peers.json]

eagle3kit writes a random DFlash drafter in z-lab's layout (Qwen3 shapes with GQA: H=64,
4 heads, 2 kv heads, 2 layers, 3 target layers, block 8, vocabulary 256) and random inputs
standing for a target (context states, embedding, lm_head). Each peer runs in its own venv
(benchmarks/peers/dflash_peer.py):

- zlab: the `dflash` package (z-lab's reference, PyPI) loads the directory itself
  (`DFlashDraftModel.from_pretrained`, strict) and runs a decoding-style pass;
  ours: `DFlashDrafter.from_pretrained` + the same pass.
- speculators: its DFlashDraftModel takes the same tensors with strict=True (plus the
  embedding/lm_head its layout adds from the target) and runs its training pass with its own
  random anchors; ours: the one-pass training forward (methods/dflash/train/step.py) on those
  anchors.

The result file holds the max |logit difference| per peer (pass: <= 1e-4), the versions and
the load reports. Peer venvs: $DFLASH_PY (default ~/.cache/eagle3kit-peers/dflash/bin/python),
$SPEC_PY (default ~/.cache/eagle3kit-peers/speculators/bin/python).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors.torch import load_file, save_file

from eagle3kit.methods.dflash.checkpoint.spec import DFlashSpec
from eagle3kit.methods.dflash.model import DFlashDrafter
from eagle3kit.methods.dflash.train.step import block_logits, blocks_at

HERE = Path(__file__).resolve().parent
PEERS = {
    "zlab": os.environ.get("DFLASH_PY", "~/.cache/eagle3kit-peers/dflash/bin/python"),
    "speculators": os.environ.get("SPEC_PY", "~/.cache/eagle3kit-peers/speculators/bin/python"),
}
TOL = 1e-4


def drafter() -> tuple[DFlashDrafter, torch.Tensor, torch.Tensor]:
    spec = DFlashSpec(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=256,
        draft_vocab_size=256,
        target_hidden_size=64,
        block_size=8,
        mask_token_id=255,
        target_layer_ids=(1, 4, 7),
        num_target_layers=10,
        dtype="float32",
    )
    torch.manual_seed(0)
    d = DFlashDrafter(spec)
    with torch.no_grad():  # norms away from 1 so a missed norm shows
        for n, p in d.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    emb, head = torch.randn(256, 64) * 0.5, torch.randn(256, 64) * 0.2
    d.target_io = (emb, head)
    return d.eval(), emb, head


def run_peer(peer: str, ckpt: Path, io: Path, out: Path) -> dict:
    py = str(Path(PEERS[peer]).expanduser())
    cmd = [py, str(HERE / "peers" / "dflash_peer.py"), peer, str(ckpt), str(io), str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{peer} failed:\n{r.stderr[-3000:]}")
    return json.loads(Path(str(out) + ".json").read_text())


def diffs(ours: DFlashDrafter, run, theirs: torch.Tensor) -> dict:
    """max |ours - theirs|, and the same with one of our tensors nudged (a control: the
    comparison must see a 1% change of one k_norm)."""
    same = float((run(ours) - theirs).abs().max())
    w = ours.layers[1].self_attn.k_norm.weight
    with torch.no_grad():
        w.mul_(1.01)
        control = float((run(ours) - theirs).abs().max())
        w.div_(1.01)
    return {"max_abs_diff": same, "control_max_abs_diff": control}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(HERE / "results" / "dflash_peers.json"))
    a = ap.parse_args()
    d, emb, head = drafter()
    g = torch.Generator().manual_seed(1)
    c, b, t = 12, d.spec.block_size, 40
    io = {
        "context": torch.randn(1, c, 3 * 64, generator=g),  # [1, C, 3H] the target's states
        "block_ids": torch.tensor([[17] + [255] * (b - 1)]),  # [x_m, mask x (B-1)]
        "position_ids": torch.arange(c + b)[None],
        "embed": emb,
        "lm_head": head,
        "aux": torch.randn(1, t, 3 * 64, generator=g),  # a training sequence
        "input_ids": torch.randint(0, 255, (1, t), generator=g),
        "anchors": torch.tensor(4),
        "seed": torch.tensor(3),
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = d.save_pretrained(Path(tmp) / "zlab-layout")
        ours = DFlashDrafter.from_pretrained(ckpt)  # what we wrote, read back
        ours.target_io = (emb, head)
        save_file(io, Path(tmp) / "io.safetensors")
        rep = run_peer("zlab", ckpt, Path(tmp) / "io.safetensors", Path(tmp) / "zlab.st")
        theirs = load_file(Path(tmp) / "zlab.st")["logits"]

        def decode_pass(m):
            with torch.no_grad():
                return m.logits(m(io["block_ids"], io["context"], io["position_ids"]))

        rows.append({**rep, "pass": "decode block", **diffs(ours, decode_pass, theirs)})
        rep = run_peer("speculators", ckpt, Path(tmp) / "io.safetensors", Path(tmp) / "spec.st")
        got = load_file(Path(tmp) / "spec.st")
        anchors = got["anchors"].view(1, -1)
        feats = SimpleNamespace(
            input_ids=io["input_ids"],
            aux=io["aux"],
            attention_mask=torch.ones(1, t, dtype=torch.bool),
            loss_mask=torch.ones(1, t, dtype=torch.bool),
        )
        blocks = blocks_at(feats, anchors, torch.ones_like(anchors, dtype=torch.bool), b, 255)

        def train_pass(m):
            with torch.no_grad():
                return block_logits(m, feats, blocks).view(1, -1, 256)

        rep["anchors"] = anchors[0].tolist()
        rows.append({**rep, "pass": "training blocks", **diffs(ours, train_pass, got["logits"])})
    for r in rows:
        r["ok"] = r["max_abs_diff"] <= TOL < r["control_max_abs_diff"]
    doc = {
        "kind": "eagle3kit.bench.dflash_peers",
        "method": "dflash",
        "command": "python benchmarks/dflash_peers.py",
        "tolerance": TOL,
        "dtype": "float32",
        "shape": {
            "hidden": 64,
            "heads": 4,
            "kv_heads": 2,
            "layers": 2,
            "target_layers": 3,
            "block_size": 8,
            "vocab": 256,
        },
        "ours": {"torch": torch.__version__, "python": sys.version.split()[0]},
        "peers": rows,
    }
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))
    if not all(r["ok"] for r in rows):
        raise SystemExit("a peer's logits differ from ours beyond the tolerance")


if __name__ == "__main__":
    main()
