"""Logits of vllm-project/speculators' own models on inputs we give it (the peer side of
benchmarks/peer_logits.py). Runs INSIDE the peer's venv (benchmarks/peers/setup_speculators.sh):

    PEER_PY benchmarks/peers/speculators_logits.py --drafter DIR --inputs IN.safetensors \
        --out OUT.safetensors --mode eagle3|peagle [--k 3]

DIR is a drafter eagle3kit wrote in speculators' layout (config.json + model.safetensors). The
model is built from that config by speculators' own classes (Eagle3DraftModel, or
PEagleDraftModel for speculators_model_type "peagle") and loaded with load_state_dict; the only
keys allowed to be missing are the embedding (given in IN: the target's, which eagle3kit never
stores) and the verifier's head and norm (used only for the loss); an unexpected key fails.

IN holds input_ids [1, T] (already shifted as speculators' data is: position t holds x[t+1],
the token the drafter reads with aux[t]), hidden_states [1, T, 3H], position_ids [1, T],
embed_tokens [V, H]; for peagle also anchor [N] and depth [N], the sampled elements.

eagle3: its forward with ttt_steps=k (its own TTT loop, teacher-forced: step i reads x[t+1+i]
and the previous step's hidden, normed when norm_output) and no verifier state; the logits of
each step are read by a forward hook on lm_head (the forward returns only argmax tokens).
peagle: its training forward with its COD sampler replaced by the given (anchor, depth), so
both sides score the same elements; the one lm_head call is hooked.

OUT: logits_0..logits_{k-1} [1, T, Vd] (eagle3) or logits [1, N, Vd] (peagle), and a JSON
metadata entry with the versions and the load report.
"""

from __future__ import annotations

import argparse
import json
from importlib.metadata import version


def load(drafter: str, mode: str, embed):
    import torch
    from safetensors.torch import load_file

    if mode == "peagle":
        from speculators.models.peagle import PEagleDraftModel as cls
        from speculators.models.peagle import PEagleSpeculatorConfig as cfg_cls
    else:
        from speculators.models.eagle3 import Eagle3DraftModel as cls
        from speculators.models.eagle3 import Eagle3SpeculatorConfig as cfg_cls
    cfg = cfg_cls.from_pretrained(drafter)
    cfg.transformer_layer_config._attn_implementation = "eager"  # noqa: SLF001 (dense masks)
    torch.manual_seed(0)
    m = cls(cfg).float().eval()
    sd = load_file(f"{drafter}/model.safetensors")
    missing, unexpected = m.load_state_dict(sd, strict=False)
    allowed = {"embed_tokens.weight", "verifier_norm.weight", "verifier_lm_head.weight"}
    if unexpected or set(missing) - allowed:
        raise SystemExit(f"not a strict load: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        m.embed_tokens.weight.copy_(embed)
    return m, {"missing": sorted(missing), "unexpected": sorted(unexpected)}


def main() -> None:
    import torch
    from safetensors.torch import load_file, save_file

    ap = argparse.ArgumentParser()
    ap.add_argument("--drafter", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", choices=("eagle3", "peagle"), default="eagle3")
    ap.add_argument("--k", type=int, default=3)
    a = ap.parse_args()
    x = load_file(a.inputs)
    m, report = load(a.drafter, a.mode, x["embed_tokens"])
    seen = []
    m.lm_head.register_forward_hook(lambda _mod, _inp, out: seen.append(out.detach().clone()))
    t = x["input_ids"].shape[1]
    doc = torch.zeros(1, t, dtype=torch.long)
    with torch.no_grad():
        if a.mode == "eagle3":
            m(
                hidden_states=x["hidden_states"],
                input_ids=x["input_ids"],
                document_ids=doc,
                position_ids=x["position_ids"],
                ttt_steps=a.k,
            )
            out = {f"logits_{i}": s.contiguous() for i, s in enumerate(seen)}
        else:
            import speculators.models.peagle.core as core
            from speculators.losses import resolve_loss_config

            core.generate_cod_sample_indices = lambda **_kw: (x["anchor"], x["depth"])
            h = m.config.transformer_layer_config.hidden_size
            m(
                hidden_states=x["hidden_states"],
                input_ids=x["input_ids"],
                document_ids=doc,
                position_ids=x["position_ids"],
                loss_mask=torch.ones(1, t),
                verifier_last_hidden_states=torch.zeros(1, t, h),
                num_depths=a.k,
                loss_config=resolve_loss_config("kl_div", "eager"),  # fused needs Triton
            )
            out = {"logits": seen[0].contiguous()}
    meta = {
        "versions": {p: version(p) for p in ("speculators", "torch", "transformers")},
        "load": report,
        "lm_head_calls": len(seen),
    }
    save_file(out, a.out, {"eagle3kit_peer": json.dumps(meta)})


if __name__ == "__main__":
    main()
