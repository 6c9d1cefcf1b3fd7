"""compute_features against a reference built straight from the HF model (output_hidden_states)."""

from __future__ import annotations

import pytest
import torch

from eagle3kit.core.errors import Eagle3Error


@pytest.fixture(scope="module")
def target():
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model on a shared 2-core box: 1 thread is much faster
    yield TargetModel.from_pretrained(zoo.get("llama-v1", size="tiny"))
    torch.set_num_threads(n)


def _batch(vocab: int):
    g = torch.Generator().manual_seed(0)
    lens = [9, 5, 7]
    T = max(lens)
    ids = torch.zeros(len(lens), T, dtype=torch.long)  # [B, T]
    am = torch.zeros(len(lens), T, dtype=torch.bool)  # [B, T]
    for b, n in enumerate(lens):
        ids[b, :n] = torch.randint(3, vocab, (n,), generator=g)
        am[b, :n] = True
    lm = am.clone()
    lm[:, :2] = False
    return ids, am, lm, lens


def _d2t(vocab: int, vd: int) -> torch.Tensor:
    """Every third target id from 1 up: used[i] = 1 + 3i, d2t[i] = used[i] - i."""
    used = 1 + 3 * torch.arange(vd)  # [Vd]
    assert int(used.max()) < vocab
    return used - torch.arange(vd)


def _reference(target, ids_row: torch.Tensor, used: torch.Tensor):
    """HF forward of one unpadded sample: (aux [T, 3H], logits [T, V]) by output_hidden_states."""
    with torch.no_grad():
        out = target.model(input_ids=ids_row[None], output_hidden_states=True)
    aux = torch.cat([out.hidden_states[i][0] for i in target.aux_layers], dim=-1)  # [T, 3H]
    return aux, out.logits[0]


def test_full_vocab_matches_reference(target):
    from eagle3kit.data.features import compute_features

    V = target.vocab_size
    vd = 100
    d2t = _d2t(V, vd)
    used = torch.arange(vd) + d2t
    ids, am, lm, lens = _batch(V)
    f = compute_features(target, ids, am, lm, d2t)
    H = target.hidden_size
    assert f.aux.shape == (3, ids.shape[1], len(target.aux_layers) * H)
    assert f.teacher_ids.shape == (3, ids.shape[1], vd) and f.topk == vd
    for b, n in enumerate(lens):
        aux, logits = _reference(target, ids[b, :n], used)
        torch.testing.assert_close(f.aux[b, :n], aux, atol=1e-5, rtol=1e-4)
        assert torch.equal(f.target_argmax[b, :n], logits.argmax(-1))
        sub = logits[:, used]  # [n, Vd]
        ref = sub - torch.logsumexp(sub, dim=-1, keepdim=True)
        torch.testing.assert_close(f.teacher_logp[b, :n], ref, atol=1e-4, rtol=1e-4)
        assert torch.equal(f.teacher_ids[b, 0], torch.arange(vd))
        # padding is zeroed and masked
        assert not f.attention_mask[b, n:].any() and not f.loss_mask[b, n:].any()
        assert (f.aux[b, n:] == 0).all() and (f.teacher_logp[b, n:] == 0).all()
    assert torch.equal(f.loss_mask, lm & am)


def test_topk_keeps_largest_and_mass(target):
    from eagle3kit.data.features import compute_features

    V = target.vocab_size
    d2t = _d2t(V, 120)
    ids, am, lm, lens = _batch(V)
    full = compute_features(target, ids, am, lm, d2t)
    k = 8
    top = compute_features(target, ids, am, lm, d2t, topk=k)
    assert top.teacher_ids.shape[-1] == k
    b, n = 0, lens[0]
    # the K kept are the K largest of the full distribution, in descending order
    ref_vals, _ = full.teacher_logp[b, :n].sort(dim=-1, descending=True)
    torch.testing.assert_close(top.teacher_logp[b, :n], ref_vals[:, :k])
    got = full.teacher_logp[b, :n].gather(-1, top.teacher_ids[b, :n])
    torch.testing.assert_close(got, top.teacher_logp[b, :n])
    mass = top.teacher_logp[b, :n].exp().sum(-1)
    assert ((mass > 0) & (mass <= 1 + 1e-5)).all()
    # the same in a batch of one: padding does not change a sample's features
    one = compute_features(
        target, ids[1:2, : lens[1]], am[1:2, : lens[1]], lm[1:2, : lens[1]], d2t, topk=k
    )
    torch.testing.assert_close(one.aux[0], top.aux[1, : lens[1]], atol=1e-5, rtol=1e-4)
    assert torch.equal(one.teacher_ids[0], top.teacher_ids[1, : lens[1]])


def test_to_casts_floats_only(target):
    from eagle3kit.data.features import compute_features

    ids, am, lm, _ = _batch(target.vocab_size)
    f = compute_features(target, ids, am, lm, _d2t(target.vocab_size, 50), topk=4)
    g = f.to("cpu", torch.bfloat16)
    assert g.aux.dtype == torch.bfloat16 and g.teacher_logp.dtype == torch.bfloat16
    assert g.input_ids.dtype == torch.long and g.teacher_ids.dtype == torch.long
    assert g.attention_mask.dtype == torch.bool


def test_bad_d2t_is_refused(target):
    from eagle3kit.data.features import compute_features

    ids, am, lm, _ = _batch(target.vocab_size)
    d2t = torch.full((10,), target.vocab_size)  # maps past the vocab
    with pytest.raises(Eagle3Error, match="d2t"):
        compute_features(target, ids, am, lm, d2t)
