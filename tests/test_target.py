"""TargetModel on the tiny zoo members: aux capture, KV-cache verify/rollback, bad input."""

from __future__ import annotations

import re

import pytest
import torch

from eagle3kit.core.errors import Eagle3Error

ARCHS = ["llama-v1", "dsv3-v1"]


@pytest.fixture(scope="module", params=ARCHS)
def target(request):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    return TargetModel.from_pretrained(zoo.get(request.param, size="tiny"))


def _ids(tm, b: int, t: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, tm.vocab_size, (b, t), generator=g)  # [B, T]


def test_shapes_and_properties(target):
    assert target.num_layers == 8
    assert target.aux_layers == (2, 4, 5)  # default_aux_layers(8)
    assert target.embed_tokens.weight.shape == (target.vocab_size, target.hidden_size)
    assert target.tokenizer is not None and target.tokenizer.chat_template
    out = target(_ids(target, 2, 7))
    assert out.logits.shape == (2, 7, target.vocab_size)
    assert out.aux.shape == (2, 7, 3 * target.hidden_size)
    assert target.identity()["aux_convention"] == "hf"


@pytest.mark.parametrize("aux", [None, (0, 1, 7), (3, 3, 6)])
def test_aux_equals_output_hidden_states(target, aux):
    from eagle3kit.model.target import TargetModel

    tm = target if aux is None else TargetModel(target.model, aux_layers=aux)
    ids = _ids(tm, 2, 11)
    out = tm(ids)
    with torch.no_grad():
        ref = tm.model(input_ids=ids, output_hidden_states=True)
    want = torch.cat([ref.hidden_states[i] for i in tm.aux_layers], dim=-1)  # [B, T, 3H]
    assert torch.equal(out.aux, want)
    assert torch.equal(out.logits, ref.logits)
    if tm is not target:
        tm.close()


def test_forward_does_not_request_all_hidden_states(target, monkeypatch):
    seen = {}
    real = target.model.forward

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(target.model, "forward", spy)
    target(_ids(target, 1, 5))
    assert not seen.get("output_hidden_states")


def test_verify_then_rollback_matches_fresh_forward(target):
    seq = _ids(target, 1, 20, seed=1)[0]  # [20]
    p = 8
    target.prefill(seq[:p][None])
    v1 = target.verify(seq[p : p + 5][None])  # 5 drafts
    assert v1.logits.shape == (1, 5, target.vocab_size)
    assert v1.aux.shape == (1, 5, 3 * target.hidden_size)
    target.crop(p + 2)  # accept 2 of them
    assert target.seq_len == p + 2
    alt = torch.tensor([7, 9, 11])  # 3 new tokens after the accepted prefix
    v2 = target.verify(alt[None])
    full = torch.cat([seq[: p + 2], alt])[None]  # [1, p+5]
    ref = target(full)
    torch.testing.assert_close(v2.logits, ref.logits[:, p + 2 :], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v2.aux, ref.aux[:, p + 2 :], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v1.logits[:, :2], ref.logits[:, p : p + 2], atol=1e-5, rtol=1e-5)
    target.rollback(3)
    assert target.seq_len == p + 2


def test_generate_greedy_matches_hf_generate(target):
    """The one greedy KV-cache decoder (eagle3kit.decode) over this TargetModel equals
    transformers' own generate."""
    from eagle3kit.decode import greedy_generate

    prompt = _ids(target, 1, 6, seed=2)
    got = greedy_generate(target, prompt[0], max_new_tokens=12).tokens
    with torch.no_grad():
        ref = target.model.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=12,
            min_new_tokens=12,
            do_sample=False,
            pad_token_id=0,
        )
    assert got == ref[0, 6:].tolist()


def test_batch_forward_right_padding(target):
    a, b = _ids(target, 1, 9, seed=3), _ids(target, 1, 6, seed=4)
    pad = torch.zeros(1, 3, dtype=torch.long)
    ids = torch.cat([a, torch.cat([b, pad], dim=1)])  # [2, 9]
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    out = target(ids, attention_mask=mask)
    single = target(b)
    torch.testing.assert_close(out.logits[1:, :6], single.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.aux[1:, :6], single.aux, atol=1e-5, rtol=1e-5)


# A tree over the root r (row 0): r -> a, r -> b, b -> c, b -> e, c -> f; rows in that order.
TREE_PARENTS = [-1, 0, 0, 2, 2, 3]
TREE_DEPTHS = [0, 1, 1, 2, 2, 3]


def _tree_mask() -> torch.Tensor:
    m = torch.eye(6, dtype=torch.bool)  # [6, 6]
    for i, p in enumerate(TREE_PARENTS):
        if p >= 0:
            m[i] |= m[p]
    return m


def test_verify_tree_equals_each_path_alone(target):
    """One tree forward (4D mask, explicit positions) gives every node the logits and aux of
    its own path run as a plain sequence."""
    prefix = _ids(target, 1, 7, seed=5)  # [1, 7]
    toks = _ids(target, 1, 6, seed=6)[0]  # [6] tree tokens
    target.prefill(prefix)
    pos = torch.tensor([[7 + d for d in TREE_DEPTHS]])  # [1, 6]
    v = target.verify_tree(toks[None], pos, _tree_mask())
    assert target.seq_len == 7 + 6
    for i in range(6):
        path, j = [], i
        while j >= 0:
            path.insert(0, j)
            j = TREE_PARENTS[j]
        ref = target(torch.cat([prefix[0], toks[path]])[None])  # the path alone
        torch.testing.assert_close(v.logits[0, i], ref.logits[0, -1], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v.aux[0, i], ref.aux[0, -1], atol=1e-5, rtol=1e-5)


def test_keep_gathers_a_scattered_path(target):
    """After a tree verify, keep(prefix + r, b, e) holds exactly that path: the next verify
    equals a fresh forward over prefix + path + next token."""
    prefix = _ids(target, 1, 7, seed=5)
    toks = _ids(target, 1, 6, seed=6)[0]
    target.prefill(prefix)
    pos = torch.tensor([[7 + d for d in TREE_DEPTHS]])
    target.verify_tree(toks[None], pos, _tree_mask())
    path = [0, 2, 4]  # r, b, e: not contiguous in the cache (a and c sit between)
    target.keep(list(range(7)) + [7 + i for i in path])
    assert target.seq_len == 10
    nxt = torch.tensor([[11, 12]])
    v = target.verify(nxt)
    ref = target(torch.cat([prefix[0], toks[path], nxt[0]])[None])
    torch.testing.assert_close(v.logits[0], ref.logits[0, -2:], atol=1e-5, rtol=1e-5)
    for layer in target.cache.layers:
        assert layer.keys.shape[-2] == 12 and layer.values.shape[-2] == 12


def test_bad_tree_use(target):
    target.prefill(torch.tensor([[5, 6, 7]]))
    with pytest.raises(Eagle3Error, match=r"tree_mask must be \[2, 2\]"):
        target.verify_tree(torch.tensor([[1, 2]]), torch.tensor([[3, 4]]), torch.ones(3, 3).bool())
    with pytest.raises(Eagle3Error, match="ascending"):
        target.keep([0, 2, 1])
    with pytest.raises(Eagle3Error, match=r"0\.\.2"):
        target.keep([0, 3])


@pytest.mark.parametrize(
    "aux, needle",
    [
        ((2, 4, 8), "aux layer 8 is out of range: valid ids are 0..7"),
        ((-1, 2, 3), "aux layer -1"),
        ((2.0, 3, 4), "expected ints"),
        ((), "at least one"),
    ],
)
def test_bad_aux_layers(target, aux, needle):
    from eagle3kit.model.target import TargetModel

    with pytest.raises(Eagle3Error, match=re.escape(needle)):
        TargetModel(target.model, aux_layers=aux)


def test_bad_incremental_use(target):
    target.reset()
    with pytest.raises(Eagle3Error, match="prefill"):
        target.verify(torch.tensor([[1, 2]]))
    target.prefill(torch.tensor([[5, 6, 7]]))
    with pytest.raises(Eagle3Error, match=r"out of range 0\.\.3"):
        target.crop(4)
    with pytest.raises(Eagle3Error, match="rollback"):
        target.rollback(5)


def test_from_pretrained_bad_path(tmp_path):
    from eagle3kit.model.target import TargetModel

    with pytest.raises(Eagle3Error, match="no such directory"):
        TargetModel.from_pretrained(tmp_path / "missing")
    with pytest.raises(Eagle3Error, match="no config.json"):
        TargetModel.from_pretrained(tmp_path)
    with pytest.raises(Eagle3Error, match="dtype"):
        TargetModel.from_pretrained(tmp_path, dtype="float8")
