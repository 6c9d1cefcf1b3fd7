"""Speculative decoding (eagle3kit.decode): lossless greedy chain and tree on both zoo
architectures, the sampling rule's distribution, stats, bad input."""

from __future__ import annotations

import pytest
import torch
from decode_helpers import HELD_OUT, accepting_drafter_dir, new_drafter

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode import (
    Cycle,
    DecodeStats,
    Sampling,
    TreeShape,
    greedy_generate,
    speculative_generate,
)
from eagle3kit.decode.sampling import accept_sampled, probs

ARCHS = ["llama-v1", "dsv3-v1"]
N_NEW = 24
SHAPES = {"chain": None, "tree": TreeShape(topk=3, budget=10)}


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
    """A drafter trained briefly (training-time test, k=3) on the target's own greedy text,
    with a draft vocabulary of half the target's (so d2t mapping is exercised): the fixture
    copy in tests/fixtures, rebuilt by decode_helpers when the target's recipe changed."""
    from eagle3kit import zoo
    from eagle3kit.model.loading import load_pair

    return load_pair(str(zoo.get(arch, size="tiny")), accepting_drafter_dir(arch))[1]


def hf_greedy(target, ids: list[int], n: int) -> list[int]:
    """transformers' own greedy decoding, EOS and what follows dropped."""
    eos = target.tokenizer.eos_token_id
    with torch.no_grad():
        out = target.model.generate(
            torch.tensor([ids]), do_sample=False, max_new_tokens=n, eos_token_id=eos, pad_token_id=0
        )[0, len(ids) :].tolist()
    return out[: out.index(eos)] if eos in out else out


def _check_lossless(target, drafter, shape, prompts=HELD_OUT, depth=3):
    eos = target.tokenizer.eos_token_id
    taus = []
    for text in prompts:
        ids = target.tokenizer(text)["input_ids"]
        want = hf_greedy(target, ids, N_NEW)
        got = speculative_generate(
            target,
            drafter,
            ids,
            max_new_tokens=N_NEW,
            depth=depth,
            tree=SHAPES[shape],
            eos_token_id=eos,
        )
        assert got.tokens == want, (text, shape)
        assert got.prompt_ids == ids
        assert got.stats.new_tokens == len(want)
        taus.append(got.stats.tau_online)
    return taus


@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_greedy_lossless_random_drafter(target, shape):
    taus = _check_lossless(target, new_drafter(target), shape, HELD_OUT[:1])
    assert all(t >= 1.0 for t in taus)


def test_greedy_lossless_mla_drafter(target):
    """An MLA drafter (Kimi-K2.5's kind) through the same API: chain and tree stay lossless."""
    from eagle3kit.model.drafter import Eagle3Drafter

    if target.config.model_type == "llama":
        pytest.skip("MLA drafters go with the DeepSeek-V3 target")
    torch.manual_seed(0)
    d = Eagle3Drafter.for_target(target, attention="mla").eval()
    for shape in SHAPES:
        _check_lossless(target, d, shape, HELD_OUT[:1])


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_greedy_lossless_trained_drafter(target, trained, shape):
    taus = _check_lossless(target, trained, shape)
    # the drafter must actually get drafts accepted, or acceptance and cache cropping
    # were never exercised
    assert max(taus) > 2.0, taus


def test_greedy_baseline_equals_hf(target):
    ids = target.tokenizer(HELD_OUT[0])["input_ids"]
    g = greedy_generate(
        target, ids, max_new_tokens=N_NEW, eos_token_id=target.tokenizer.eos_token_id
    )
    assert g.tokens == hf_greedy(target, ids, N_NEW)
    assert len(g.stats.cycles) == len(g.tokens) - 1


def test_tree_of_one_branch_is_the_chain(target):
    d = new_drafter(target, seed=3)
    ids = target.tokenizer(HELD_OUT[1])["input_ids"]
    c = speculative_generate(target, d, ids, max_new_tokens=12, depth=3)
    t = speculative_generate(target, d, ids, max_new_tokens=12, depth=3, tree=TreeShape(1, 3))
    assert c.tokens == t.tokens
    assert [x.accepted for x in c.stats.cycles] == [x.accepted for x in t.stats.cycles]
    assert [x.drafted for x in t.stats.cycles] == [3] * len(t.stats.cycles)


def chi2_pvalue(counts: torch.Tensor, expected: torch.Tensor) -> float:
    """Pearson chi-square p-value (cells with expected >= 5; the rest pooled)."""
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum()[None]]).double()
    exp = torch.cat([expected[big], expected[~big].sum()[None]]).double()
    if exp[-1] < 5:  # pooled rest too small: fold it into the largest cell
        obs, exp = obs[:-1], exp[:-1]
        obs[0] += counts[~big].sum()
        exp[0] += expected[~big].sum()
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = obs.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2.0), torch.tensor(stat / 2.0)))


def test_accept_rule_emits_the_target_distribution():
    """accept_sampled on hand-made p, q over 6 tokens: the first emitted token ~ p[0], and a
    clearly different law is rejected by the same test (it can fail)."""
    p = torch.tensor([[0.40, 0.25, 0.15, 0.10, 0.07, 0.03]] * 3)  # [k+1, V]
    q = torch.tensor([[0.05, 0.05, 0.50, 0.30, 0.05, 0.05]] * 2)  # [k, V], far from p
    gen = torch.Generator().manual_seed(0)
    n = 6000
    first = torch.zeros(6)
    for _ in range(n):
        drafts = [int(torch.multinomial(q[i], 1, generator=gen)) for i in range(2)]
        a, nxt = accept_sampled(p, q, drafts, gen)
        first[drafts[0] if a >= 1 else nxt] += 1
    assert chi2_pvalue(first, n * p[0]) > 0.01
    assert chi2_pvalue(first, n * q[0]) < 1e-6


def test_top_p_and_temperature():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0]).log_softmax(-1)
    full = probs(logits, Sampling(1.0))
    assert torch.allclose(full, logits.exp())
    cut = probs(logits, Sampling(1.0, top_p=0.8))  # p = .64 .24 .09 .03: keeps 2
    assert (cut[2:] == 0).all() and torch.allclose(cut[:2], full[:2] / full[:2].sum())
    assert torch.allclose(probs(logits, Sampling(0.5)), (logits / 0.5).softmax(-1))
    with pytest.raises(Eagle3Error, match="top_p"):
        Sampling(1.0, top_p=0.0)


def second_token_law(target, ids: list[int], s: Sampling) -> torch.Tensor:
    """P(x2) = sum_x1 p(x1 | prompt) p(x2 | prompt, x1) under the target's own sampling law,
    computed exactly: one batched forward over every x1 in the support of p(x1)."""
    with torch.no_grad():
        p1 = probs(target(torch.tensor([ids])).logits[0, -1], s)  # [V]
        x1 = p1.nonzero()[:, 0]  # [n]
        batch = torch.cat([torch.tensor(ids).expand(len(x1), -1), x1[:, None]], dim=1)
        p2 = probs(target(batch).logits[:, -1], s)  # [n, V]
    return (p1[x1, None] * p2).sum(0)  # [V]


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_sampling_matches_target_distribution(target, trained, shape):
    """The second emitted token -- the first one a draft can supply, accepted by min(1, p/q) or
    replaced from the residual (tree: the target's sample walked down the tree) -- follows the
    target's own law (temperature 0.7, top-p 0.9), by a chi-square test over 600 seeds."""
    if target.config.model_type != "llama":
        pytest.skip("one architecture is enough for the distribution test (time)")
    s = Sampling(temperature=0.7, top_p=0.9)
    ids = target.tokenizer("for i in range(")["input_ids"]
    n = 600
    counts = torch.zeros(target.vocab_size)
    accepted = 0
    for seed in range(n):
        g = speculative_generate(
            target,
            trained,
            ids,
            max_new_tokens=3,
            depth=2,
            tree=SHAPES[shape],
            sampling=s,
            seed=seed,
        )
        counts[g.tokens[1]] += 1
        accepted += g.stats.cycles[0].accepted > 0  # room for 2: the first draft counts
    law = second_token_law(target, ids, s)
    assert 0 < accepted < n  # drafts were both accepted and rejected
    assert chi2_pvalue(counts, n * law) > 0.01
    assert counts[law == 0].sum() == 0  # never a token the target's law excludes


@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_cycles_count_only_what_was_produced(target, trained, shape):
    """The token limit cuts the last cycle: tau counts the tokens emitted, not the drafts the
    target would have accepted past the end (the prefill emits the first token)."""
    ids = target.tokenizer(HELD_OUT[0])["input_ids"]
    for n in (2, 5, 11, 24):
        g = speculative_generate(
            target, trained, ids, max_new_tokens=n, depth=4, tree=SHAPES[shape]
        )
        assert len(g.tokens) == n
        assert sum(c.accepted + 1 for c in g.stats.cycles) == n - 1


def test_stats_from_cycles():
    st = DecodeStats(depth=3, method="chain", new_tokens=9, total_s=0.5)
    st.cycles = [Cycle(3, a, 0.01, 0.02, 0.03) for a in (0, 1, 3, 3)]  # emits 1+2+4+4 = 11
    assert st.tau_online == 11 / 4
    assert st.per_position_acceptance() == [3 / 4, 2 / 4, 2 / 4]
    assert st.conditional_acceptance() == [3 / 4, 2 / 3, 2 / 2]
    assert st.tokens_per_s == 18.0
    assert abs(st.mean_ms("cycle_s") - 30.0) < 1e-9


def test_bad_input(target):
    d = new_drafter(target)
    with pytest.raises(Eagle3Error, match="depth"):
        speculative_generate(target, d, [5, 6], depth=0)
    with pytest.raises(Eagle3Error, match="max_new_tokens"):
        speculative_generate(target, d, [5, 6], max_new_tokens=0)
    d.embed_loaded = False
    with pytest.raises(Eagle3Error, match="embedding"):
        speculative_generate(target, d, [5, 6])
