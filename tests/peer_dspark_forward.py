"""speculators 0.9.0's own DSparkDraftModel on a DSpark file eagle3kit wrote (the peer side of
tests/test_dspark.py). Runs INSIDE speculators' venv (benchmarks/peers/setup_speculators.sh),
never imports eagle3kit:

    PEER_PY tests/peer_dspark_forward.py DRAFTER IN.safetensors OUT.safetensors [DRAFTER IN OUT ...]

(several triples in one process: the venv's imports are paid once).

The model is built from DRAFTER's config by speculators' own classes
(`DSparkSpeculatorConfig.from_pretrained`, `DSparkDraftModel(config)`, sdpa) and loaded with
`load_state_dict`; only the embedding, a full-vocabulary lm_head (both given in IN: the
target's) and the verifier's head and norm may be missing. IN holds input_ids [1, T],
hidden_states [1, T, n·H], loss_mask [1, T] (the anchors), embed_tokens [V, H], lm_head [V, H].
Its training forward runs on those blocks (the anchors are the only loss-mask positions, so
its sampler draws exactly them), and the backbone's logits, the Markov-corrected logits and
the confidence logits it hands to its metrics are written to OUT, as
benchmarks/peers/make_peer_fixtures.py does for the fixtures.
"""

from __future__ import annotations

import sys

import torch
from safetensors.torch import load_file, save_file


def main(drafter: str, inp: str, out: str) -> None:
    import speculators.models.dspark.core as score
    from speculators.losses import resolve_loss_config
    from speculators.models.dspark import DSparkDraftModel, DSparkSpeculatorConfig

    cfg = DSparkSpeculatorConfig.from_pretrained(drafter)
    cfg.transformer_layer_config._attn_implementation = "sdpa"  # noqa: SLF001
    torch.manual_seed(0)
    m = DSparkDraftModel(cfg).float().eval()
    missing, unexpected = m.load_state_dict(load_file(f"{drafter}/model.safetensors"), strict=False)
    allowed = {"embed_tokens.weight", "lm_head.weight"}
    allowed |= {"verifier_norm.weight", "verifier_lm_head.weight"}
    if unexpected or set(missing) - allowed:
        raise SystemExit(f"not a strict load: missing {missing}, unexpected {unexpected}")
    x = load_file(inp)
    with torch.no_grad():
        m.embed_tokens.weight.copy_(x.pop("embed_tokens"))
        head = x.pop("lm_head")
        if "lm_head.weight" in missing:
            m.lm_head.weight.copy_(head)
    t = x["input_ids"].shape[1]
    x |= {
        "document_ids": torch.zeros(1, t, dtype=torch.long),
        "position_ids": torch.arange(t)[None],
    }
    x["verifier_last_hidden_states"] = torch.zeros(1, t, cfg.transformer_layer_config.hidden_size)
    seen: dict = {}
    backbone, metrics = m._backbone_forward, score.compute_metrics  # noqa: SLF001

    def caught_backbone(*a, **kw):
        res = backbone(*a, **kw)
        seen["base_logits"] = res[1]
        return res

    def caught_metrics(logits, targets, conf, *rest, **kw):
        seen["logits"], seen["confidence_logits"] = logits, conf
        return metrics(logits, targets, conf, *rest, **kw)

    m._backbone_forward, score.compute_metrics = caught_backbone, caught_metrics  # noqa: SLF001
    kw = {"loss_config": resolve_loss_config("kl_div", "eager")}
    kw["tv_loss_fn"] = resolve_loss_config("tv", "eager")["tv"][0]
    kw["max_anchors"] = int(x["loss_mask"].sum())
    try:
        with torch.no_grad():
            m(**x, **kw)
    finally:
        score.compute_metrics = metrics  # the next triple wraps speculators' own again
    save_file({k: v.float().contiguous() for k, v in seen.items() if v is not None}, out)


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or len(args) % 3:
        raise SystemExit("expected DRAFTER IN OUT triples")
    for i in range(0, len(args), 3):
        main(*args[i : i + 3])
