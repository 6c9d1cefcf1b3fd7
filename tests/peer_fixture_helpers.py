"""Reading the drafters the peers' own code wrote (tests/fixtures/peers/; issue 47), for
tests/test_peer_fixtures.py and benchmarks/peer_fixtures_today.py.

Each fixture is a checkpoint folder `<peer>-<version>/<variant>/` written by the peer
(benchmarks/peers/make_peer_fixtures.py, run in the peer's venv), `<variant>.json` beside it
(the peer, its version, the call, the seed, every tensor the peer wrote) and
`<variant>.forward.safetensors` (the fixed input and the peer's own forward outputs).

`our_rows(method, drafter, x)` puts our drafter's logits beside the peer's, row by row, on
that input; the comparisons follow what the peer's forward computed (read in its source):
- EAGLE-3 (speculators `Eagle3DraftModel.forward`, 3 TTT steps): step 0 at every position t
  is the drafter's causal pass over pairs 0..T-1; RoPE is relative, so its positions 1..T and
  ours 0..T-1 agree.
- P-EAGLE (`PEagleDraftModel.forward`, COD elements): depth 0 at anchor a is step 0 at a, depth
  k the k-th parallel slot after it (`parallel_slots`), at the anchors kept at every depth.
- DFlash / DSpark, speculators (`_backbone_forward` on blocks at the loss-mask positions): block
  j = [x_a, mask x (B-1)] at positions a..a+B-1, its context the states before a, every slot's
  logits in the draft vocabulary (DSpark: the backbone's, before the Markov head: its
  `base_logits`; `logits` and `confidence_logits` are there for a DSpark model's own test).
- DFlash, z-lab (`dflash_generate`'s pass): the logits of the block's last B-1 rows.
- DSpark (`DSparkDraftModel.forward`, sample_from_anchor): the same blocks, and per slot the
  backbone's `base_logits`, the Markov-corrected `logits` (slot k's previous token the true
  x_{a+k}: its `prev_token_ids = block_tokens`) and the `confidence_logits`.
"""

from __future__ import annotations

import json
from pathlib import Path

PEERS = Path(__file__).parent / "fixtures" / "peers"


def meta(folder: str, variant: str) -> dict:
    return json.loads((PEERS / folder / f"{variant}.json").read_text())


def our_rows(method: str, d, x: dict) -> list:
    """[(ours, peer)] logit rows of `d` (a drafter as `load_pair` gives it) on input `x`."""
    return {"eagle3": _eagle3, "peagle": _peagle, "dspark": _dspark}.get(method, _block)(d, x)


def _eagle3(d, x) -> list:
    from eagle3kit.model.drafter import DraftCache

    ids, aux, peer = x["input_ids"], x["hidden_states"], x["logits_0"]
    ours = d(ids, aux, DraftCache(), from_aux=True).logits[0]  # causal: step 0 at every t
    return list(zip(ours, peer[0], strict=True))


def _peagle(d, x) -> list:
    from eagle3kit.model.drafter import DraftCache

    ids, aux, peer = x["input_ids"], x["hidden_states"], x["logits"][0]
    anchor, depth = x["anchor_pos"], x["depth"]
    deepest = int(depth.max())
    out = []
    for a in anchor[depth == deepest].tolist():
        cache = DraftCache()
        first = d(ids[:, : a + 1], aux[:, : a + 1], cache, from_aux=True).logits[0, -1]
        rows = [first, *d.parallel_slots(deepest, cache).logits[0]]
        for k, row in enumerate(rows):
            j = int(((anchor == a) & (depth == k)).nonzero()[0, 0])
            out.append((row, peer[j]))
    return out


def _block(d, x) -> list:
    import torch

    if "block_ids" in x:  # z-lab's decoding pass
        hidden = d(x["block_ids"], x["target_hidden"], x["position_ids"])
        return list(zip(d.logits(hidden)[0, 1:], x["logits"][0], strict=True))
    b, ids, aux = d.spec.block_size, x["input_ids"], x["hidden_states"]
    cols = torch.arange(d.spec.draft_vocab_size)
    if d.spec.has_vocab_map:  # ours puts draft id j on target id j + d2t[j]
        cols = cols + d.d2t
    peer = x.get("base_logits", x["logits"])[0]
    out = []
    for j, a in enumerate(x["loss_mask"][0].nonzero()[:, 0].tolist()):
        block = torch.full((1, b), d.spec.mask_token_id)
        block[0, 0] = ids[0, a]
        hidden = d(block, aux[:, :a], torch.arange(a + b)[None])
        out += list(zip(d.logits(hidden)[0][:, cols], peer[j * b : (j + 1) * b], strict=True))
    return out


def _dspark(d, x) -> list:
    """Rows of base logits, Markov-corrected logits and confidence logits (one row per
    block) of a DSpark drafter, against the peer's."""
    import torch

    b, ids, aux = d.spec.block_size, x["input_ids"], x["hidden_states"]
    out = []
    for j, a in enumerate(x["loss_mask"][0].nonzero()[:, 0].tolist()):
        block = torch.full((1, b), d.spec.mask_token_id)
        block[0, 0] = ids[0, a]
        hidden = d(block, aux[:, :a], torch.arange(a + b)[None])[0]  # [B, H]
        logits, conf = d.head_logits(hidden, ids[0, a : a + b])
        rows = slice(j * b, (j + 1) * b)
        out += list(zip(d.draft_logits(hidden).float(), x["base_logits"][0][rows], strict=True))
        out += list(zip(logits, x["logits"][0][rows], strict=True))
        out.append((conf.float(), x["confidence_logits"][0][rows]))
    return out
