"""Time one training step of vllm-project/speculators' DFlashDraftModel (the peer), as JSON.

Runs INSIDE the peer's own venv (benchmarks/peers/setup_speculators.sh), never eagle3kit's:

    PEER_PY benchmarks/peers/speculators_dflash_step.py --h 512 --heads 8 --inter 1536 \
        --layers 2 --aux 3 --t 512 --block 8 --anchors 32 --v 8192 [--serve]

One step = its forward (`DFlashDraftModel.forward`: `_backbone_forward` draws up to --anchors
anchors on the loss mask, builds the blocks of mask tokens and runs every block in one pass
with its block mask; `compute_metrics` takes its default loss, KL to the verifier's law from
`verifier_last_hidden_states` through its frozen verifier norm and head, with the exp(-(k-1)/γ)
position weights, γ = 4), backward, clip_grad_norm 1.0, AdamW over the parameters it leaves
trainable (speculators/models/dflash/core.py). Attention: sdpa (its flex kernel needs a
compiler on CPU). Inputs are random tensors of the right shapes, one packed row of T tokens.

--serve prints a header once its model is built and one warm-up step is done, then
{"step_s": s} for each "step" line it reads on stdin.
"""

from __future__ import annotations

import argparse
import json
import warnings

from _serve import header, serve, train_step  # this folder's (the script's dir is on sys.path)

SHAPE = ("h", "heads", "inter", "layers", "aux", "t", "block", "anchors", "v")


def build(a: argparse.Namespace):
    """(step function, trained parameter count) for speculators' DFlashDraftModel."""
    import torch
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.losses import resolve_loss_config
    from speculators.models.dflash import DFlashDraftModel, DFlashSpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import Qwen3Config

    h, v, t = a.h, a.v, a.t
    layer = Qwen3Config(
        hidden_size=h,
        intermediate_size=a.inter,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.heads,
        head_dim=h // a.heads,
        vocab_size=v,
        max_position_embeddings=4 * t,
    )
    layer._attn_implementation = "sdpa"
    conf = DFlashSpeculatorConfig(
        transformer_layer_config=layer,
        draft_vocab_size=v,
        block_size=a.block,
        aux_hidden_state_layer_ids=list(range(2, 2 + a.aux)),
        mask_token_id=v - 1,
        speculators_config=SpeculatorsConfig(
            algorithm="dflash",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=a.block - 1)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["Qwen3ForCausalLM"]),
        ),
    )
    torch.manual_seed(0)
    m = DFlashDraftModel(conf).float()
    with torch.no_grad():  # the verifier's weights, which its trainer loads
        for n, p in m.named_parameters():
            if n in ("embed_tokens.weight", "lm_head.weight", "verifier_lm_head.weight"):
                p.copy_(torch.randn(p.shape) * 0.02)
            if n == "verifier_norm.weight":
                p.fill_(1.0)
    m.train()
    warnings.filterwarnings("ignore", category=FutureWarning)
    g = torch.Generator().manual_seed(1)
    batch = dict(
        hidden_states=torch.randn(1, t, a.aux * h, generator=g),  # [1, T, n*H]
        input_ids=torch.randint(0, v - 1, (1, t), generator=g),  # [1, T]
        loss_mask=torch.ones(1, t, dtype=torch.long),  # [1, T]
        verifier_last_hidden_states=torch.randn(1, t, h, generator=g),  # [1, T, H]
        document_ids=torch.zeros(1, t, dtype=torch.long),  # [1, T]
        position_ids=torch.arange(t)[None],  # [1, T]
    )
    params = [p for p in m.parameters() if p.requires_grad]
    loss_config = resolve_loss_config("kl_div", "eager")  # its fused one needs Triton

    def loss_of(m):
        return m(**batch, max_anchors=a.anchors, gamma=4.0, loss_config=loss_config)[1]

    return train_step(m, params, loss_of)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in SHAPE:
        ap.add_argument(f"--{name}", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--serve", action="store_true")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    step, n_params = build(a)
    head = {
        **header("DFlashDraftModel", {n: getattr(a, n) for n in SHAPE}),
        "threads": a.threads,
        "trained_parameters": n_params,
        "tokens_per_step": a.t,
        "attention": "sdpa",
        "loss": "kl_div (eager) to verifier_lm_head(verifier_norm(last hidden)), exp decay gamma 4",
    }
    step()  # warm-up
    if a.serve:
        serve(head, step)
    else:
        print(json.dumps(head), flush=True)


if __name__ == "__main__":
    main()
