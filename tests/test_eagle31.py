"""EAGLE 3.1 training semantics (train/flags.py, methods/eagle3/train.py): presets and flags, a
warm start keeps its checkpoint's flags (an MLA 3.1 drafter included), a change is applied and
reported, and the TTT unroll feeds norm(h) to the next step when the drafter declares
norm_output."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from ckpt_helpers import random_drafter, tiny_spec
from test_mla import mla_spec

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.methods.eagle3 import train as methods
from eagle3kit.model.drafter import DraftCache, Eagle3Drafter
from eagle3kit.train import warmstart
from eagle3kit.train.ttt import shift, unroll


def cfg(**kw):
    base = {"method": None, "fc_norm": None, "norm_before_fc": None, "norm_output": None}
    return SimpleNamespace(**{**base, **kw})


def test_presets_and_single_flags():
    assert methods.wanted_flags(cfg(), None) == methods.EAGLE3
    assert methods.wanted_flags(cfg(method="eagle3.1"), None) == methods.EAGLE31
    got = methods.wanted_flags(cfg(method="eagle3.1", fc_norm=False, norm_before_fc=True), None)
    assert got == {"fc_norm": False, "norm_before_fc": True, "norm_output": True}
    with pytest.raises(Eagle3Error, match="--fc-norm/--norm-before-fc"):
        methods.wanted_flags(cfg(fc_norm=True, norm_before_fc=True), None)
    with pytest.raises(Eagle3Error, match="--method"):
        methods.check_method("eagle4")


def test_warm_start_keeps_an_mla_31_checkpoints_flags(tmp_path):
    spec = mla_spec(fc_norm=True, norm_output=True)
    path = random_drafter(tmp_path / "k26-like", spec)
    m = warmstart.warm_drafter(str(path))
    assert m.spec.attention == "mla" and m.spec.fc_norm and m.spec.norm_output
    start = methods.spec_flags(m.spec)
    assert methods.wanted_flags(cfg(), start) == start  # nothing asked: the checkpoint's
    assert methods.flag_changes(start, methods.wanted_flags(cfg(), start)) == []
    assert methods.method_of(m.spec) == "eagle3.1"
    asked = methods.wanted_flags(cfg(method="eagle3"), start)  # asked: a change, reported
    assert methods.flag_changes(start, asked) == [
        "fc_norm: true -> false",
        "norm_output: true -> false",
    ]


def test_flag_change_keeps_every_other_weight():
    torch.manual_seed(0)
    m = Eagle3Drafter(tiny_spec(fc_norm=True, norm_output=True))
    out = methods.with_flags(m, {"fc_norm": False, "norm_before_fc": True, "norm_output": True})
    got, was = out.state_dict(), m.state_dict()
    assert not any(n.startswith("fc_norm.") for n in got)
    assert torch.equal(got["input_norm.weight"], torch.ones(3 * 64))
    for n, t in was.items():
        if not n.startswith("fc_norm."):
            assert torch.equal(got[n], t), n
    assert out.spec.norm_before_fc and not out.spec.fc_norm


@pytest.mark.parametrize("norm_output", [False, True])
def test_unroll_feeds_what_the_flag_says(norm_output):
    """Step 1 of the unroll at t equals the drafter run by hand on the cache of pairs 0..t,
    then fed norm(h) (norm_output) or h (EAGLE-3) with x[t+2]."""
    torch.manual_seed(1)
    spec = tiny_spec(fc_norm=True, norm_output=norm_output, vocab_size=64, draft_vocab_size=64)
    d = Eagle3Drafter(spec).eval()
    d.t2d.fill_(True)
    d.embed_loaded = True
    ids = torch.randint(0, 64, (1, 10))
    aux = torch.randn(1, 10, 3 * 64)
    with torch.no_grad():
        steps = list(unroll(d, ids, aux, 2))
        nxt = shift(ids, 1)
        t = 6
        cache = DraftCache()
        first = d(nxt[:, : t + 1], aux[:, : t + 1], cache, from_aux=True)
        # by hand: the pre-norm state h of step 0 at t, then norm(h) or h
        plain = d.blank(spec.replace(norm_output=False))
        plain.load_canonical(d.canonical_state(with_embedding=True))
        h = plain(nxt[:, : t + 1], aux[:, : t + 1], DraftCache(), from_aux=True).hidden[:, -1:]
        fed = d.norm(h) if norm_output else h
        torch.testing.assert_close(first.hidden[:, -1:], fed, atol=1e-6, rtol=0)
        second = d(nxt[:, t + 1 : t + 2], fed, cache, from_aux=False)
    torch.testing.assert_close(second.logits[0, -1], steps[1][0, t], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_train_31_mla_then_warm_start_keeps_flags(tmp_path):
    """`train --method eagle3.1 --attention mla` writes a 3.1 MLA drafter; a warm start from it
    without flags keeps them (summary and RUN/best); SGLang's compat rules pass the result."""
    from conftest import run_cli
    from test_train_helpers import tiny_data, tiny_target, train_args

    data, target = tiny_data(), tiny_target()
    r = run_cli(
        *train_args(tmp_path / "a", data, target, "--method", "eagle3.1", "--attention", "mla"),
        "--steps",
        "2",
        "--json",
    )
    assert r.code == 0, r.err
    s = json.loads(r.out)
    assert s["method"] == "eagle3.1" and s["attention"] == "mla"
    assert s["flags"] == {"fc_norm": True, "norm_before_fc": False, "norm_output": True}
    warm = [
        a for a in train_args(tmp_path / "b", data, target) if a not in ("--draft-vocab-size", "96")
    ]
    r = run_cli(*warm, "--init-from", str(tmp_path / "a" / "best"), "--steps", "2", "--json")
    assert r.code == 0, r.err
    s = json.loads(r.out)
    assert s["method"] == "eagle3.1" and s["flags"]["fc_norm"] and s["flags"]["norm_output"]
    written = json.loads((tmp_path / "b" / "best" / "config.json").read_text())
    assert written["fc_norm"] is True and written["norm_output"] is True
    r = run_cli("compat", str(tmp_path / "b" / "best"), str(target), "--engine", "sglang")
    assert r.code == 0, r.out


def test_a_flag_change_is_a_warning():
    from eagle3kit.train.setup import _method_warnings

    c = SimpleNamespace(init_from="K26")
    assert _method_warnings(c, {"path": "K26"}) == []
    (w,) = _method_warnings(c, {"flags_changed": ["norm_output: true -> false"]})
    assert "K26" in w and "norm_output: true -> false" in w and "engines run it" in w
