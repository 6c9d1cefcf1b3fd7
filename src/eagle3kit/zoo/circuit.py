"""A copying circuit set by hand in a fresh zoo member, before training (docs/zoo.md).

Naming a requested function means copying tokens of the request into the answer: an
induction pattern ("after an earlier A came B; now A again, so B"). In the build's budget
gradient descent does not form it in the zoo's shapes (measured, lab/notebook.md), so a new
member starts with one, written into its weights the way Elhage et al. (2021, "A
Mathematical Framework for Transformer Circuits") describe it:

- the residual stream is split into named subspaces: dim 0 constant, E (the token's own
  embedding, ``n`` dims), P (the previous token's embedding), O (the copied token);
- layer 0, head 0 is a previous-token head: its query and key read only the constant
  dimension, so its score depends on position alone (RoPE on the highest frequencies, peaked
  at distance 1); it moves E of token t-1 into P of token t;
- layer 1, head 0 is the induction head: its query reads E of the current token and its key
  reads P, on position-free dimensions (Llama: the lowest RoPE frequencies; DeepSeek-V3's
  MLA: the non-rotary "nope" part), so it attends to the position right after an earlier
  occurrence of the current token; it moves that position's E into O;
- the unembedding reads O with each token's own embedding, so the copied token's logit rises.

Matching one token copies after every earlier occurrence of the current token, so a repeated
token feeds a loop. With ``match=2`` (Llama) layer 0's head 1 also moves token t-2 into a
subspace Q and the induction head matches the pair (x_t, x_{t-1}) against (x_{s-1}, x_{s-2}):
it copies where a two-token prefix recurs, which keeps a copied name on track.

Everything else keeps its random initialisation, and training then changes every weight
(nothing is frozen). The result is an ordinary checkpoint of the member's architecture.
"""

from __future__ import annotations

import math

BETA = 8.0  # induction score of an exact match (before softmax, after 1/sqrt(d) scaling: BETA^2/8)
# unembedding gain on O: the copied token's logit boost. 2.5 (recipe 6's candidates) gave
# members that copy their own recent output into greedy loops; 1.0 still copies names
# (0.97 of answers) with fewer loops; 0.4 no longer names reliably (lab/notebook.md)
GAMMA = 1.0
AMP = 8.0  # previous-token head: query and key norm per frequency pair


def _thetas(cfg, rope_dim: int) -> list[float]:
    base = cfg.rope_parameters["rope_theta"]
    return [base ** (-2 * j / rope_dim) for j in range(rope_dim // 2)]


def _embeddings(model, n: int, e_dims: list[int], gen):
    """Token embeddings [1 | e_t | 0 ...] with e_t random unit vectors in E; returns e [V, n]."""
    import torch

    emb = model.get_input_embeddings().weight
    e = torch.randn(emb.shape[0], n, generator=gen)
    e /= e.norm(dim=1, keepdim=True)
    emb.zero_()
    emb[:, 0] = 1.0
    emb[:, e_dims] = e
    return e


def _unembedding(model, e, o_dims: list[int], gen) -> None:
    head = model.get_output_embeddings().weight
    head.normal_(0.0, model.config.initializer_range, generator=gen)
    head[:, o_dims] = GAMMA * e


def install(model, arch: str, gen, match: int = 1) -> None:
    """Write the copying circuit into the fresh ``model`` of ``arch`` ("llama" | "dsv3") in
    place, drawing its random parts from the torch Generator ``gen``. ``match``: how many
    tokens the induction head matches, 1 (the current one) or 2 (it and the one before; Llama
    needs ``rope_theta`` 1e6 for enough position-free query dims, DeepSeek-V3
    ``kv_lora_rank`` 96 for three subspaces in the kv latent)."""
    import torch

    known = {("llama", 1), ("llama", 2), ("dsv3", 1), ("dsv3", 2)}
    if (arch, match) not in known:
        raise ValueError(f"no copying circuit for architecture {arch!r} matching {match} tokens")
    with torch.no_grad():
        if arch == "dsv3":
            _install_dsv3(model, gen, match)
        else:
            _install_llama(model, gen, match)


def _install_llama(model, gen, match: int) -> None:
    """Layer 0's head h moves E of token t-1-h into P (h = 0) or Q (h = 1); layer 1's head 0
    matches (x_t, .., x_{t+1-match}) against (x_{s-1}, .., x_{s-match}) on the slowest RoPE
    pairs, an equal share of them per token."""
    import torch

    cfg = model.config
    hidden, hd = cfg.hidden_size, cfg.head_dim
    n = (hidden - 1) // (match + 2)
    e_dims = list(range(1, 1 + n))
    prev = [[i + k * n for i in e_dims] for k in range(1, match + 1)]  # P (t-1), Q (t-2)
    o_dims = [i + (match + 1) * n for i in e_dims]
    e = _embeddings(model, n, e_dims, gen)
    # RMSNorm of [1, e, 0, ..] (norm sqrt 2) and of [1, e, p, (q,) 0, ..] (norm sqrt(match + 2))
    h0, h1 = math.sqrt(hidden / 2), math.sqrt(hidden / (match + 2))
    a0, a1 = model.model.layers[0].self_attn, model.model.layers[1].self_attn
    for lin in (a0.q_proj, a0.k_proj, a0.v_proj, a0.o_proj, a1.q_proj, a1.k_proj, a1.v_proj):
        lin.weight.zero_()
    a1.o_proj.weight[:, :hd].zero_()  # head 1 of layer 1 keeps its random output
    theta = _thetas(cfg, hd)
    half, idx = hd // 2, torch.arange(n)
    for j in range(8):  # rotate_half layout: pair j is (j, j + half); head h turned back h theta
        for h in range(match):
            a0.q_proj.weight[h * hd + j, 0] = AMP * math.cos(h * theta[j]) / h0
            a0.q_proj.weight[h * hd + j + half, 0] = -AMP * math.sin(h * theta[j]) / h0
        a0.k_proj.weight[j, 0] = AMP * math.cos(theta[j]) / h0
        a0.k_proj.weight[j + half, 0] = AMP * math.sin(theta[j]) / h0
    a0.v_proj.weight[idx, e_dims] = 1.0 / h0
    for h, dims in enumerate(prev):
        a0.o_proj.weight[dims, h * hd + idx] = 1.0
    if match == 1:
        low = list(range(half - 10, half))  # the 10 slowest pairs: < 0.2 rad over 200 tokens
    else:
        low = [j for j in range(half) if theta[j] < 2e-3]  # < 0.4 rad over 200 tokens
        if len(low) < 16:  # 16 pairs: two 16-dim matches
            raise ValueError(
                f"two-token copying needs 16 slow RoPE pairs (rope_theta 1e6): {len(low)}"
            )
    dims = torch.tensor(low + [j + half for j in low])
    k = len(dims) // match
    for m, (q_from, k_from) in enumerate(zip([e_dims, *prev[:-1]], prev, strict=True)):
        d = dims[m * k : (m + 1) * k]
        r = torch.linalg.qr(torch.randn(n, len(d), generator=gen))[0].T  # orthonormal rows
        s = BETA * math.sqrt(n / len(d)) / h1
        a1.q_proj.weight[d[:, None], torch.tensor(q_from)[None, :]] = s * r
        a1.k_proj.weight[d[:, None], torch.tensor(k_from)[None, :]] = s * r
    a1.v_proj.weight[idx, e_dims] = 1.0 / h1
    a1.o_proj.weight[o_dims, idx] = 1.0
    _unembedding(model, e, o_dims, gen)


def _install_dsv3(model, gen, match: int) -> None:
    """MLA: queries through the q latent, keys and values through the kv latent, which must
    hold the key's subspaces and E side by side in layer 1 (kv_lora_rank >= (match + 1) n)."""
    import torch

    cfg = model.config
    hidden, nope = cfg.hidden_size, cfg.qk_nope_head_dim
    kv, ql = cfg.kv_lora_rank, cfg.q_lora_rank
    n = min((hidden - 1) // (match + 2), kv // (match + 1), ql // match, nope)
    e_dims = list(range(1, 1 + n))
    prev = [[i + k * n for i in e_dims] for k in range(1, match + 1)]  # P (t-1), Q (t-2)
    o_dims = [i + (match + 1) * n for i in e_dims]
    e = _embeddings(model, n, e_dims, gen)
    a0, a1 = model.model.layers[0].self_attn, model.model.layers[1].self_attn
    for a in (a0, a1):
        for lin in (a.q_a_proj, a.q_b_proj, a.kv_a_proj_with_mqa, a.kv_b_proj):
            lin.weight.zero_()
    a0.o_proj.weight.zero_()
    a1.o_proj.weight[:, : cfg.v_head_dim].zero_()
    _dsv3_previous_heads(a0, cfg, n, e_dims, prev)
    # layer 1: q latent = [E, P..] of t; kv latent = [P, Q.., E] of s; the query part for
    # each earlier token matches the key part one token further back; v = E of s
    idx = torch.arange(n)
    q_from = [e_dims, *prev[:-1]]
    for k, dims in enumerate(q_from):
        a1.q_a_proj.weight[k * n + idx, dims] = 1.0
    for k, dims in enumerate([*prev, e_dims]):
        a1.kv_a_proj_with_mqa.weight[k * n + idx, dims] = 1.0
    q_norm, kv_norm = math.sqrt(ql / match), math.sqrt(kv / (match + 1))  # after RMSNorm
    width = nope // match
    for k in range(match):
        r = (
            torch.eye(n)
            if match == 1
            else torch.linalg.qr(torch.randn(n, width, generator=gen))[0].T
        )
        gain = BETA * math.sqrt(n / r.shape[0])
        rows = k * width + torch.arange(r.shape[0])
        a1.q_b_proj.weight[rows[:, None], (k * n + idx)[None, :]] = gain * r / q_norm
        a1.kv_b_proj.weight[rows[:, None], (k * n + idx)[None, :]] = gain * r / kv_norm
    a1.kv_b_proj.weight[nope + idx, match * n + idx] = 1.0 / kv_norm
    a1.o_proj.weight[o_dims, idx] = 1.0
    _unembedding(model, e, o_dims, gen)


def _dsv3_previous_heads(a0, cfg, n: int, e_dims: list[int], prev: list[list[int]]) -> None:
    """Layer 0: head h (h = 0, 1, ..) moves E of token t-1-h into ``prev[h]``. The q latent is
    the constant dim alone (normalised to sqrt(q_lora)); rope pairs are interleaved (2j,
    2j+1), head h's query turned back by h theta; the kv latent is E (normalised to
    sqrt(kv_lora))."""
    import torch

    nope, rope, kv, ql = (
        cfg.qk_nope_head_dim,
        cfg.qk_rope_head_dim,
        cfg.kv_lora_rank,
        cfg.q_lora_rank,
    )
    head_q, head_kv = nope + rope, nope + cfg.v_head_dim
    h0, idx = math.sqrt(cfg.hidden_size / 2), torch.arange(n)
    a0.q_a_proj.weight[0, 0] = 1.0
    theta = _thetas(cfg, rope)
    for j in range(min(8, rope // 2)):
        for h in range(len(prev)):
            a0.q_b_proj.weight[h * head_q + nope + 2 * j, 0] = (
                AMP * math.cos(h * theta[j]) / math.sqrt(ql)
            )
            a0.q_b_proj.weight[h * head_q + nope + 2 * j + 1, 0] = (
                -AMP * math.sin(h * theta[j]) / math.sqrt(ql)
            )
        a0.kv_a_proj_with_mqa.weight[kv + 2 * j, 0] = AMP * math.cos(theta[j]) / h0
        a0.kv_a_proj_with_mqa.weight[kv + 2 * j + 1, 0] = AMP * math.sin(theta[j]) / h0
    a0.kv_a_proj_with_mqa.weight[idx, e_dims] = 1.0
    for h, dims in enumerate(prev):
        a0.kv_b_proj.weight[h * head_kv + nope + idx, idx] = 1.0 / math.sqrt(kv)  # v = e
        a0.o_proj.weight[dims, h * cfg.v_head_dim + idx] = 1.0
