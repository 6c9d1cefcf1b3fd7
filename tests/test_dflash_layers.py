"""DFlash drafters with causal and sliding layers (methods/dflash/model.py `layer_masks`), as
speculators' trainer writes them by default (every layer `sliding_attention`, window 2048,
causal inside the block) and as z-lab's reference runs them. Expected masks are written out
by hand from the peers' source:

- speculators models/dflash/attention.py: block query (anchor a) sees context positions
  p < a with p >= a - W (`base_prefix_mod`), and its own block's slots <= its own in a causal
  (sliding, not non-causal) layer (`same_block_mod`);
- z-lab dflash/model.py `_attention_mask`: keys at index <= the query's in a causal layer,
  and |query - key| < W in a sliding one (only query - key < W when causal).
"""

from __future__ import annotations

import pytest
import torch

from eagle3kit.methods.dflash.checkpoint.synthetic import tiny_dflash_spec
from eagle3kit.methods.dflash.model import DFlashCache, DFlashDrafter

W = 3


def drafter(layout: str, causal: bool) -> DFlashDrafter:
    spec = tiny_dflash_spec(
        layout,
        layer_types=("sliding_attention", "full_attention"),
        sliding_window=W,
        layer_causal=(causal, False),
    )
    return DFlashDrafter(spec)


def _decode_masks(d: DFlashDrafter, past: int, c: int, t: int):
    """Decoding: `past` cached context keys, c new ones, a block of t queries after them."""
    m = past + c
    pos = torch.arange(past, m + t)[None]  # the new context's positions, then the block's
    return d.layer_masks(None, pos, past, t)


@pytest.mark.parametrize("causal", [True, False])
def test_speculators_window_counts_from_the_anchor(causal):
    d = drafter("speculators", causal)
    past, c, t = 5, 2, 4  # context positions 0..6, block at 7..10 (anchor 7)
    sliding, full = _decode_masks(d, past, c, t)
    assert full is None  # a full bidirectional layer: every key visible
    want = torch.zeros(t, past + c + t, dtype=torch.bool)
    for i in range(t):
        for p in range(past + c):
            want[i, p] = p >= 7 - W  # context 4, 5, 6 (< a, >= a - W)
        for j in range(t):
            want[i, past + c + j] = (j <= i) if causal else True
    assert torch.equal(sliding[0, 0], want)


@pytest.mark.parametrize("causal", [True, False])
def test_zlab_window_counts_from_the_query(causal):
    d = drafter("zlab", causal)
    past, c, t = 5, 2, 4
    sliding, full = _decode_masks(d, past, c, t)
    assert full is None
    want = torch.zeros(t, past + c + t, dtype=torch.bool)
    for i in range(t):
        q = 7 + i
        for k in range(past + c + t):
            ok = q - k < W and (k <= q if causal else k - q < W)
            want[i, k] = ok
    assert torch.equal(sliding[0, 0], want)


def test_training_blocks_keep_their_own_anchor():
    """Two blocks of B = 4 in one pass (training): slot i of block j is causal against its
    own block's slots and windowed from its own anchor; the base mask (other blocks, later
    context) still applies."""
    d = drafter("speculators", True)
    b, t_ctx = 4, 12
    anchors = (5, 9)
    pos = torch.cat([torch.arange(t_ctx), torch.arange(5, 9), torch.arange(9, 13)])[None]
    base = torch.zeros(1, 1, 2 * b, t_ctx + 2 * b, dtype=torch.bool)
    for j, a in enumerate(anchors):
        base[0, 0, j * b : (j + 1) * b, :a] = True
        base[0, 0, j * b : (j + 1) * b, t_ctx + j * b : t_ctx + (j + 1) * b] = True
    sliding, full = d.layer_masks(base, pos, 0, 2 * b)
    assert torch.equal(full, base)
    for j, a in enumerate(anchors):
        for i in range(b):
            row = sliding[0, 0, j * b + i]
            ctx = [p for p in range(t_ctx) if bool(row[p])]
            assert ctx == list(range(a - W, a)), (j, i, ctx)
            own = [k for k in range(b) if bool(row[t_ctx + j * b + k])]
            assert own == list(range(i + 1))
            other = t_ctx + (1 - j) * b
            assert not row[other : other + b].any()


def test_cached_context_equals_full_recompute_with_causal_sliding_layers():
    """Decoding's cache (context kept, block cropped) gives the same block states as one
    pass over the whole context, for a causal sliding layer beside a full one."""
    torch.manual_seed(0)
    d = drafter("speculators", True).eval()
    spec = d.spec
    d.target_io = (torch.randn(spec.vocab_size, spec.hidden_size), torch.randn(96, 32))
    aux = torch.randn(1, 9, spec.fc_in_features)
    block = torch.tensor([[3, 95, 95, 95]])
    with torch.no_grad():
        whole = d(block, aux, torch.arange(13)[None])
        cache = DFlashCache(spec.num_hidden_layers)
        d(block, aux[:, :6], torch.arange(10)[None], cache)  # a first cycle at position 6
        cache.crop(6)
        step = d(block, aux[:, 6:], torch.arange(6, 13)[None], cache)
    torch.testing.assert_close(step, whole, atol=1e-5, rtol=0)
