"""Run a peer's DFlash model on inputs eagle3kit wrote; write its logits (safetensors).

Runs INSIDE the peer's own venv, never eagle3kit's (benchmarks/dflash_peers.py drives it):

    DFLASH_PY  benchmarks/peers/dflash_peer.py zlab        CKPT IO OUT   # the `dflash` package
    SPEC_PY    benchmarks/peers/dflash_peer.py speculators CKPT IO OUT   # vllm-project/speculators

zlab: `dflash.model.DFlashDraftModel.from_pretrained(CKPT)` (z-lab's layout as eagle3kit
wrote it), refused unless transformers reports no missing, unexpected or mismatched tensor;
one decoding-style pass: `forward(position_ids, noise_embedding=embed(block), target_hidden=
context)`, then the target's lm_head (IO's `lm_head`), as z-lab's `dflash_generate` does.

speculators: its `DFlashDraftModel(DFlashSpeculatorConfig)` built from CKPT's config (its
`aux_hidden_state_layer_ids` = z-lab ids + 1, its converter's rule), `load_state_dict(strict=
True)` of CKPT's tensors plus what its layout adds from the target (embed_tokens, lm_head,
verifier_lm_head, verifier_norm); one training-style pass, `_backbone_forward` over IO's
sequence with anchors drawn by its own `select_anchors` (seeded), returning its logits and the
anchors it drew, for eagle3kit to run its one-pass training forward on the same anchors.

OUT: {"logits": [...], "anchors": [...] (speculators)} as safetensors, and OUT.json with the
load report and versions.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def zlab(ckpt: str, io: dict) -> tuple[dict, dict]:
    from dflash.model import DFlashDraftModel

    m, info = DFlashDraftModel.from_pretrained(ckpt, output_loading_info=True, dtype=torch.float32)
    bad = {k: list(v) for k, v in info.items() if k != "error_msgs" and v}
    if bad:
        raise SystemExit(f"{ckpt}: not a strict load into z-lab's DFlashDraftModel: {bad}")
    m.eval()
    with torch.no_grad():
        emb = torch.nn.functional.embedding(io["block_ids"], io["embed"])  # [1, B, H]
        hidden = m(
            position_ids=io["position_ids"],
            noise_embedding=emb,
            target_hidden=io["context"],
        )  # [1, B, H]
        logits = hidden @ io["lm_head"].T  # [1, B, V]
    report = {
        "peer": "dflash",
        "version": version("dflash"),
        "load": "strict (no missing, unexpected or mismatched tensors)",
        "class": type(m).__module__ + ".DFlashDraftModel",
    }
    return {"logits": logits.contiguous()}, report


def speculators(ckpt: str, io: dict) -> tuple[dict, dict]:
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.dflash import DFlashDraftModel, DFlashSpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import Qwen3Config

    cfg = json.loads((Path(ckpt) / "config.json").read_text())
    dc = cfg["dflash_config"]
    keys = (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "rms_norm_eps",
        "rope_theta",
        "max_position_embeddings",
        "attention_bias",
    )
    layer = Qwen3Config(**{k: cfg[k] for k in keys})
    layer._attn_implementation = "sdpa"  # its default flex kernel needs a compiler on CPU
    b = cfg["block_size"]
    conf = DFlashSpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=cfg["vocab_size"],
        block_size=b,
        aux_hidden_state_layer_ids=[i + 1 for i in dc["target_layer_ids"]],
        mask_token_id=dc["mask_token_id"],
        speculators_config=SpeculatorsConfig(
            algorithm="dflash",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=b - 1)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["Qwen3ForCausalLM"]),
        ),
    )
    m = DFlashDraftModel(conf).float()
    ours = load_file(str(Path(ckpt) / "model.safetensors"))
    from_target = {
        "embed_tokens.weight": io["embed"],
        "lm_head.weight": io["lm_head"],
        "verifier_lm_head.weight": io["lm_head"],
        "verifier_norm.weight": torch.ones(cfg["hidden_size"]),
    }
    own = set(m.state_dict())
    added = {k: v for k, v in from_target.items() if k in own}
    m.load_state_dict({**ours, **added}, strict=True)
    m.eval()
    t = io["input_ids"].shape[1]
    torch.manual_seed(int(io["seed"]))
    with torch.no_grad():
        _, logits, _, _, idx = m._backbone_forward(
            hidden_states=io["aux"],
            input_ids=io["input_ids"],
            loss_mask=torch.ones(1, t, dtype=torch.long),
            verifier_last_hidden_states=torch.zeros(1, t, cfg["hidden_size"]),
            document_ids=torch.zeros(1, t, dtype=torch.long),
            max_anchors=int(io["anchors"]),
        )
    report = {
        "peer": "speculators",
        "version": version("speculators"),
        "load": "load_state_dict(strict=True)",
        "added_from_target": sorted(added),
        "attention": "sdpa",
    }
    return {"logits": logits.contiguous(), "anchors": idx[::b].contiguous()}, report


def main() -> None:
    peer, ckpt, io_path, out = sys.argv[1:5]
    io = load_file(io_path)
    tensors, report = {"zlab": zlab, "speculators": speculators}[peer](ckpt, io)
    report["versions"] = {"torch": torch.__version__, "transformers": version("transformers")}
    save_file(tensors, out)
    Path(out + ".json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
