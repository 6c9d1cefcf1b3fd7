"""The memory of a training run per rank, counted from shapes (torch-free), for
`train --dry-run` (docs/train.md "Dry run").

    peak = baseline (this process, measured)
         + target weights (online: every weight the run loads; offline: the embedding)
         + drafter: trainable P x (weights 4 + gradients 4 + AdamW moments 8 [+ L2-SP anchor 4])
           bytes / ranks, its frozen embedding V x H x 4, t2d, d2t
         + DATA in memory (online: 5 bytes per token) + the held-out batches' features
           (kept for the whole run) + the attention masks the unroll caches (up to 8 lengths)
         + one batch's features (aux 3Ht, the teacher's K columns, ids)
         + max(the TTT unroll's saved activations + its transient logits,
               the target's forward (online),
               an evaluation: a held-out batch's logits, log-probs and their product)

The unroll's activations are what autograd keeps for the backward, per token of a step i
(widths in floats; `tests/test_dry_run.py` checks them against the bytes autograd saves):
norms, residuals and the 2H input 11H (10H after step 0), the MLP 4I, the attention (MHA: q,
out, o_proj's input 3*Hq, keys and values of steps 0..i 2(i+1)*Hkv, rope cos/sin, the
log-sum-exp; MLA on the CPU, whose math kernel keeps the softmax: its low-rank projections and
n(i+1)T probabilities), log_softmax over the draft vocabulary Vd, and the teacher's
probabilities Vd once. P-EAGLE runs one pass over T + sum_d |A_d| elements per row (COD).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from eagle3kit.train.dry_run_inputs import DTYPE_BYTES, Inputs

F32 = 4
BIAS_CACHE = 8  # train/ttt.py ttt_bias: lru_cache(maxsize=8) of the unroll's masks


@dataclass(frozen=True)
class Batch:
    """The tokens one rank holds in one step: rows x padded length."""

    rows: int
    length: int  # the padded length (the peak: the longest batch of the run)


def trainable_params(spec: Any, cod: bool) -> int:
    """The drafter's trained elements (every tensor but the frozen embedding and the vocab
    maps; a COD drafter's (P-EAGLE's) mask_hidden too)."""
    skip = ("embed_tokens.weight", "d2t", "t2d")
    n = sum(math.prod(s) for name, s in spec.expected_shapes().items() if name not in skip)
    return n + (spec.fc_in_features if cod else 0)


def attention_floats(spec: Any, i: int, t: int, cpu: bool) -> float:
    """Per token of step i: what the attention keeps for the backward (module docstring)."""
    n = spec.num_attention_heads
    if not spec.is_mla:
        hq, hkv, hd = spec.q_size, spec.kv_size, spec.head_dim
        rep = max(1, n // max(1, spec.num_key_value_heads))
        kv = 2 * (i + 1) * hkv + (2 * (i + 1) * hq if rep > 1 else 0)
        return 3 * hq + kv + hd + n
    r, kvr, rope = spec.q_lora_rank, spec.kv_lora_rank, spec.qk_rope_head_dim
    dq, dv = spec.qk_head_dim, spec.v_head_dim
    x = (3 * r if r else 0) + (kvr + rope) + 2 * kvr + rope  # projections, norms, cos/sin
    x += n * dq * (i + 2) + n * dv * (i + 2)  # q, keys of steps 0..i, values, o_proj's input
    return x + (n * (i + 1) * t if cpu else n)  # the math kernel's softmax, else log-sum-exp


def layer_floats(spec: Any, first: bool) -> float:
    """Per token: one drafter layer's norms, residuals, 2H input and MLP (attention aside)."""
    h = spec.hidden_size
    return (11 if first else 10) * h + 4 * spec.intermediate_size + 3


def ttt_floats(spec: Any, k: int, t: int, cpu: bool) -> float:
    """Per token of the batch: the k-step unroll's saved activations (floats)."""
    vd = spec.draft_vocab_size
    total = float(vd)  # the teacher's probabilities, once
    for i in range(k):
        total += layer_floats(spec, i == 0) + attention_floats(spec, i, t, cpu)
        total += vd * max(0, t - 2 - i) / t  # log_softmax over the positions that predict
    return total


def cod_elements(t: int, k: int, valid: float, ratio: float, floor: float) -> int:
    """P-EAGLE's elements per row: T, then |A_d| = int(max(0, n - d) * max(r^d, r_min)) for
    d = 1..k-1 (n = the valid positions; methods/peagle/train.py `cod_anchors`)."""
    n = valid * t
    out, prev = t, n
    for d in range(1, k):
        size = min(prev, int(max(0.0, n - d) * max(ratio**d, floor)))
        if size <= 0:
            break
        out, prev = out + size, size
    return out


def peagle_floats(spec: Any, n: int, cpu: bool, k_cols: int, aux: int) -> float:
    """Per element of a P-EAGLE pass (one step over n elements): the layer, its attention
    over the n elements, the gathered aux and hidden 2 x aux, log_softmax Vd and the teacher's
    K columns; the bool mask n x n bytes, per element n / 4 floats."""
    x = layer_floats(spec, True) + attention_floats(spec, 0, n, cpu)
    return x + 2 * aux + spec.draft_vocab_size + k_cols + n / F32


def feature_bytes(inp: Inputs, *, k_cols: int) -> int:
    """Per token of a batch of features: aux (3Ht float32), the teacher's K log-probs
    (float32) and their ids (int64, unless the teacher is the whole draft vocab online),
    ids, argmax, masks."""
    aux = inp.spec.fc_in_features * F32
    ids = 8 * k_cols if (inp.source == "offline" or k_cols < inp.spec.draft_vocab_size) else 0
    return aux + F32 * k_cols + ids + 8 + 8 + 2


def target_forward_bytes(inp: Inputs, tokens: int, dtype: str) -> int:
    """The online target's forward on one batch (no gradients): logits over the vocabulary,
    the draft columns and their log-probs (float32), a layer's hidden states and MLP."""
    c = inp.target_config
    h, v, vd = int(c["hidden_size"]), int(c["vocab_size"]), inp.spec.draft_vocab_size
    inter = int(c.get("moe_intermediate_size") or c.get("intermediate_size") or 4 * h)
    per = v * DTYPE_BYTES.get(dtype, 4) + 2 * vd * F32 + (8 * h + 3 * inter) * F32
    return tokens * (per + inp.spec.fc_in_features * F32)


@dataclass(frozen=True)
class Where:
    """Where the run runs: its ranks, whether on the CPU, this process's baseline (bytes)."""

    world: int
    cpu: bool
    baseline: int


def memory(
    inp: Inputs, cfg: Any, batch: Batch, eval_batches: list[Batch], lengths: list[int], w: Where
) -> dict[str, int]:
    """Bytes per rank by part (module docstring), and "peak". `lengths`: the padded lengths
    of the run's batches (the unroll caches a mask per length, up to BIAS_CACHE of them)."""
    spec, k, cod = inp.spec, cfg.ttt_steps, _unroll(inp) == "cod"
    p = trainable_params(spec, cod)
    v, h = spec.vocab_size, spec.hidden_size
    online = inp.source == "online"
    per_param = 16 + (4 if cfg.l2sp > 0 else 0)  # weights, grads, AdamW m and v, anchor
    k_cols = inp.teacher_cols
    feat = feature_bytes(inp, k_cols=k_cols)
    tokens = batch.rows * batch.length
    out = {
        "baseline": w.baseline,
        "target_weights": inp.target_params * DTYPE_BYTES.get(cfg.target_dtype, 4)
        if online
        else v * h * F32,
        "drafter_weights": p * F32 // w.world,
        "gradients": p * F32 // w.world,
        "optimizer_state": p * (per_param - 8) // w.world,
        "embedding": v * h * F32 + v + 8 * spec.draft_vocab_size,
        "data": 5 * sum(inp.lengths) if online and w.cpu else 0,  # host memory on a GPU
        "heldout_features": sum(b.rows * b.length for b in eval_batches) * feat,
        "masks": 0 if cod else _mask_bytes(lengths, k),
        "batch_features": tokens * feat,
    }
    acts = _activations(inp, cfg, batch, w.cpu, k_cols)
    fwd = target_forward_bytes(inp, tokens, cfg.target_dtype) if online else 0
    evaluation = max(
        (3 * F32 * b.rows * b.length * spec.draft_vocab_size for b in eval_batches), default=0
    )
    out["activations"] = acts
    out["target_forward"] = fwd
    out["evaluation"] = evaluation
    out["peak"] = sum(x for n, x in out.items() if n not in TRANSIENT)
    out["peak"] += max(acts, fwd, evaluation)
    return out


# parts that do not coexist: the largest of them counts toward the peak
TRANSIENT = ("activations", "target_forward", "evaluation")


def _activations(inp: Inputs, cfg: Any, batch: Batch, cpu: bool, k_cols: int) -> int:
    """The unroll's saved activations and its transient logits (2 x Vd per token: the logits
    and the teacher-weighted log-probs before their sum)."""
    spec, t, vd = inp.spec, batch.length, inp.spec.draft_vocab_size
    if _unroll(inp) == "cod":
        n = cod_elements(t, cfg.ttt_steps, inp.loss_fraction, cfg.cod_ratio, cfg.cod_min)
        per_row = n * peagle_floats(spec, n, cpu, k_cols, spec.fc_in_features)
        return int(F32 * (batch.rows * (per_row + t * vd) + 2 * n * vd))
    floats = ttt_floats(spec, cfg.ttt_steps, t, cpu) + 2 * vd
    return int(F32 * floats * batch.rows * t)


def _unroll(inp: Inputs) -> str:
    from eagle3kit.core import registry

    return registry.get(inp.method).train_unroll


def _mask_bytes(lengths: list[int], k: int) -> int:
    """train/ttt.py `ttt_bias`: per length T, k float32 masks [T, (i+1)T], cached for the
    last BIAS_CACHE lengths (the largest of the run's lengths, as a bound)."""
    kept = sorted(set(lengths))[-BIAS_CACHE:]
    return sum(F32 * t * t * k * (k + 1) // 2 for t in kept)
