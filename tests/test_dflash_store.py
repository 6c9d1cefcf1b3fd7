"""DFlash drafters offline from a feature store (`eval --features`) and `probe` on a new
target version: the store holds the drafter's target layers (h-indices = z-lab ids + 1) and
the target's greedy tokens; nothing of the target but its embedding/lm_head is read."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from test_train_helpers import tiny_data, tiny_target

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.methods.dflash.model import DFlashDrafter

ZLAB_IDS = (1, 3)  # h-indices 2, 4
pytestmark = pytest.mark.slow  # ~25 s on the 2-core machine: a target, a store capture


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from eagle3kit.data.store import capture
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("dfstore")
    path = tiny_target("dsv3-v1")
    tm = TargetModel.from_pretrained(path, aux_layers=[2, 4])
    capture(tiny_data("dsv3-v1"), tm, tmp / "store", topk=8)
    torch.manual_seed(0)
    d = DFlashDrafter.for_target(tm, num_hidden_layers=2, block_size=6, target_layer_ids=ZLAB_IDS)
    d.save_pretrained(tmp / "zlab")
    return SimpleNamespace(tmp=tmp, path=path, tm=tm, d=d.eval())


def _drafts(d, feats, lm):
    """The drafter's proposals (argmax per block slot) at every answer position."""
    from eagle3kit.methods.dflash.train.step import block_logits, blocks_at

    anchors = lm.nonzero().view(1, -1)
    blocks = blocks_at(
        feats,
        anchors,
        torch.ones_like(anchors, dtype=torch.bool),
        d.spec.block_size,
        d.spec.mask_token_id,
    )
    return block_logits(d, feats, blocks).argmax(-1)[:, :, 1:]


def test_eval_features_equals_online_eval(env):
    """`evaluate_store` on a DFlash drafter (dispatched by its config) scores the store's
    held-out rows as `evaluate_offline_dflash` scores the same tokens with the target run
    here; the drafts from the store's (fp8) features are those from the target's own, and
    the same features at the wrong layers give other drafts (so the check can fail)."""
    from eagle3kit.data.features import compute_features
    from eagle3kit.data.store import FeatureStore
    from eagle3kit.measure.evaluate import evaluate_store
    from eagle3kit.measure.store_features import held_rows
    from eagle3kit.methods.dflash.measure.offline import evaluate_offline_dflash

    store = env.tmp / "store"
    got = evaluate_store(str(env.tmp / "zlab"), store, 5, target=str(env.path), heldout=8)
    fs = FeatureStore(store)
    rows, _ = held_rows(fs, 8)
    samples, same, swapped, total = [], 0, 0, 0
    for r in rows:
        f = fs.get([r], [2, 4])
        ids, lm = f.input_ids[0], f.loss_mask[0]
        samples.append((ids, lm.long()))
        am = torch.ones(1, len(ids), dtype=torch.bool)
        full = torch.zeros(env.tm.vocab_size, dtype=torch.long)  # d2t of the whole vocabulary
        ours = compute_features(env.tm, ids[None], am, lm[None], full)
        with torch.no_grad():
            want = _drafts(env.d, ours, lm)
            same += int((_drafts(env.d, f, lm) == want).sum())
            swapped += int((_drafts(env.d, fs.get([r], [4, 2]), lm) == want).sum())
        total += want.numel()
    # fp8 flips a few of a random drafter's near-ties: 96% equal; wrong layers: 64%
    assert same >= 0.92 * total and swapped < 0.8 * total, (same, swapped, total)
    data = SimpleNamespace(samples=samples, skipped=[], source="store rows")
    want = evaluate_offline_dflash(env.tm, env.d, data, 5)
    assert got["method"] == "dflash" and got["aux_layers"] == [2, 4] and got["samples"] == 8
    assert (
        got["all_positions"]["counted"]
        == want["all_positions"]["counted"]
        == int(sum(lm.sum() for _, lm in samples))
    )
    for key in ("tau_walk", "tau_every_position"):
        assert got[key] == pytest.approx(want[key], abs=0.05), key


def test_eval_features_refuses_a_store_without_the_layers(env):
    torch.manual_seed(1)
    d = DFlashDrafter.for_target(env.tm, num_hidden_layers=1, block_size=4, target_layer_ids=(5,))
    d.save_pretrained(env.tmp / "other")
    from eagle3kit.measure.evaluate import evaluate_store

    with pytest.raises(Eagle3Error, match=r"store holds h\[2, 4\]"):
        evaluate_store(str(env.tmp / "other"), env.tmp / "store", 3, target=str(env.path))


def test_capture_layers_of_a_dflash_drafter(env):
    """`data capture --drafter D` for a DFlash D: its h-indices (z-lab ids + 1) first, and
    with --probe-layers the other reading of its ids (h[id], what an engine one layer off
    captures)."""
    from eagle3kit.live.capture import capture_layers, drafter_aux

    path = str(env.tmp / "zlab")
    assert drafter_aux(path, None, 8) == (2, 4)
    with pytest.raises(Eagle3Error, match=r"--aux-layers.*h\[2, 4\]"):
        drafter_aux(path, [1, 3], 8)
    assert capture_layers(path, None, None, True, 8) == ((2, 4), (2, 4, 1, 3))


def test_probe_a_dflash_drafter_on_a_new_version(env):
    """`probe` with a DFlash drafter: against its own target as the reference the similarity
    is exact and both acceptances equal; on the next version (dsv3-v2) it runs the readings
    of its ids, block acceptance, similarity and a verdict."""
    from eagle3kit.measure.probe import probe

    d = str(env.tmp / "zlab")
    kw = dict(samples=4, max_len=64, online_prompts=1, online_tokens=8, depth=4)
    same = probe(d, str(env.path), reference=str(env.path), **kw)
    assert same["method"] == "dflash" and same["depth"] == 4
    assert [c["reading"] for c in same["aux"]["candidates"]] == ["h[id+1]", "h[id]"]
    assert same["aux"]["chosen"]["layers"] in ([2, 4], [1, 3])
    acc = same["acceptance"]
    assert acc["target"]["tau_every_position"] == acc["reference"]["tau_every_position"]
    assert same["fc_similarity"]["cosine_mean"] == pytest.approx(1.0, abs=1e-5)
    v2 = probe(d, str(tiny_target("dsv3-v2")), reference=str(env.path), **kw)
    assert v2["fc_similarity"]["cosine_mean"] < 0.999
    assert v2["verdict"] in ("plug-in", "fine-tune", "from-scratch") and v2["reasons"]
