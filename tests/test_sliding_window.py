"""Sliding-window drafters (model/attention.py, checkpoint/engines/windows.py): the window by
key position, training-time test against decoding, decoding token-identical to plain greedy
on both tiny members (chain and tree, EAGLE-3; DFlash blocks) while the draft cache forgets
what left the window, `train --sliding-window`, and the config keys through every layout."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from decode_helpers import HELD_OUT, accepting_drafter_dir

from eagle3kit.decode import TreeShape, greedy_generate, speculative_generate
from eagle3kit.decode.speculative import SpecDecoder
from eagle3kit.model.drafter import DraftCache, Eagle3Drafter
from eagle3kit.train.setup import with_window
from eagle3kit.train.ttt import ttt_forward

ARCHS = ["llama-v1", "dsv3-v1"]
W = 6  # shorter than every prompt plus its answer: the window and the forgetting both act


@pytest.fixture(scope="module", params=ARCHS)
def arch(request):
    return request.param


@pytest.fixture(scope="module")
def target(arch):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    return TargetModel.from_pretrained(zoo.get(arch, size="tiny"))


@pytest.fixture(scope="module")
def trained(arch):
    """The committed accepting drafter of this member (tau well above 1: cycles accept)."""
    from eagle3kit import zoo
    from eagle3kit.model.loading import load_pair

    return load_pair(str(zoo.get(arch, size="tiny")), accepting_drafter_dir(arch))[1]


def _random(target, window: int | None, seed: int = 0) -> Eagle3Drafter:
    torch.manual_seed(seed)
    return Eagle3Drafter.for_target(target, sliding_window=window).eval()


def test_window_hides_exactly_the_keys_before_it(target):
    """A query at position p reads keys at p - W + 1..p only: changing the inputs at earlier
    positions leaves its output unchanged, changing the one at p - W + 1 does not; with W at
    least the length, the drafter is the full-attention one."""
    d = _random(target, W)
    n = 3 * W
    torch.manual_seed(1)
    ids = torch.randint(0, target.vocab_size, (1, n))
    aux = torch.randn(1, n, d.spec.fc_in_features)
    with torch.no_grad():
        base = d(ids, aux, from_aux=True).logits[0, -1]
        far = aux.clone()
        far[0, : n - W] += 5.0  # every position out of the last query's window
        assert torch.equal(d(ids, far, from_aux=True).logits[0, -1], base)
        near = aux.clone()
        near[0, n - W] += 5.0  # the oldest position inside it
        assert not torch.allclose(d(ids, near, from_aux=True).logits[0, -1], base)
        wide = with_window(_random(target, None), n)
        full = _random(target, None)
        assert torch.equal(
            wide(ids, aux, from_aux=True).logits, full(ids, aux, from_aux=True).logits
        )


def test_ttt_steps_equal_decoding_with_the_window(target):
    """Step i of training-time test at position t is what decoding computes for the draft at
    position t + i after the prefix 0..t, window and all (train/ttt.py alignment)."""
    d = _random(target, W)
    n, t = 4 * W, 3 * W
    torch.manual_seed(2)
    ids = torch.randint(0, target.vocab_size, (1, n))
    aux = torch.randn(1, n, d.spec.fc_in_features)
    feats = SimpleNamespace(input_ids=ids, aux=aux)
    with torch.no_grad():
        steps = ttt_forward(d, feats, 3)
        cache = DraftCache()
        out = d(torch.cat([ids[:, 1:], ids[:, :1]], 1)[:, : t + 1], aux[:, : t + 1], cache)
        hidden = out.hidden[:, -1:]
        assert torch.allclose(out.logits[0, -1], steps[0][0, t], atol=1e-5)
        for i in (1, 2):
            out = d(ids[:, t + 1 + i : t + 2 + i], hidden, cache, from_aux=False)
            hidden = out.hidden
            assert torch.allclose(out.logits[0, -1], steps[i][0, t], atol=1e-5), i


class Recording(SpecDecoder):
    """The decoder, keeping its draft cache for the test to look at."""

    seen: list[DraftCache] = []

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        Recording.seen.append(self.cache)


@pytest.mark.parametrize("shape", [None, TreeShape(topk=3, budget=10)], ids=["chain", "tree"])
@pytest.mark.slow
def test_decoding_with_a_window_is_token_identical_to_greedy(target, trained, shape):
    """The member's accepting drafter run with window W: every answer equals plain greedy,
    cycles still accept, and the draft cache dropped the keys that left the window."""
    d = with_window(trained, W).eval()
    assert d.midlayer.self_attn.window == W
    eos = target.tokenizer.eos_token_id
    taus = []
    for text in HELD_OUT[:2]:
        ids = target.tokenizer(text)["input_ids"]
        want = greedy_generate(target, ids, max_new_tokens=24, eos_token_id=eos).tokens
        Recording.seen.clear()
        got = speculative_generate(
            target,
            d,
            ids,
            max_new_tokens=24,
            depth=3,
            tree=shape,
            eos_token_id=eos,
            decoder=Recording,
        )
        assert got.tokens == want, text
        taus.append(got.stats.tau_online)
        cache = Recording.seen[0]
        assert cache.start > 0 and cache.k.shape[2] < cache.length  # forgotten, not kept
    assert max(taus) > 1.0, taus


@pytest.mark.slow
def test_dflash_sliding_layers_token_identical_to_greedy(target):
    """A DFlash drafter whose every layer slides (bidirectional in the block, as `train
    --method dflash --sliding-window W` makes it): lossless on the member."""
    from eagle3kit.methods.dflash.model import DFlashDrafter

    torch.manual_seed(3)
    ids = tuple(a - 1 for a in target.aux_layers)  # z-lab ids of the layers the target gives
    d = DFlashDrafter.for_target(
        target, num_hidden_layers=2, block_size=4, target_layer_ids=ids, sliding_window=W
    )
    assert d.spec.layer_types == ("sliding_attention",) * 2 and d.spec.causal == (False, False)
    eos = target.tokenizer.eos_token_id
    for text in HELD_OUT[:2]:
        ids = target.tokenizer(text)["input_ids"]
        want = greedy_generate(target, ids, max_new_tokens=20, eos_token_id=eos).tokens
        got = speculative_generate(target, d, ids, max_new_tokens=20, depth=3, eos_token_id=eos)
        assert got.tokens == want, text


@pytest.mark.slow
def test_train_sliding_window_writes_a_windowed_drafter(tmp_path, arch):
    """`train --sliding-window W` (two steps): RUN/best's config carries layer_types and the
    window, and reads back as a windowed drafter."""
    from eagle3kit import zoo
    from eagle3kit.data.prepare import prepare
    from eagle3kit.train.config import TrainConfig
    from eagle3kit.train.loop import train

    src = tmp_path / "chats.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": p * 3}]}
        for p in ("def f(x):", "import os", "class A:", "for i in range(3):") * 3
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    member = str(zoo.get(arch, size="tiny"))
    prepare([src], member, tmp_path / "data", max_length=64)
    cfg = TrainConfig(
        out=str(tmp_path / "run"),
        target=member,
        data=str(tmp_path / "data"),
        steps=2,
        batch_size=2,
        ttt_steps=2,
        sliding_window=W,
        heldout=2,
        eval_samples=2,
        max_len=64,
    )
    train(cfg)
    config = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    assert config["layer_types"] == ["sliding_attention"] and config["sliding_window"] == W
    assert Eagle3Drafter.from_pretrained(tmp_path / "run" / "best").spec.sliding_window == W


def test_train_dflash_sliding_window_writes_sliding_bidirectional_layers(tmp_path):
    """`train --method dflash --sliding-window W` (two steps on the DeepSeek tiny member):
    RUN/best's z-lab config has every layer sliding with window W and says `is_causal: false`
    (sliding layers are causal by default in both engines), and reads back the same."""
    from eagle3kit import zoo
    from eagle3kit.data.prepare import prepare
    from eagle3kit.methods.dflash.model import DFlashDrafter
    from eagle3kit.methods.dflash.train.loop import train_dflash
    from eagle3kit.methods.dflash.train.step import DFlashOptions
    from eagle3kit.train.config import TrainConfig

    member = str(zoo.get("dsv3-v1", size="tiny"))
    src = tmp_path / "chats.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"f{i}?"},
                {"role": "assistant", "content": f"def f{i}(x):\n    return x + {i}\n" * 3},
            ]
        }
        for i in range(8)
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepare([src], member, tmp_path / "data", max_length=64)
    cfg = TrainConfig(
        out=str(tmp_path / "run"),
        target=member,
        data=str(tmp_path / "data"),
        steps=2,
        batch_size=2,
        heldout=2,
        eval_samples=2,
        max_len=64,
    )
    train_dflash(cfg, DFlashOptions(block_size=4, anchors=2, sliding_window=W))
    config = json.loads((tmp_path / "run" / "best" / "config.json").read_text())
    assert config["layer_types"] == ["sliding_attention"] and config["sliding_window"] == W
    assert config["is_causal"] is False
    spec = DFlashDrafter.from_pretrained(tmp_path / "run" / "best").spec
    assert spec.sliding_window == W and spec.causal == (False,)


def test_max_len_within_the_targets_positions():
    """--max-len up to the target's max_position_embeddings (2048 for every zoo member), no
    further; a config without the key sets no bound."""
    from eagle3kit.core.errors import Eagle3Error
    from eagle3kit.train.setup import check_max_len

    check_max_len(2048, {"max_position_embeddings": 2048})
    check_max_len(10**6, {})
    with pytest.raises(Eagle3Error, match=r"--max-len: expected at most .* \(2048\), found 2049"):
        check_max_len(2049, {"text_config": {"max_position_embeddings": 2048}})
