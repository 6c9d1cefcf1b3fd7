"""The unrolled training-time test against chain decoding done naively, and its loss/metrics."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from ckpt_helpers import tiny_spec

from eagle3kit.model.drafter import DraftCache, Eagle3Drafter
from eagle3kit.train.ttt import Counts, tau_every_position, ttt_forward, ttt_loss, ttt_metrics


def _drafter(seed: int = 0, **kw) -> Eagle3Drafter:
    torch.manual_seed(seed)
    spec = tiny_spec(**kw)
    m = Eagle3Drafter(spec)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * (0.1 if p.dim() > 1 else 0.1) + (p.dim() == 1))
    m.set_embedding(torch.randn(spec.vocab_size, spec.hidden_size))
    # draft vocab = every 4th target id
    used = torch.arange(0, spec.vocab_size, spec.vocab_size // spec.draft_vocab_size)
    m.d2t.copy_(used - torch.arange(spec.draft_vocab_size))
    m.t2d.zero_()
    m.t2d[used] = True
    return m


def _feats(m: Eagle3Drafter, b: int, t: int, seed: int = 1) -> SimpleNamespace:
    g = torch.Generator().manual_seed(seed)
    s = m.spec
    logp = torch.randn(b, t, s.draft_vocab_size, generator=g).log_softmax(-1)  # [B, T, Vd]
    used = torch.nonzero(m.t2d).squeeze(1)
    argmax = used[logp.argmax(-1)]  # [B, T] in-vocab
    argmax[:, ::5] = 1  # id 1 is not in the draft vocab
    return SimpleNamespace(
        input_ids=torch.randint(0, s.vocab_size, (b, t), generator=g),
        aux=torch.randn(b, t, 3 * s.target_hidden_size, generator=g),
        attention_mask=torch.ones(b, t, dtype=torch.bool),
        loss_mask=torch.rand(b, t, generator=g) < 0.7,
        target_argmax=argmax,
        teacher_ids=torch.arange(s.draft_vocab_size).expand(b, t, -1),
        teacher_logp=logp,
    )


def naive_chain(m: Eagle3Drafter, ids: torch.Tensor, aux: torch.Tensor, t: int, k: int):
    """Chain decoding from scratch after a prefix ending at t: logits [Vd] of steps 0..k-1."""
    cache = DraftCache()
    out = m(ids[:, 1 : t + 2], aux[:, : t + 1], cache, from_aux=True)  # positions 0..t
    logits = [out.logits[0, -1]]
    h = out.hidden[:, -1:]
    for i in range(1, k):
        out = m(ids[:, t + 1 + i : t + 2 + i], h, cache, from_aux=False)  # position t+i
        logits.append(out.logits[0, -1])
        h = out.hidden
    return logits


MLA = dict(
    attention="mla",
    num_key_value_heads=4,
    q_lora_rank=16,
    kv_lora_rank=12,
    qk_nope_head_dim=8,
    qk_rope_head_dim=4,
    v_head_dim=10,
    architecture="Eagle3DeepseekV2ForCausalLM",
    model_type="kimi_k2",
)


@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_ttt_equals_chain_decoding_recomputed_from_scratch(kind):
    m = _drafter(**(MLA if kind == "mla" else {}))
    k, t = 3, 10
    f = _feats(m, 1, t)
    steps = ttt_forward(m, f, k)
    assert len(steps) == k and steps[0].shape == (1, t, m.spec.draft_vocab_size)
    checked = 0
    for pos in range(t - k - 1):  # every position whose k steps read real tokens
        ref = naive_chain(m, f.input_ids, f.aux, pos, k)
        for i in range(k):
            torch.testing.assert_close(steps[i][0, pos], ref[i], atol=1e-5, rtol=1e-5)
            checked += 1
    assert checked == (t - k - 1) * k


def test_ttt_batch_rows_are_independent():
    m = _drafter()
    f = _feats(m, 3, 10)
    both = ttt_forward(m, f, 3)
    one = ttt_forward(m, SimpleNamespace(input_ids=f.input_ids[1:2], aux=f.aux[1:2]), 3)
    for a, b in zip(both, one, strict=True):
        torch.testing.assert_close(a[1:2], b, atol=1e-5, rtol=1e-5)


def test_loss_and_metrics_against_loops():
    m = _drafter(draft_vocab_size=8)  # random hits 1 in 8, so chains of hits happen
    k, b, t = 3, 4, 48
    f = _feats(m, b, t)
    pred0 = m.to_target_ids(ttt_forward(m, f, 1)[0].argmax(-1))  # [B, T] step 0's guesses
    f.target_argmax[:, 1::2] = pred0[:, ::2][:, : (t - 1 + 1) // 2]  # half of step 0 hits
    logits = ttt_forward(m, f, k)
    total, counts = ttt_loss(m, f, k)
    met = counts.finish()
    want_total = 0.0
    chain = [[True] * t for _ in range(b)]
    for i in range(k):
        ce_sum = n = hits = counted = ch = ch_prev = 0
        for r in range(b):
            for pos in range(t):
                if pos + 2 + i >= t or not f.loss_mask[r, pos + 2 + i]:
                    prev_ok = chain[r][pos]
                    chain[r][pos] = False
                    continue
                tgt = int(f.target_argmax[r, pos + 1 + i])
                q = logits[i][r, pos].log_softmax(-1)
                d = int(q.argmax())
                hit = d + int(m.d2t[d]) == tgt
                counted += 1
                hits += hit
                prev_ok = chain[r][pos]
                ch_prev += prev_ok
                chain[r][pos] = prev_ok and hit
                ch += chain[r][pos]
                if bool(m.t2d[tgt]):
                    p = f.teacher_logp[r, pos + 1 + i].exp()
                    ce_sum += float(-(p * q).sum().detach())
                    n += 1
        want_total += 0.8**i * ce_sum / n
        assert met["counted"][i] == counted
        assert met["acc"][i] == pytest.approx(hits / counted)
        assert met["cond_acc"][i] == pytest.approx(ch / ch_prev if ch_prev else 0.0)
        assert met["loss"][i] == pytest.approx(ce_sum / n, rel=1e-4)
        assert i == 0 or ch > 0  # the chain bookkeeping is exercised
    assert float(total.detach()) == pytest.approx(want_total, rel=1e-4)
    assert ttt_metrics(m, f, k) == met


def test_loss_ignores_positions_outside_the_loss_mask():
    m = _drafter()
    f = _feats(m, 1, 12)
    f.loss_mask[:] = False
    f.loss_mask[0, 8] = True  # only step 0 at t=6, step 1 at t=5, step 2 at t=4 count
    loss, c = ttt_loss(m, f, 3)
    assert c.counted.tolist() == [1, 1, 1]
    g = torch.autograd.grad(loss, m.lm_head.weight)[0]
    f.input_ids[0, 10:] = 7  # tokens no counted position reads
    loss2, _ = ttt_loss(m, f, 3)
    assert float(loss2.detach()) == pytest.approx(float(loss.detach()))
    assert g.abs().sum() > 0


def test_teacher_top_k_is_renormalised():
    m = _drafter()
    f = _feats(m, 1, 10)
    top = f.teacher_logp.topk(40, -1)  # K = 40 of Vd = 128
    g = SimpleNamespace(**{**vars(f), "teacher_ids": top.indices, "teacher_logp": top.values})
    # the same teacher written over the full draft vocab: renormalised mass on the K ids, 0
    # elsewhere
    full = torch.full_like(f.teacher_logp, float("-inf"))
    full.scatter_(-1, top.indices, top.values.log_softmax(-1))
    h = SimpleNamespace(**{**vars(f), "teacher_logp": full})
    assert float(ttt_loss(m, g, 2)[0].detach()) == pytest.approx(
        float(ttt_loss(m, h, 2)[0].detach()), rel=1e-5
    )
    assert float(ttt_loss(m, g, 2)[0].detach()) != pytest.approx(
        float(ttt_loss(m, f, 2)[0].detach()), rel=1e-3
    )


def test_tau_every_position():
    assert tau_every_position([]) == 1.0
    assert tau_every_position([1.0, 1.0, 1.0]) == 4.0
    assert tau_every_position([0.5, 0.5]) == pytest.approx(1 + 0.5 + 0.25)
    assert tau_every_position([0.8, 0.5, 0.9, 0.1], depth=2) == pytest.approx(1 + 0.8 + 0.4)
    p = 0.7
    assert tau_every_position([p] * 200) == pytest.approx(1 / (1 - p))


def test_counts_add_up_across_batches():
    m = _drafter()
    f = _feats(m, 2, 12)
    halves = [SimpleNamespace(**{n: v[r : r + 1] for n, v in vars(f).items()}) for r in range(2)]
    whole = ttt_loss(m, f, 3)[1]
    summed = ttt_loss(m, halves[0], 3)[1] + ttt_loss(m, halves[1], 3)[1]
    torch.testing.assert_close(whole.stacked(), summed.stacked())
    assert isinstance(summed, Counts) and not math.isnan(summed.finish()["loss"][0])
