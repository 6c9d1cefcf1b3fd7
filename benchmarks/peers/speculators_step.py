"""Time one training step of vllm-project/speculators' Eagle3DraftModel (the peer), as JSON;
`--method eagle3.1` sets its fc_norm + norm_output flags, `--method peagle` runs its
PEagleDraftModel (COD over --k depths; embedding frozen as on our side, its default trains it).

Runs INSIDE the peer's own venv (benchmarks/peers/setup_speculators.sh), never eagle3kit's:

    PEER_PY benchmarks/peers/speculators_step.py --h 512 --heads 8 --inter 1536 --t 512 \
        --k 3 --v 8192 --vd 2048 [--batch 1] [--repeats 5] [--threads 2] \
        [--method eagle3|eagle3.1|peagle]                                   # one JSON document
    PEER_PY benchmarks/peers/speculators_step.py ... --serve    # one step per "step" stdin line

One step = its forward (its own TTT loop over --k steps, its default KL loss against the
verifier's head on the last hidden state), backward, clip_grad_norm 1.0, AdamW over the
parameters it leaves trainable: its model freezes the embedding, its draft lm_head (the
verifier's head cut to the draft vocab), the verifier head and norm (speculators/model.py), so
it trains fc, the decoder layer and the norms; ours also trains its lm_head, and the output
states both counts. The batch is packed into one row of B*T tokens with a document id
per sample, the layout its trainer feeds (speculators/models/eagle3/core.py, forward:
hidden_states [1, total_seq_len, 3H], document_ids, loss_mask, position_ids,
verifier_last_hidden_states). Attention: sdpa (its default, simple_flex_attention, needs a
compiled flex kernel that CPU torch does not run at speed). Inputs are random tensors of the
right shapes, as on our side of benchmarks/bench_train.py.

Output (one-shot): {"kind": "eagle3kit.peer_step", "schema": 1, "peer", "versions", "shape",
"trained_parameters", "tokens_per_step", "ttt_steps", "attention", "loss", "step_s": [...],
"tokens_per_s": {"median", "min", "max"}} after one warm-up step. --serve prints the same
header (without times) once ready, then {"step_s": s} for each "step" line it reads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import warnings

from _serve import (  # this folder's (the script's dir is on sys.path)
    header,
    serve,
    timed,
    train_step,
)

SHAPE = ("h", "heads", "inter", "t", "k", "v", "vd")


def classes(method: str):
    """(model class, config class, config extras) of speculators for --method: EAGLE-3, EAGLE
    3.1 (the same model with fc_norm + norm_output set, speculators' 3.1 flags) or P-EAGLE
    (PEagleDraftModel, its mask token the last id)."""
    if method == "peagle":
        from speculators.models.peagle import PEagleDraftModel, PEagleSpeculatorConfig

        return PEagleDraftModel, PEagleSpeculatorConfig, {}
    from speculators import Eagle3DraftModel, Eagle3SpeculatorConfig

    flags = {"fc_norm": True, "norm_output": True} if method == "eagle3.1" else {}
    return Eagle3DraftModel, Eagle3SpeculatorConfig, flags


def build(a: argparse.Namespace):
    """(step function, trained parameter count) for speculators' model of --method."""
    import torch
    from speculators import SpeculatorsConfig, VerifierConfig
    from speculators.losses import resolve_loss_config
    from speculators.proposals.greedy import GreedyTokenProposalConfig
    from transformers import LlamaConfig

    h, v, vd, t, k, b = a.h, a.v, a.vd, a.t, a.k, a.batch
    layer = LlamaConfig(
        hidden_size=h,
        intermediate_size=a.inter,
        num_hidden_layers=1,
        num_attention_heads=a.heads,
        num_key_value_heads=a.heads,
        head_dim=h // a.heads,
        vocab_size=v,
        max_position_embeddings=4 * t,
    )
    layer._attn_implementation = a.attention
    model_cls, config_cls, extra = classes(a.method)
    if a.method == "peagle":
        extra = {"mask_token_id": v - 1, "embed_requires_grad": False}  # frozen, as ours
    spec = SpeculatorsConfig(
        algorithm="peagle" if a.method == "peagle" else "eagle3",
        default_proposal_method="greedy",
        proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=k)],
        verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"]),
    )
    config = config_cls(
        transformer_layer_config=layer,
        draft_vocab_size=vd,
        eagle_aux_hidden_state_layer_ids=[2, 4, 5],
        speculators_config=spec,
        **extra,
    )
    torch.manual_seed(0)
    m = model_cls(config).float()
    used = torch.arange(vd) * (v // vd)  # the same draft vocab as our side: every (V/Vd)-th id
    t2d = torch.zeros(v, dtype=torch.bool)
    t2d[used] = True
    m.load_vocab_mappings(t2d, used - torch.arange(vd))
    with torch.no_grad():  # the verifier's weights, which its trainer loads (NaN until then)
        m.embed_tokens.weight.copy_(torch.randn(v, h) * 0.02)
        m.lm_head.weight.copy_(torch.randn(vd, h) * 0.02)
        m.verifier_lm_head.weight.copy_(torch.randn(vd, h) * 0.02)
    m.to(a.device).train()
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
    batch = {n: x.to(a.device) for n, x in batch.items()}
    # its default KL loss; "eager" is its non-Triton implementation (its fused one needs Triton)
    loss_config = resolve_loss_config("kl_div", "fused" if a.device.startswith("cuda") else "eager")
    params = [p for p in m.parameters() if p.requires_grad]
    if a.method == "peagle":  # COD over k depths (its defaults: ratio 0.7, floor 0.2)
        return train_step(m, params, lambda m: m(**batch, num_depths=k, loss_config=loss_config)[1])
    return train_step(m, params, lambda m: m(**batch, ttt_steps=k, loss_config=loss_config)[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in SHAPE:
        ap.add_argument(f"--{name}", type=int, required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--attention", default="sdpa")
    ap.add_argument("--method", choices=("eagle3", "eagle3.1", "peagle"), default="eagle3")
    ap.add_argument("--serve", action="store_true", help="time one step per 'step' stdin line")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    step, n_params = build(a)
    head = {
        **header(classes(a.method)[0].__name__, {n: getattr(a, n) for n in SHAPE}),
        "method": a.method,
        "batch": a.batch,
        "threads": a.threads,
        "trained_parameters": n_params,
        "tokens_per_step": a.batch * a.t,
        "ttt_steps": a.k,
        "attention": a.attention,
        "loss": "kl_div (eager)" if not a.device.startswith("cuda") else "kl_div (fused)",
    }
    step()  # warm-up: allocators, lazy init
    if a.serve:
        serve(head, step, a.device)
        return
    times = [timed(step, a.device) for _ in range(a.repeats)]
    toks = [a.batch * a.t / s for s in times]
    head["step_s"] = times
    head["tokens_per_s"] = {"median": statistics.median(toks), "min": min(toks), "max": max(toks)}
    print(json.dumps(head, indent=1))


if __name__ == "__main__":
    main()
