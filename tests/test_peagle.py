"""P-EAGLE (methods/peagle/model.py, methods/peagle/decode.py, methods/peagle/train.py): lossless
greedy decoding on
both tiny zoo architectures, the decoder's parallel pass equal to the training unroll, the COD
pass equal to the full one on the elements it keeps, the checkpoint round trip, warm start."""

from __future__ import annotations

import pytest
import torch
from decode_helpers import HELD_OUT, hf_greedy_ids, new_drafter

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode import speculative_generate
from eagle3kit.methods.peagle.model import PEagleDrafter
from eagle3kit.methods.peagle.train import cod_anchors, cod_layout
from eagle3kit.model.drafter import DraftCache
from eagle3kit.train.ttt import ttt_mask, unroll

ARCHS = ["llama-v1", "dsv3-v1"]


@pytest.fixture(scope="module", params=ARCHS)
def target(request):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    return TargetModel.from_pretrained(zoo.get(request.param, size="tiny"))


def random_peagle(target, seed: int = 0, **flags) -> PEagleDrafter:
    d = new_drafter(target, seed=seed)
    if flags:
        from eagle3kit.train.flags import with_flags

        d = with_flags(
            d, {**{"fc_norm": False, "norm_before_fc": False, "norm_output": False}, **flags}
        )
    return PEagleDrafter.from_eagle3(d, mask_token_id=3, seed=seed).eval()


@pytest.mark.slow
def test_random_peagle_decodes_exactly_greedy(target):
    """Token for token the target's own greedy output (transformers' generate), K = 4."""
    d = random_peagle(target, norm_output=True, fc_norm=True)
    for text in HELD_OUT[:2]:
        ids = target.tokenizer(text)["input_ids"]
        want = hf_greedy_ids(target, ids, 20)
        got = speculative_generate(target, d, ids, max_new_tokens=20, depth=4)
        assert got.tokens == want, text
        assert all(c.drafted == 4 for c in got.stats.cycles[:-1])


def _features(target, n: int = 12):
    ids = target.tokenizer("def main(x):\n    return x + 1\n")["input_ids"][:n]
    out = target.prefill(torch.tensor([ids], device=target.device))
    return torch.tensor([ids]), out.aux  # [1, T], [1, T, 3Ht]


def test_decoder_pass_equals_the_training_unroll(target):
    """The decoder's slots after a prefix ending at t (cache of pairs 0..t, one pass) give the
    unroll's depth-i logits at t: what is trained is what is served."""
    d = random_peagle(target, seed=1, norm_output=True)
    ids, aux = _features(target)
    k, t_len = 3, ids.shape[1]
    with torch.no_grad():
        steps = list(unroll(d, ids, aux, k))  # k x [1, T, Vd]
        nxt = torch.cat([ids[:, 1:], ids.new_zeros(1, 1)], dim=1)
        for t in (2, t_len // 2, t_len - 3):
            cache = DraftCache()
            first = d(nxt[:, : t + 1], aux[:, : t + 1], cache, from_aux=True)
            slots = d.parallel_slots(k - 1, cache)
            torch.testing.assert_close(first.logits[0, -1], steps[0][0, t], atol=1e-5, rtol=0)
            for i in range(1, k):
                torch.testing.assert_close(
                    slots.logits[0, i - 1], steps[i][0, t], atol=1e-5, rtol=0
                )


def test_cod_mask_is_context_plus_own_chain():
    anchors = [torch.tensor([1, 3, 4]), torch.tensor([3])]
    anchor, depth, mask = cod_layout(6, anchors, "cpu")
    assert anchor.tolist() == [0, 1, 2, 3, 4, 5, 1, 3, 4, 3]
    assert depth.tolist() == [0] * 6 + [1, 1, 1, 2]
    for q in range(10):
        for k in range(10):
            ctx = depth[k] == 0 and anchor[k] <= anchor[q]
            own = anchor[k] == anchor[q] and 1 <= depth[k] <= depth[q]
            assert bool(mask[q, k]) == bool(ctx or own), (q, k)
    # the full layout (every anchor at every depth) is the TTT mask, block by block
    full = [torch.arange(6)] * 2
    _, _, m = cod_layout(6, full, "cpu")
    assert torch.equal(m[6:12, :6], ttt_mask(6, 2)[:, :6]) and torch.equal(
        m[6:12, 6:12], torch.eye(6, dtype=torch.bool)
    )


def test_cod_sizes_follow_the_ratio():
    valid = torch.ones(100, dtype=torch.bool)
    valid[95:] = False
    g = torch.Generator().manual_seed(0)
    a = cod_anchors(valid, 5, 0.7, 0.2, g)
    n = 95
    assert [x.numel() for x in a] == [int(max(0, n - d) * max(0.7**d, 0.2)) for d in range(1, 5)]
    for prev, cur in zip([torch.arange(100)] + a, a, strict=False):
        assert set(cur.tolist()) <= set(prev.tolist())  # nested chains
    for d, cur in enumerate(a, start=1):
        assert bool(valid[cur + d].all())


def test_cod_pass_equals_the_full_unroll_on_kept_elements(target):
    """One COD pass (subsampled depths, custom mask) gives the same logits as the full unroll
    at every (anchor, depth) it keeps."""
    d = random_peagle(target, seed=2, fc_norm=True)
    ids, aux = _features(target)
    t = ids.shape[1]
    anchors = cod_anchors(
        torch.ones(t, dtype=torch.bool), 3, 0.7, 0.2, torch.Generator().manual_seed(0)
    )
    anchor, depth, mask = cod_layout(t, anchors, "cpu")
    with torch.no_grad():
        full = list(unroll(d, ids, aux, 3))
        nxt = torch.cat([ids[0, 1:], ids.new_zeros(1)])
        sid, shid = d.slot_inputs(1, 1)
        first = depth == 0
        x = torch.where(first, nxt[anchor], sid[0, 0])
        h = torch.where(first[:, None], aux[0][anchor], shid[0, 0])
        out = d(x[None], h[None], None, (anchor + depth)[None], mask, from_aux=True)
    for j in range(anchor.numel()):
        want = full[int(depth[j])][0, int(anchor[j])]
        torch.testing.assert_close(out.logits[0, j], want, atol=1e-5, rtol=0)


def test_checkpoint_round_trip_and_loader(tmp_path, target):
    from eagle3kit.methods.peagle.model import save_peagle
    from eagle3kit.model.loading import load_drafter

    d = random_peagle(target, seed=3, norm_output=True)
    cfg = save_peagle(tmp_path / "pe", d.spec, d.canonical_state(), d.mask_token_id, None)
    assert cfg["speculators_model_type"] == "peagle" and cfg["mask_token_id"] == 3
    back = load_drafter(str(tmp_path / "pe")).drafter
    assert isinstance(back, PEagleDrafter) and back.mask_token_id == 3 and back.spec.norm_output
    for name, t in d.canonical_state(with_embedding=False).items():
        assert torch.equal(back.state_dict()[name], t), name


def test_warm_start_keeps_weights_and_vocab(target):
    e3 = new_drafter(target, seed=4)
    p = PEagleDrafter.from_eagle3(e3, mask_token_id=5)
    for name, t in e3.state_dict().items():
        assert torch.equal(p.state_dict()[name], t), name
    assert p.mask_hidden.shape == (1, 1, 3 * target.hidden_size)
    ids, aux = _features(target)
    with torch.no_grad():  # depth 0 is the EAGLE-3 drafter itself
        torch.testing.assert_close(p(ids, aux).logits, e3(ids, aux).logits, atol=0, rtol=0)


def test_tree_with_a_parallel_drafter_is_refused(target):
    from eagle3kit.decode import TreeShape

    with pytest.raises(Eagle3Error, match="P-EAGLE"):
        speculative_generate(target, random_peagle(target), [1, 2], tree=TreeShape(2, 4))


def test_cod_training_learns_the_slots(target):
    """A few AdamW steps on the COD loss lower it on a fixed batch, and mask_hidden moves
    (the slots' own state is trained, not only the shared weights)."""
    from eagle3kit.data.features import compute_features
    from eagle3kit.methods.peagle.train import cod_loss

    d = random_peagle(target, seed=5, norm_output=True).train()
    ids, _ = _features(target, n=16)
    am = torch.ones_like(ids, dtype=torch.bool)
    feats = compute_features(target, ids, am, am, d.d2t)
    before = d.mask_hidden.detach().clone()
    opt = torch.optim.AdamW([p for p in d.parameters() if p.requires_grad], lr=3e-3)
    losses = []
    for _ in range(6):
        g = torch.Generator().manual_seed(0)  # the same sample each step: a fair comparison
        s, n = cod_loss(d, feats, 4, gen=g)
        loss = s / n
        losses.append(float(loss.detach()))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < losses[0]
    assert not torch.equal(d.mask_hidden.detach(), before)


@pytest.mark.slow
def test_train_peagle_warm_start_and_eval(tmp_path):
    """`train --method peagle --init-from EAGLE3_RUN/best` keeps the vocab map, writes a
    speculators peagle checkpoint; `eval` reads it and says method peagle, per position."""
    import json

    from conftest import run_cli
    from test_train_helpers import tiny_data, tiny_target, train_args

    data, target = tiny_data(), tiny_target()
    r = run_cli(*train_args(tmp_path / "e3", data, target), "--steps", "2", "--json")
    assert r.code == 0, r.err
    warm = [
        a
        for a in train_args(tmp_path / "pe", data, target)
        if a not in ("--draft-vocab-size", "96")
    ]
    r = run_cli(
        *warm,
        "--init-from",
        str(tmp_path / "e3" / "best"),
        "--method",
        "peagle",
        "--ttt-steps",
        "4",
        "--steps",
        "2",
        "--json",
    )
    assert r.code == 0, r.err
    s = json.loads(r.out)
    assert s["method"] == "peagle" and s["init"]["peagle"]["mask_hidden"] == "added"
    cfg = json.loads((tmp_path / "pe" / "best" / "config.json").read_text())
    assert cfg["speculators_model_type"] == "peagle" and isinstance(cfg["mask_token_id"], int)
    from eagle3kit.model.loading import load_drafter

    e3 = load_drafter(str(tmp_path / "e3" / "best")).drafter
    pe = load_drafter(str(tmp_path / "pe" / "best")).drafter
    assert torch.equal(e3.d2t, pe.d2t)  # the vocab map kept
    r = run_cli(
        "eval",
        "--target",
        str(target),
        "--drafter",
        str(tmp_path / "pe" / "best"),
        "--data",
        str(data),
        "--heldout",
        "6",
        "--depth",
        "4",
        "--json",
    )
    assert r.code == 0, r.err
    e = json.loads(r.out)
    assert e["method"] == "peagle" and len(e["per_position_acceptance"]) == 4


def test_sampled_decoding_checks_every_slot_against_its_own_law(target, monkeypatch):
    """Sampling: each parallel slot's draft is drawn from its own q, and verification gets
    those K laws (the min(1, p/q) rule's input), in order."""
    from eagle3kit.decode import Sampling
    from eagle3kit.decode import speculative as S

    seen = []
    real = S.draft_probs_on_target

    def spy(q, drafter, v):
        seen.append(q.shape)
        return real(q, drafter, v)

    monkeypatch.setattr(S, "draft_probs_on_target", spy)
    d = random_peagle(target, seed=6)
    ids = target.tokenizer("def main(")["input_ids"]
    got = speculative_generate(target, d, ids, max_new_tokens=10, depth=3, sampling=Sampling(1.0))
    assert got.stats.new_tokens == 10 and seen
    assert all(s == (3, d.spec.draft_vocab_size) for s in seen)


def deep_peagle(target, layers: int, seed: int = 0, **flags) -> PEagleDrafter:
    """A random P-EAGLE drafter with `layers` decoder layers: layer 0 and the shared tensors
    as `random_peagle`'s, layers 1.. freshly initialised (seeded)."""
    base = random_peagle(target, seed=seed, **flags)
    torch.manual_seed(seed + 100)
    d = PEagleDrafter(base.spec, mask_token_id=base.mask_token_id, num_layers=layers)
    state = base.canonical_state(with_embedding=True)
    state.update({n: t for n, t in d.state_dict().items() if n.startswith("layers.")})
    d.load_canonical(state)
    return d.eval()


@pytest.mark.parametrize("layers", [2, 4])
@pytest.mark.slow
def test_multi_layer_peagle_decodes_exactly_greedy(target, layers):
    """A random 2- and 4-layer drafter (each later layer with its own KV cache through the
    cycles, cropped with the first) decodes token for token the target's greedy output."""
    d = deep_peagle(target, layers, seed=7, norm_output=True)
    assert len({n.split(".")[1] for n in d.state_dict() if n.startswith("layers.")}) == layers - 1
    for text in HELD_OUT[:2]:
        ids = target.tokenizer(text)["input_ids"]
        want = hf_greedy_ids(target, ids, 20)
        got = speculative_generate(target, d, ids, max_new_tokens=20, depth=4)
        assert got.tokens == want, text
        assert len(got.stats.cycles) < 20  # drafts were accepted: the cache was used


def test_multi_layer_later_layers_change_the_logits(target):
    """Layers 1.. run: the same weights with one later layer's o_proj scaled differ."""
    d = deep_peagle(target, 2, seed=8)
    ids, aux = _features(target)
    with torch.no_grad():
        before = d(ids, aux).logits
        d.layers["1"].self_attn.o_proj.weight.mul_(1.5)
        after = d(ids, aux).logits
    assert float((before - after).abs().max()) > 1e-3


def test_multi_layer_decoder_pass_equals_the_training_unroll(target):
    """With 3 layers, the decoder's cache (every layer's) then parallel slots give the
    unroll's depth-i logits at t, and one COD pass gives them at the elements it keeps."""
    d = deep_peagle(target, 3, seed=9, fc_norm=True)
    ids, aux = _features(target)
    k, t_len = 3, ids.shape[1]
    with torch.no_grad():
        steps = list(unroll(d, ids, aux, k))
        nxt = torch.cat([ids[:, 1:], ids.new_zeros(1, 1)], dim=1)
        for t in (2, t_len // 2, t_len - 3):
            cache = DraftCache()
            first = d(nxt[:, : t + 1], aux[:, : t + 1], cache, from_aux=True)
            assert [c.length for c in cache.deeper] == [t + 1, t + 1]
            slots = d.parallel_slots(k - 1, cache)
            torch.testing.assert_close(first.logits[0, -1], steps[0][0, t], atol=1e-5, rtol=0)
            for i in range(1, k):
                torch.testing.assert_close(
                    slots.logits[0, i - 1], steps[i][0, t], atol=1e-5, rtol=0
                )
        anchors = cod_anchors(
            torch.ones(t_len, dtype=torch.bool), k, 0.7, 0.2, torch.Generator().manual_seed(0)
        )
        anchor, depth, mask = cod_layout(t_len, anchors, "cpu")
        sid, shid = d.slot_inputs(1, 1)
        first = depth == 0
        x = torch.where(first, nxt[0][anchor], sid[0, 0])
        h = torch.where(first[:, None], aux[0][anchor], shid[0, 0])
        out = d(x[None], h[None], None, (anchor + depth)[None], mask, from_aux=True)
    for j in range(anchor.numel()):
        want = steps[int(depth[j])][0, int(anchor[j])]
        torch.testing.assert_close(out.logits[0, j], want, atol=1e-5, rtol=0)


def test_multi_layer_round_trip(tmp_path, target):
    """save_peagle writes layers 1.. and num_hidden_layers; load_drafter reads them back."""
    import json

    from safetensors import safe_open

    from eagle3kit.methods.peagle.model import save_peagle
    from eagle3kit.model.loading import load_drafter

    d = deep_peagle(target, 3, seed=10)
    save_peagle(tmp_path / "pe", d.spec, d.canonical_state(), d.mask_token_id, None)
    cfg = json.loads((tmp_path / "pe" / "config.json").read_text())
    assert cfg["transformer_layer_config"]["num_hidden_layers"] == 3
    with safe_open(str(tmp_path / "pe" / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert {"layers.1.mlp.up_proj.weight", "layers.2.self_attn.q_proj.weight"} <= names
    # a full vocabulary: no d2t/t2d, as speculators saves it (vLLM 0.33 refuses a d2t then)
    assert d.spec.draft_vocab_size == d.spec.vocab_size and not {"d2t", "t2d"} & names
    back = load_drafter(str(tmp_path / "pe")).drafter
    assert back.num_layers == 3
    for name, t in d.canonical_state(with_embedding=False).items():
        assert torch.equal(back.state_dict()[name], t), name


@pytest.mark.parametrize("layout", ["speculators", "vllm"])
def test_multi_layer_files_load_any_mask_hidden_view(tmp_path, layout):
    """A 2-layer drafter in speculators' layout (mask_hidden [1, 1, 3H]) and vLLM's native
    one ([1, 3H]: vLLM's load_weights views it as (1, -1)) loads, mask_hidden as [1, 1, 3H]
    holding the stored values; a file missing a later layer's tensor is refused."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from eagle3kit.methods.peagle.checkpoint.synthetic import tiny_peagle_spec, write_peagle
    from eagle3kit.model.loading import load_drafter

    spec = tiny_peagle_spec(layout, layers=2)
    f = write_peagle(tmp_path / "p", spec) / "model.safetensors"
    if layout == "vllm":  # the native view vLLM loads (load_weights: view(1, -1))
        every = load_file(str(f))
        every["mask_hidden"] = every["mask_hidden"].reshape(1, -1)
        save_file(every, str(f))
    with safe_open(str(f), "pt") as fh:
        stored = fh.get_tensor("mask_hidden")
        q1 = fh.get_tensor("layers.1.self_attn.q_proj.weight")
    assert stored.dim() == (3 if layout == "speculators" else 2)
    d = load_drafter(str(tmp_path / "p")).drafter
    assert d.num_layers == 2 and d.mask_hidden.shape == (1, 1, spec.mask_hidden_size)
    assert torch.equal(d.mask_hidden.detach(), stored.reshape(1, 1, -1).float())
    assert torch.equal(d.layers["1"].self_attn.q_proj.weight.detach(), q1.float())
    gone = "layers.1.mlp.up_proj.weight"
    write_peagle(tmp_path / "q", spec, omit=(gone,))
    with pytest.raises(Eagle3Error, match=gone.replace(".", r"\.")):
        load_drafter(str(tmp_path / "q"))


def test_bench_costs_above_level_one_refused_before_timing(target):
    """bench's costs at a level above 1 need a drafter pass at that batch, which a P-EAGLE
    drafter's parallel slots do not run here: refused in one line before any timing."""
    from eagle3kit.measure.bench import bench

    with pytest.raises(Eagle3Error, match=r"--concurrency: expected 1 .*P-EAGLE.*found 1,2"):
        bench(target, random_peagle(target), [[1, 2, 3]], repeats=1, levels=(1, 2))


def test_full_vocab_file_with_d2t_refused_by_vllm_033(tmp_path, target):
    """A full-vocabulary P-EAGLE file that carries d2t (another writer's): vLLM 0.33 has no
    draft_id_to_target_id parameter then and fails the load (docs/formats.md "Full-vocabulary
    drafters"); 0.21 registers one and loads it."""
    from safetensors.torch import load_file, save_file

    from eagle3kit import zoo
    from eagle3kit.checkpoint.compat import compat
    from eagle3kit.methods.peagle.model import save_peagle

    d = deep_peagle(target, 2, seed=11)
    save_peagle(tmp_path / "pe", d.spec, d.canonical_state(), d.mask_token_id, None)
    arch = "llama-v1" if target.config.model_type == "llama" else "dsv3-v1"
    member = zoo.get(arch, size="tiny")
    assert compat(str(tmp_path / "pe"), str(member), "vllm@0.33").compatible
    f = tmp_path / "pe" / "model.safetensors"
    every = load_file(str(f))
    every["d2t"] = torch.zeros(d.spec.vocab_size, dtype=torch.long)
    save_file(every, str(f))
    codes = lambda v: [x.code for x in compat(str(tmp_path / "pe"), str(member), v).findings]  # noqa: E731
    assert "engine-refuses" in codes("vllm@0.33") and "engine-refuses" not in codes("vllm@0.21")


@pytest.mark.slow
def test_two_layer_peer_drafter_fine_tunes_and_matches_speculators(tmp_path):
    """`train --method peagle --init-from` the 2-layer drafter speculators' own trainer wrote
    (tests/fixtures/peers): RUN/best keeps 2 layers, layer 1 and mask_hidden move, `generate`
    with default options equals plain greedy, and speculators' PEagleDraftModel (its own venv,
    when here) gives the same logits within 1e-4 on a COD sample and at the decoder's slots."""
    import json
    import sys
    from pathlib import Path

    from conftest import run_cli
    from test_train_helpers import tiny_data, tiny_target, train_args

    from eagle3kit.model.loading import load_drafter

    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    fixture = Path(__file__).parent / "fixtures/peers/speculators-0.9.0/peagle-2layer"
    data, tgt = tiny_data("llama-v1"), tiny_target("llama-v1")
    args = [
        a for a in train_args(tmp_path / "run", data, tgt) if a not in ("--draft-vocab-size", "96")
    ]
    args += ["--init-from", str(fixture), "--method", "peagle", "--ttt-steps", "4"]
    r = run_cli(*args, "--steps", "4", "--lr", "3e-3", "--json")
    assert r.code == 0, r.err
    best = tmp_path / "run" / "best"
    cfg = json.loads((best / "config.json").read_text())
    assert cfg["transformer_layer_config"]["num_hidden_layers"] == 2
    tuned, start = load_drafter(str(best)).drafter, load_drafter(str(fixture)).drafter
    assert tuned.num_layers == 2
    moved = tuned.layers["1"].mlp.up_proj.weight - start.layers["1"].mlp.up_proj.weight
    assert float(moved.abs().max()) > 1e-4
    gen = ("generate", "--target", "llama-v1-tiny", "--drafter", best, "--prompt", "def f(x):")
    r = run_cli(*gen, "--max-new-tokens", "16", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    from eagle3kit.decode import greedy_generate
    from eagle3kit.model.loading import load_target

    tm = load_target("llama-v1-tiny")
    eos = tm.tokenizer.eos_token_id
    assert (
        doc["tokens"]
        == greedy_generate(tm, doc["prompt_ids"], max_new_tokens=16, eos_token_id=eos).tokens
    )
    sys.path.insert(0, str(bench))
    from bench_train import peer_python

    python, why = peer_python()
    if python is None:
        pytest.skip(f"speculators' venv is not here: {why}")
    import peer_logits

    tuned.set_embedding(tm.embed_tokens.weight)
    seq = tm.tokenizer("def read_config(path):\n    with open(path) as f:\n")["input_ids"]
    seq = seq + greedy_generate(tm, seq, max_new_tokens=24, eos_token_id=eos).tokens
    out = peer_logits.peagle_vs_peer(tuned.eval(), best, tm, seq, python, tmp_path, 4)
    assert out["max_abs_diff_cod_pass"] <= 1e-4 and out["max_abs_diff_decoder_slots"] <= 1e-4
