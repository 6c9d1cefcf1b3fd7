"""`train --loss` through each method's objective: the teacher each one passes, the default
written out as each method computed it before the loss choice (values and gradients bitwise),
every loss finite and trainable on padded top-K batches, and the refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from test_train_ttt import _drafter, _feats

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.data.features import teacher_from_logits
from eagle3kit.train.loss_names import LOSSES, check_loss
from eagle3kit.train.losses import position_losses, teacher_from_logp
from eagle3kit.train.ttt import STEP_DECAY, ttt_forward, ttt_loss

# -- the teacher the features hold, as the losses read it -----------------------------------


def test_a_top_k_teacher_keeps_the_draft_vocab_mass_it_left_out():
    """features.teacher_from_logits keeps the K largest log-probs of a log-softmax over the
    draft columns; the rest bin is the mass of the other draft ids, summed here from the
    whole log-softmax; kl reads the K renormalised (EAGLE-3's teacher before the choice)."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 40, generator=g) * 3  # [B, T, V]
    cols = torch.arange(0, 40, 2)  # a draft vocab of 20 target ids
    _, ids, logp = teacher_from_logits(logits, cols, topk=4)
    full = torch.log_softmax(logits[..., cols], -1).exp()  # [B, T, 20]
    outside = full.sum(-1) - full.gather(-1, ids).sum(-1)
    t = teacher_from_logp("tv", logp, ids)
    torch.testing.assert_close(t.rest, outside, rtol=0, atol=1e-6)
    torch.testing.assert_close(t.p, full.gather(-1, ids), rtol=0, atol=1e-7)
    k = teacher_from_logp("kl", logp, ids)
    assert k.rest is None
    torch.testing.assert_close(k.p.sum(-1), torch.ones(2, 5))
    whole = teacher_from_logp("tv", torch.log_softmax(logits[..., cols], -1), None)
    assert whole.ids is None and whole.rest is None


def test_with_every_id_kept_the_bins_are_the_divergences_themselves():
    """The top-K teacher with K = Vd and the full teacher give one value per loss."""
    g = torch.Generator().manual_seed(1)
    z = torch.randn(1, 3, 6, generator=g)
    logp = torch.randn(1, 3, 6, generator=g).log_softmax(-1)
    ids = torch.arange(6).expand(1, 3, 6)
    for name in LOSSES:
        a = position_losses(name, z, teacher_from_logp(name, logp, None))
        b = position_losses(name, z, teacher_from_logp(name, logp, ids))
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


PEER = Path(__file__).parent / "fixtures" / "peer-losses" / "speculators-0.9.0.safetensors"
PEER_NAMES = {  # speculators' name -> ours
    "kl_div": "kl",
    "rkl": "rkl",
    "jsd": "jsd",
    "ce": "ce",
    "tv": "tv",
    "nla": "lk",
    "lk_hybrid": "lk-hybrid",
}


@pytest.mark.parametrize("theirs", sorted(PEER_NAMES))
def test_each_loss_is_speculators_own(theirs):
    """speculators 0.9.0's eager losses (values and gradients, written by its own code:
    benchmarks/peers/speculators_losses.py) against ours over the whole draft vocabulary;
    ours logs kl as the soft cross entropy, KL plus the teacher's entropy: the same
    gradient."""
    from safetensors.torch import load_file

    f = load_file(PEER)
    x = f["logits"].clone().requires_grad_()
    p = torch.softmax(f["targets"], -1)
    ours = position_losses(
        PEER_NAMES[theirs], x, teacher_from_logp(PEER_NAMES[theirs], p.log(), None)
    )
    (ours * f["w"]).sum().backward()
    want = f[f"{theirs}.value"]
    if theirs == "kl_div":
        want = want - (p * torch.log_softmax(f["targets"], -1)).sum(-1)  # + H(p)
    torch.testing.assert_close(ours.detach(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.grad, f[f"{theirs}.grad"], rtol=1e-5, atol=1e-6)


# -- EAGLE-3's TTT loss: the default is the loss before the choice --------------------------


def _old_ttt_loss(m, f, k: int) -> torch.Tensor:
    """train/ttt.py's loss before `--loss`, written out: soft CE against the teacher (a top-K
    one renormalised over its ids), over C_i, 0.8^i per step."""
    lp = f.teacher_logp.float()
    vd = int(m.d2t.numel())
    probs = lp.exp() if lp.shape[-1] == vd else lp.softmax(-1)
    total = torch.zeros(())
    for i, logits in enumerate(ttt_forward(m, f, k)):
        n, t = 1 + i, f.input_ids.shape[1]
        L = max(0, t - n - 1)
        logq = F.log_softmax(logits[:, :L].float(), dim=-1)
        p = probs[:, n : n + L]
        if lp.shape[-1] == vd:
            ce = -(p * logq).sum(-1)
        else:
            ce = -(p * logq.gather(-1, f.teacher_ids[:, n : n + L])).sum(-1)
        cmask = f.loss_mask[:, n + 1 :] & m.t2d[f.target_argmax[:, n : n + L]]
        total = total + (STEP_DECAY**i) * (ce * cmask).sum() / cmask.sum().clamp(min=1)
    return total


def _grads(m, loss: torch.Tensor) -> list[torch.Tensor]:
    m.zero_grad(set_to_none=True)
    loss.backward()
    return [p.grad.clone() for p in m.parameters() if p.grad is not None]


@pytest.mark.parametrize("topk", [None, 5])
def test_ttt_default_is_the_old_loss_bitwise(topk):
    m = _drafter(draft_vocab_size=16)
    f = _top_k(_feats(m, 2, 12), topk)
    old = _old_ttt_loss(m, f, 3)
    g_old = _grads(m, old)
    new, _ = ttt_loss(m, f, 3, counts=False)
    g_new = _grads(m, new)
    assert torch.equal(old.detach(), new.detach())
    assert all(torch.equal(a, b) for a, b in zip(g_old, g_new, strict=True))


def _top_k(f: SimpleNamespace, k: int | None) -> SimpleNamespace:
    """The features with only the top-k teacher columns (not renormalised), as the store
    keeps them."""
    if k is None:
        return f
    vals, ids = f.teacher_logp.topk(k, dim=-1)
    return SimpleNamespace(**{**vars(f), "teacher_logp": vals, "teacher_ids": ids})


def _padded(f: SimpleNamespace) -> SimpleNamespace:
    """Row 1's last 5 positions padding, as features.compute_features and the store write
    it: attention and loss mask off, teacher log-probs 0 and ids 0, argmax 0, aux 0."""
    g = SimpleNamespace(**{k: v.clone() for k, v in vars(f).items()})
    g.attention_mask[1, -5:] = False
    g.loss_mask[1, -5:] = False
    g.teacher_logp[1, -5:] = 0.0
    g.teacher_ids[1, -5:] = 0
    g.target_argmax[1, -5:] = 0
    g.aux[1, -5:] = 0.0
    return g


@pytest.mark.parametrize("topk", [None, 5])
@pytest.mark.parametrize("name", LOSSES)
def test_every_loss_is_finite_and_trains_on_padded_batches(name, topk):
    """Padding reads a teacher of ones (exp 0): masked out, it must stay finite, else
    0 * inf poisons the sum. Each loss has a non-zero gradient, and a different one."""
    m = _drafter(draft_vocab_size=16)
    f = _padded(_top_k(_feats(m, 2, 12), topk))
    loss, _ = ttt_loss(m, f, 3, loss=name)
    grads = _grads(m, loss)
    assert math.isfinite(float(loss.detach())) and all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    if name != "kl":
        ref = _grads(m, ttt_loss(m, f, 3)[0])
        assert any(not torch.allclose(a, b) for a, b in zip(grads, ref, strict=True))


# -- MTP: FastMTP's CE on the data token, and distillation ---------------------------------


def _old_mtp(logits, ids, mask, weights, teacher=None) -> torch.Tensor:
    """methods/mtp/train/finetune.py `mtp_loss` before `--loss`, written out."""
    n = logits[0].shape[1]
    total = logits[0].new_zeros(())
    for step, (lg, w) in enumerate(zip(logits, weights, strict=True)):
        m = mask[:, step + 2 : step + 2 + n]
        if teacher is None:
            tgt = ids[:, step + 2 : step + 2 + n]
            ce = F.cross_entropy(lg.flatten(0, 1).float(), tgt.flatten(), reduction="none")
        else:
            p = torch.softmax(teacher[:, step + 1 : step + 1 + n].float(), -1)
            ce = -(p * torch.log_softmax(lg.float(), -1)).sum(-1).flatten()
        total = total + w * (ce * m.flatten()).sum() / m.sum().clamp(min=1)
    return total


@pytest.mark.parametrize("distil", [False, True])
def test_mtp_default_is_fastmtps_loss_bitwise(distil):
    from eagle3kit.methods.mtp.train.finetune import mtp_loss, step_weights

    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 11, (2, 9), generator=g)
    mask = torch.rand(2, 9, generator=g) < 0.8
    base = [torch.randn(2, 5, 11, generator=g) for _ in range(3)]
    teacher = torch.randn(2, 9, 11, generator=g) if distil else None
    w = step_weights(3)

    def run(fn):
        lg = [x.clone().requires_grad_() for x in base]
        out = fn(lg, ids, mask, w, teacher)
        out.backward()
        return out.detach(), [x.grad for x in lg]

    (a, ga), (b, gb) = run(_old_mtp), run(mtp_loss)
    assert torch.equal(a, b) and all(torch.equal(x, y) for x, y in zip(ga, gb, strict=True))


# -- DFlash: the data token or the target's law per slot ------------------------------------


def _dflash_case(topk: int | None = None):
    from eagle3kit.methods.dflash.train.step import Blocks

    g = torch.Generator().manual_seed(3)
    bt, t, v, n, b = 2, 14, 13, 3, 4
    logp = torch.randn(bt, t, v, generator=g).log_softmax(-1)
    ids = torch.arange(v).expand(bt, t, v)
    if topk is not None:
        logp, ids = logp.topk(topk, dim=-1)
    feats = SimpleNamespace(
        input_ids=torch.randint(0, v, (bt, t), generator=g), teacher_logp=logp, teacher_ids=ids
    )
    src = torch.randint(1, t, (bt, n, b), generator=g)
    valid = torch.rand(bt, n, b, generator=g) < 0.8
    valid[:, :, 0] = False
    blocks = Blocks(None, valid, None, None, None, src)
    return torch.randn(bt, n, b, v, generator=g), feats, blocks


def _old_dflash(logits, feats, blocks, gamma, kind):
    """methods/dflash/train/step.py `block_loss_terms` before `--loss` (exp weights),
    written out: KL(teacher || drafter) on the target's law, -log p on the data token."""
    from eagle3kit.methods.dflash.train.step import _gather_slots, position_weights

    logp = F.log_softmax(logits, dim=-1)
    if kind == "ce":
        label = _gather_slots(feats.input_ids, blocks.src)
        ell = -logp.gather(-1, label[..., None])[..., 0]
    else:
        t_logp = _gather_slots(feats.teacher_logp.float(), (blocks.src - 1).clamp(min=0))
        ell = (t_logp.exp() * (t_logp - logp)).sum(-1)
    w = position_weights(logits.shape[2], gamma, logits.device) * blocks.valid
    return (w * ell).sum(), w.sum()


@pytest.mark.parametrize("kind", ["ce", "kl"])
def test_dflash_default_gradients_are_the_old_loss_bitwise(kind):
    """The same gradient bitwise; the value: -log p on the data token bitwise, and for the
    target's law the soft CE, KL plus the teacher's entropy (a constant)."""
    from eagle3kit.methods.dflash.train.step import block_loss_terms

    base, feats, blocks = _dflash_case()

    def run(fn):
        x = base.clone().requires_grad_()
        s, w = fn(x, feats, blocks, 4.0, kind)
        s.backward()
        return s.detach(), w, x.grad

    (a, wa, ga), (b, wb, gb) = run(_old_dflash), run(block_loss_terms)
    assert torch.equal(ga, gb) and torch.equal(wa, wb)
    if kind == "ce":
        assert torch.equal(a, b)
    else:  # sum w H(p) by hand
        from eagle3kit.methods.dflash.train.step import _gather_slots, position_weights

        lp = _gather_slots(feats.teacher_logp, (blocks.src - 1).clamp(min=0))
        h = -(lp.exp() * lp).sum(-1)
        w = position_weights(4, 4.0) * blocks.valid
        assert float(b) == pytest.approx(float(a + (w * h).sum()), rel=1e-5)


def test_dflash_reads_a_top_k_store_at_its_ids():
    """A top-K teacher (a store captured with --topk) is read at its ids: kl is the soft CE
    over the K renormalised, ce the -log q of the teacher's first (largest) id, by hand;
    every loss finite (before, K < V did not broadcast)."""
    from eagle3kit.methods.dflash.train.step import _gather_slots, block_loss_terms

    logits, feats, blocks = _dflash_case(topk=4)
    prev = (blocks.src - 1).clamp(min=0)
    lp, ids = _gather_slots(feats.teacher_logp, prev), _gather_slots(feats.teacher_ids, prev)
    logq = F.log_softmax(logits, -1)
    w = torch.exp(-(torch.arange(4.0) - 1) / 4.0) * blocks.valid  # slot 0: valid never
    want = {
        "kl": -(lp.softmax(-1) * logq.gather(-1, ids)).sum(-1),
        "ce": -logq.gather(-1, ids[..., :1])[..., 0],
    }
    for name, ell in want.items():
        got = block_loss_terms(logits, feats, blocks, 4.0, "kl", loss=name)[0]
        assert float(got) == pytest.approx(float((w * ell).sum()), rel=1e-5)
    for name in LOSSES:
        assert math.isfinite(
            float(block_loss_terms(logits, feats, blocks, 4.0, "kl", loss=name)[0])
        )


# -- the refusals ---------------------------------------------------------------------------


def test_a_data_token_teacher_takes_kl_or_ce_only():
    assert check_loss("ce", token="--mtp-targets data") == "ce"
    with pytest.raises(Eagle3Error, match="--loss: expected kl or ce with --dflash-loss ce"):
        check_loss("lk", token="--dflash-loss ce")
    with pytest.raises(Eagle3Error, match="expected one of kl, rkl"):
        check_loss("KL")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--loss", "mse"], "--loss: expected one of kl, rkl, jsd, tv, ce, lk, lk-hybrid"),
        (["--method", "dflash", "--dflash-loss", "ce", "--loss", "tv"], "with --dflash-loss ce"),
        (["--method", "mtp", "--loss", "rkl"], "with --mtp-targets data"),
    ],
)
def test_train_refuses_a_loss_in_one_line_before_writing(cli, tmp_path, args, message):
    """Refused before any target or data is read (neither exists here) or anything written."""
    out = tmp_path / "run"
    missing = ["--target", tmp_path / "no-target", "--data", tmp_path / "no-data"]
    r = cli("train", *missing, "-o", out, *args)
    assert r.code == 2 and message in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert not out.exists()


@pytest.mark.slow  # ~15 s: two short runs on the tiny member
def test_train_with_another_loss_says_so_and_trains_otherwise(cli, tmp_path):
    """`--loss tv` on a top-K teacher: the summary names it, and the weights differ from the
    default's after the same steps."""
    from safetensors.torch import load_file
    from test_train_helpers import tiny_data, tiny_target, train_args

    runs = {}
    for name in ("kl", "tv"):
        out = tmp_path / name
        args = train_args(out, tiny_data(), tiny_target())
        r = cli(*args, "--steps", "2", "--topk", "8", "--loss", name, "--json")
        assert r.code == 0, r.err
        assert json.loads(r.out)["position_loss"] == name
        runs[name] = load_file(out / "state" / "model.safetensors")
    assert any(not torch.equal(runs["kl"][k], runs["tv"][k]) for k in runs["kl"])
