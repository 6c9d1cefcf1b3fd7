"""MTP heads (methods/mtp/model.py) and decoding with them (methods/mtp/decode.py) on the tiny
DeepSeek-V3 zoo
member: checkpoint names as DeepSeek-V3 / Qwen3-Next ship them, strict loading, the head's own
cache, and lossless decoding (greedy token-identical to plain; sampled: the target's law)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from test_sampling_deep import LAW_P as P_LAW
from test_sampling_deep import LAW_Q as Q_LAW
from test_sampling_deep import PositionTarget
from test_train_helpers import headless_target

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode import greedy_generate
from eagle3kit.methods.mtp.checkpoint.layout import mtp_count, mtp_prefix
from eagle3kit.methods.mtp.decode import FinalHidden, mtp_generate
from eagle3kit.methods.mtp.model import (
    MTPCache,
    MTPHead,
    fuse_experts,
    split_experts,
)
from eagle3kit.model.loading import load_target

# DeepSeek-V3's MTP layer (deepseek-ai/DeepSeek-V3 README_WEIGHTS.md; vLLM deepseek_mtp.py)
# at model.layers.{L}: its own parts, then one decoder layer's (MLA + MoE, as the tiny's L-1)
DEEPSEEK_OWN = {
    "enorm.weight",
    "hnorm.weight",
    "eh_proj.weight",
    "embed_tokens.weight",
    "shared_head.norm.weight",
    "shared_head.head.weight",
}


@pytest.fixture(scope="module")
def member(tmp_path_factory):
    """The tiny DeepSeek member without the MTP layer it ships (these tests add their own)."""
    return headless_target(tmp_path_factory.mktemp("member"))


@pytest.fixture(scope="module")
def target(member):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny shapes: one thread is fastest, on a shared machine too
    torch.manual_seed(0)
    yield load_target(str(member))
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def plain(target):
    """A prompt and the target's greedy continuation of it."""
    prompt = target.tokenizer("def parse(text):\n    ")["input_ids"]
    out = greedy_generate(target, prompt, max_new_tokens=16).tokens
    target.reset()
    return prompt, out


@pytest.fixture(scope="module")
def head(target):
    return MTPHead.for_target(target).eval()


def test_experts_split_and_fuse_as_transformers_loads_them(target, member):
    file = load_file(str(member / "model.safetensors"))
    pre = "model.layers.7."
    mine = {k[len(pre) :]: v for k, v in file.items() if k.startswith(pre)}
    loaded = target.model.model.layers[7].state_dict()  # transformers' own fusion
    fused = fuse_experts(mine)
    assert set(fused) == set(loaded)
    assert all(torch.equal(fused[k], loaded[k]) for k in loaded)
    back = split_experts(loaded)
    assert set(back) == set(mine) and all(torch.equal(back[k], mine[k]) for k in mine)


def test_deepseek_head_carries_deepseek_v3_names(target, head, member):
    names = set(head.checkpoint_tensors())
    assert head.prefix == "model.layers.8." == mtp_prefix(target.config)  # L = 8 layers
    last = {
        k[len("model.layers.7.") :]
        for k in load_file(str(member / "model.safetensors"))
        if k.startswith("model.layers.7.")
    }
    assert names == {"model.layers.8." + n for n in DEEPSEEK_OWN | last}


def test_qwen3_next_head_carries_mtp_names():
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next import modeling_qwen3_next as q

    cfg = Qwen3NextConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        num_experts=2,
        num_experts_per_tok=1,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        layer_types=["linear_attention", "full_attention"],
        num_nextn_predict_layers=1,
    )
    emb, lm = torch.nn.Embedding(64, 32), torch.nn.Linear(32, 64, bias=False)
    h = MTPHead(cfg, q.Qwen3NextDecoderLayer, q.Qwen3NextRotaryEmbedding(cfg), emb, lm)
    names = set(h.checkpoint_tensors())
    own = {"mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"}
    assert own | {"mtp.norm.weight"} <= names
    assert "mtp.layers.0.self_attn.q_proj.weight" in names
    assert "mtp.layers.0.mlp.experts.1.down_proj.weight" in names
    assert all(n.startswith("mtp.") for n in names) and mtp_count(cfg) == 1
    out = h(torch.tensor([[1, 2, 3]]), torch.randn(1, 3, 32), MTPCache())
    assert out.logits.shape == (1, 3, 64)


def test_counts_read_under_text_config_too():
    assert mtp_count({"text_config": {"num_nextn_predict_layers": 2}}) == 2
    assert mtp_count({"mtp_num_hidden_layers": 1, "model_type": "qwen3_5"}) == 1
    assert mtp_count({"num_nextn_predict_layers": 0}) == 0


def test_strict_load_refuses_missing_extra_and_misshapen(target, head):
    good = head.checkpoint_tensors()
    fresh = MTPHead.for_target(target)
    fresh.load_checkpoint_tensors(good, "dir")  # round trip
    assert all(torch.equal(v, good[k]) for k, v in fresh.checkpoint_tensors().items())
    lost = {k: v for k, v in good.items() if not k.endswith("eh_proj.weight")}
    with pytest.raises(Eagle3Error, match="missing.*eh_proj"):
        fresh.load_checkpoint_tensors(lost, "dir")
    with pytest.raises(Eagle3Error, match="unexpected.*model.layers.8.bogus"):
        fresh.load_checkpoint_tensors({**good, "model.layers.8.bogus": torch.zeros(1)}, "dir")
    bent = {**good, "model.layers.8.enorm.weight": torch.zeros(3)}
    with pytest.raises(Eagle3Error, match="enorm.weight: expected shape"):
        fresh.load_checkpoint_tensors(bent, "dir")
    shared = {k: v for k, v in good.items() if "embed_tokens" not in k}  # the target's: filled
    fresh.load_checkpoint_tensors(shared, "dir")


def test_cached_steps_equal_one_full_pass(head):
    ids, hid = torch.tensor([[5, 6, 7, 8, 9]]), torch.randn(1, 5, 32)
    cache = MTPCache()
    with torch.no_grad():
        a = head(ids[:, :3], hid[:, :3], cache)
        b = head(ids[:, 3:], hid[:, 3:], cache)
        full = head(ids, hid)
    torch.testing.assert_close(torch.cat([a.logits, b.logits], 1), full.logits)
    cache.crop(2)
    assert cache.length == 2


class OracleHead:
    """Wraps a real head (its cache moves as the real one's) but answers with the target's
    own greedy continuation `seq` two places on, wrong at every 5th position: drafts get
    accepted, rejected and all accepted, so every branch of the cycle runs."""

    def __init__(self, head: MTPHead, seq: list[int]) -> None:
        self.head, self.seq, self.vocab_size = head, seq, head.vocab_size

    def __call__(self, ids, hidden, cache, position_ids=None, **kw):
        start = cache.length
        out = self.head(ids, hidden, cache, position_ids=position_ids, **kw)
        logits = torch.full_like(out.logits, -1e4)
        for j in range(ids.shape[1]):
            p = start + j + 2
            tok = self.seq[p] if p < len(self.seq) and p % 5 else 0
            logits[0, j, tok] = 0.0
        return SimpleNamespace(logits=logits, hidden=out.hidden)


@pytest.mark.parametrize("depth", [1, 3])
def test_greedy_is_token_identical_to_plain(target, head, plain, depth):
    prompt, plain = plain
    g = mtp_generate(target, head, prompt, max_new_tokens=16, depth=depth)  # random head
    target.reset()
    assert g.tokens == plain and g.stats.method == "mtp"
    oracle = OracleHead(head, prompt + plain)
    g = mtp_generate(target, oracle, prompt, max_new_tokens=16, depth=depth)
    target.reset()
    assert g.tokens == plain
    acc = [c.accepted for c in g.stats.cycles]
    assert max(acc) == depth and 0 in acc  # all accepted in some cycle, none in another


def test_target_dir_with_an_mtp_layer_loads(target, head, tmp_path, member):
    """A target whose checkpoint holds model.layers.{L}.* (num_nextn_predict_layers 1) loads
    as a target (transformers leaves the layer alone), and its head loads from its own dir."""
    import json
    import shutil

    from eagle3kit.core.atomic import save_safetensors
    from eagle3kit.methods.mtp.model import load_mtp_head

    src = member
    for f in src.iterdir():
        shutil.copy2(f, tmp_path / f.name)
    main = load_file(str(src / "model.safetensors"))
    save_safetensors(tmp_path / "model.safetensors", {**main, **head.checkpoint_tensors()})
    cfg = json.loads((src / "config.json").read_text())
    with pytest.raises(Eagle3Error, match="unexpected"):  # undeclared: refused as before
        load_target(str(tmp_path))
    cfg["num_nextn_predict_layers"] = 1
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    tm = load_target(str(tmp_path))
    got = load_mtp_head(tm)
    ref = head.checkpoint_tensors()
    assert all(torch.equal(v, ref[k]) for k, v in got.checkpoint_tensors().items())


def test_a_target_without_a_head_is_refused(target):
    from eagle3kit.methods.mtp.model import load_mtp_head

    with pytest.raises(Eagle3Error, match="num_nextn_predict_layers"):
        load_mtp_head(target)


# -- sampled: the decode loop with an MTP drafter emits the target's law ---------------------
V = 6


class PositionFeatures(PositionTarget, FinalHidden):
    """test_sampling_deep's PositionTarget (law after position t: P_LAW[t + 1]) as the
    hidden-state view mtp_generate decodes with; nothing to close."""

    def close(self) -> None:
        pass


class PositionHead:
    """A head whose law on its input at position t is Q_LAW[t + 2]; a real MTPCache."""

    vocab_size = V

    def __call__(self, ids, hidden, cache: MTPCache, **_):
        n, start = ids.shape[1], cache.length
        cache.kv.update(torch.zeros(1, 1, n, 1), torch.zeros(1, 1, n, 1), 0)
        pos = start + torch.arange(n)
        return SimpleNamespace(logits=Q_LAW[pos + 2].log()[None], hidden=torch.zeros(1, n, 4))


@pytest.mark.slow  # ~3 s: 600 decode loops
def test_sampled_decoding_emits_the_target_law():
    from test_sampling_deep import fits

    from eagle3kit.decode import Sampling

    n_new, counts, accepted = 6, torch.zeros(6, V), []
    for seed in range(600):
        g = mtp_generate(
            PositionFeatures(),
            PositionHead(),
            [0, 0],
            max_new_tokens=n_new,
            depth=3,
            sampling=Sampling(temperature=1.0),
            seed=seed,
        )
        for j, t in enumerate(g.tokens):
            counts[j, t] += 1
        accepted += [c.accepted for c in g.stats.cycles]
    assert 0 in accepted and max(accepted) >= 2
    for j in range(n_new):
        fits(counts[j], P_LAW[2 + j])


def test_head_dir_round_trip_in_the_extract_layout(target, head, tmp_path, member):
    """train's head dir is convert's extract layout: canonical names (the name after the
    layer's prefix), config.json eagle3kit_mtp.names -> the target's names; it loads back."""
    from eagle3kit.methods.mtp.model import head_config, is_head_dir, load_mtp_head
    from eagle3kit.methods.mtp.train.finetune import save_head

    save_head(head, target, tmp_path / "h", {"steps": 0})
    rec = head_config(tmp_path / "h")
    assert is_head_dir(tmp_path / "h") and not is_head_dir(member)
    stored = head.checkpoint_tensors()
    assert rec["names"] == {k[len("model.layers.8.") :]: k for k in stored}
    assert set(load_file(str(tmp_path / "h" / "model.safetensors"))) == set(rec["names"])
    got = load_mtp_head(target, tmp_path / "h").checkpoint_tensors()
    assert all(torch.equal(v, stored[k]) for k, v in got.items())


def test_convert_extract_and_stitch_meet_the_head(target, head, tmp_path, member):
    """Across the checkpoint layer (methods/mtp/checkpoint/heads.py, from the ck branch; skipped
    until it is
    merged): a head extracted by convert loads here, and a fine-tuned head saved here is put
    back by convert's stitch and read from the stitched target."""
    import json
    import shutil

    ck = pytest.importorskip("eagle3kit.methods.mtp.checkpoint.heads")
    from eagle3kit.core.atomic import save_safetensors
    from eagle3kit.methods.mtp.model import load_mtp_head
    from eagle3kit.methods.mtp.train.finetune import save_head

    dst = tmp_path / "target"
    shutil.copytree(member, dst)
    main = load_file(str(dst / "model.safetensors"))
    save_safetensors(dst / "model.safetensors", {**main, **head.checkpoint_tensors()})
    cfg = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**cfg, "num_nextn_predict_layers": 1}))
    tm = load_target(str(dst))
    ck.extract_mtp(str(dst), str(tmp_path / "ext"))
    ext = load_mtp_head(tm, tmp_path / "ext").checkpoint_tensors()
    assert all(torch.equal(v, ext[k]) for k, v in head.checkpoint_tensors().items())
    tuned = load_mtp_head(tm)
    with torch.no_grad():
        for p in tuned.layer.parameters():
            p.add_(0.01)
    save_head(tuned, tm, tmp_path / "tuned", {})
    ck.stitch_mtp(str(dst), str(tmp_path / "tuned"))
    back = load_mtp_head(load_target(str(dst))).checkpoint_tensors()
    assert all(torch.equal(v, back[k]) for k, v in tuned.checkpoint_tensors().items())
