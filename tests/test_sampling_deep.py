"""Speculative sampling emits exactly the target's law, checked deep (issue 18): at every draft
position, the residual after a rejection at position >= 2, the bonus token after all drafts
are accepted, and tree sampling. Each check has a power check: a deliberately wrong sampler
(one that skips the residual, one that draws the bonus from q) is injected and must fail it.

Hand-made laws over 6 tokens, fixed seeds: fast and deterministic. The decode-level tests run
the real loop (`speculative_generate`) on a fake target and drafter whose laws depend only on
the absolute position t of the token they predict (P_t for the target, Q_t for the drafter),
so the token emitted at position t must follow P_t whatever was drafted."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from eagle3kit.decode import Sampling, TreeShape, speculative_generate
from eagle3kit.decode import speculative as S
from eagle3kit.decode.sampling import accept_sampled, draw, make_generator
from eagle3kit.decode.tree import Tree, walk
from eagle3kit.model.drafter import DraftCache

V = 6
BASE_P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.07, 0.03])
BASE_Q = torch.tensor([0.20, 0.30, 0.25, 0.05, 0.15, 0.05])
K = 3  # drafts per cycle
P = torch.stack([BASE_P.roll(i) for i in range(K + 1)])  # [k+1, V], a law per position
Q = torch.stack([BASE_Q.roll(i) for i in range(K)])  # [k, V]


def chi2_pvalue(counts: torch.Tensor, expected: torch.Tensor) -> float:
    """Pearson chi-square p-value (cells with expected >= 5; the rest pooled)."""
    counts, expected = counts.double(), expected.double()
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    if exp[-1] < 5:  # the pooled rest is too small: fold it into the first cell
        obs, exp = obs[:-1].clone(), exp[:-1].clone()
        obs[0] += counts[~big].sum()
        exp[0] += expected[~big].sum()
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = obs.numel() - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2.0), torch.tensor(stat / 2.0)))


def fits(counts: torch.Tensor, law: torch.Tensor) -> None:
    """Assert that `counts` follow `law` (p > 0.001) and never hit a zero-probability token."""
    n = counts.sum()
    assert n >= 200, f"too few draws ({int(n)}) to test"
    assert counts[law == 0].sum() == 0, "a token outside the law's support"
    p = chi2_pvalue(counts, n * law)
    assert p > 1e-3, f"chi-square p = {p:.2e}: counts {counts.tolist()} vs law {law.tolist()}"


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    r = (p - q).clamp(min=0)
    return r / r.sum()


# -- wrong samplers, for the power checks ---------------------------------------------------
def skips_residual(p, q, drafts, gen):
    """Wrong: on a rejection, draws from p instead of the residual norm(max(p - q, 0))."""
    for i, d in enumerate(drafts):
        if float(torch.rand((), generator=gen, device=p.device)) < min(
            1.0, float(p[i, d] / q[i, d])
        ):
            continue
        return i, draw(p[i], gen)
    return len(drafts), draw(p[len(drafts)], gen)


def bonus_from_q(p, q, drafts, gen):
    """Wrong: after all drafts are accepted, draws the bonus from the last q, not p_{k+1}."""
    a, nxt = accept_sampled(p, q, drafts, gen)
    if a == len(drafts):
        return a, draw(q[-1], gen)
    return a, nxt


# -- the rule alone ------------------------------------------------------------------------
def emitted(sampler, n: int = 3000, seed: int = 0):
    """n cycles of the rule on P, Q: (counts at each position [k+1, V] over cycles that reach
    it, residual draws at positions >= 2 [V] per position, bonus draws [V])."""
    gen = make_generator("cpu", seed)
    at = torch.zeros(K + 1, V)
    resid = torch.zeros(K, V)
    bonus = torch.zeros(V)
    for _ in range(n):
        drafts = [draw(Q[i], gen) for i in range(K)]
        a, nxt = sampler(P, Q, drafts, gen)
        for i, t in enumerate(drafts[:a] + [nxt]):
            at[i, t] += 1
        if a < K:
            resid[a, nxt] += 1
        else:
            bonus[nxt] += 1
    return at, resid, bonus


def check_every_position(sampler) -> None:
    at, _, _ = emitted(sampler)
    for i in range(K + 1):
        fits(at[i], P[i])


def check_residual(sampler) -> None:
    _, resid, _ = emitted(sampler)
    for i in range(1, K):  # a rejection at draft position i + 1 >= 2
        fits(resid[i], residual(P[i], Q[i]))


def check_bonus(sampler) -> None:
    _, _, bonus = emitted(sampler)
    fits(bonus, P[K])


@pytest.mark.parametrize("check", [check_every_position, check_residual, check_bonus])
@pytest.mark.slow
def test_rule_emits_the_target_law(check):
    check(accept_sampled)


@pytest.mark.parametrize(
    ("wrong", "check"),
    [
        (skips_residual, check_every_position),
        (skips_residual, check_residual),
        (bonus_from_q, check_bonus),
    ],
)
@pytest.mark.slow
def test_power_wrong_samplers_fail(wrong, check):
    with pytest.raises(AssertionError, match="chi-square|outside"):
        check(wrong)


# -- tree sampling -------------------------------------------------------------------------
# root -> tokens 0 (node 1) and 1 (node 2); node 1 -> token 2 (node 3). Row i of ROWS is the
# target's law after verify row i (0 = the root).
TREE = Tree(tokens=[0, 1, 2], parents=[0, 0, 1], depths=[1, 1, 2])
ROWS = torch.stack([BASE_P, BASE_P.roll(2), BASE_P.roll(4), BASE_P.flip(0)])  # [N+1, V]


def tree_draws(walker, n: int = 6000, seed: int = 1):
    """(first tokens [V], second after token 0 [V], after token 1 [V], third after 0, 2)."""
    gen = make_generator("cpu", seed)
    first, after0, after1, after02 = (torch.zeros(V) for _ in range(4))
    for _ in range(n):
        path, bonus = walker(TREE, lambda i: draw(ROWS[i], gen))
        toks = [TREE.tokens[i - 1] for i in path] + [bonus]
        first[toks[0]] += 1
        if toks[0] == 0:
            after0[toks[1]] += 1
            if toks[1] == 2:
                after02[toks[2]] += 1
        if toks[0] == 1:
            after1[toks[1]] += 1
    return first, after0, after1, after02


def check_tree(walker) -> None:
    first, after0, after1, after02 = tree_draws(walker)
    fits(first, ROWS[0])
    fits(after0, ROWS[1])
    fits(after1, ROWS[2])
    fits(after02, ROWS[3])


def drafts_first(tree, choose):
    """Wrong: accepts the first child of each node with the target's probability of it (as if
    q = 1), and only then lets the target choose, without removing that child's mass."""
    kids, path, cur = tree.children(), [], 0
    while True:
        first = next(((t, i) for (p, t), i in kids.items() if p == cur), None)
        if first is not None and float(torch.rand(())) < float(ROWS[cur, first[0]]):
            path.append(first[1])
            cur = first[1]
            continue
        tok = choose(cur)
        nxt = kids.get((cur, tok))
        if nxt is None:
            return path, tok
        path.append(nxt)
        cur = nxt


def test_tree_walk_emits_the_target_law():
    check_tree(walk)


def test_power_tree_check_fails_a_draft_biased_walk():
    torch.manual_seed(0)
    with pytest.raises(AssertionError, match="chi-square"):
        check_tree(drafts_first)


# -- the real decode loop on laws that depend only on the position -------------------------
T_MAX = 40
LAW_P = torch.stack([BASE_P.roll(t) for t in range(T_MAX)])  # [T, V]: token at position t
LAW_Q = torch.stack([BASE_Q.roll(2 * t) for t in range(T_MAX)])  # [T, V]: the drafter's guess


class PositionTarget:
    """A target whose next-token law after the input at position t is LAW_P[t + 1]; its
    aux rows carry nothing. Implements what the decoder uses of TargetModel."""

    device = torch.device("cpu")

    def __init__(self) -> None:
        self.n = 0

    @property
    def seq_len(self) -> int:
        return self.n

    def _out(self, pos: torch.Tensor):
        return SimpleNamespace(logits=LAW_P[pos + 1].log()[None], aux=torch.zeros(1, len(pos), 3))

    def prefill(self, ids):
        self.n = ids.shape[1]
        return self._out(torch.arange(self.n))

    def verify(self, ids):
        pos = self.n + torch.arange(ids.shape[1])
        self.n += ids.shape[1]
        return self._out(pos)

    def verify_tree(self, ids, position_ids, mask):
        self.n += ids.shape[1]
        return self._out(position_ids.reshape(-1))

    def crop(self, length: int) -> None:
        self.n = length

    def keep(self, positions) -> None:
        self.n = len(positions)


class PositionDrafter:
    """A drafter whose law after its input at position t (the pair aux_t, x_{t+1}) is
    LAW_Q[t + 2]: the token two places on. Keeps a real DraftCache for the lengths."""

    embed_loaded = True
    dtype = torch.float32  # model/protocols.py Drafter: the dtype its inputs are cast to
    method = "eagle3"  # ... and its draft method (core/registry.py), whose decoder runs it

    def __init__(self) -> None:
        self.d2t = torch.zeros(V, dtype=torch.long)
        self.fc = SimpleNamespace(weight=torch.zeros(1))

    def to_target_ids(self, ids):
        return ids + self.d2t[ids]

    def __call__(self, ids, hidden, cache: DraftCache, position_ids=None, mask=None, **_):
        n = ids.shape[1]
        pos = (
            position_ids.reshape(-1) if position_ids is not None else cache.length + torch.arange(n)
        )
        cache.append(torch.zeros(1, 1, n, 1), torch.zeros(1, 1, n, 1))
        return SimpleNamespace(logits=LAW_Q[pos + 2].log()[None], hidden=torch.zeros(1, n, 4))


PROMPT = [0, 0]  # the first new token is at position 2
N_NEW = 7


def decoded(shape: str, runs: int = 1000) -> torch.Tensor:
    """counts [N_NEW, V]: the token at each output position over `runs` seeds."""
    tree = TreeShape(topk=2, budget=5) if shape == "tree" else None
    counts = torch.zeros(N_NEW, V)
    accepted = []
    for seed in range(runs):
        g = speculative_generate(
            PositionTarget(),
            PositionDrafter(),
            PROMPT,
            max_new_tokens=N_NEW,
            depth=K,
            tree=tree,
            sampling=Sampling(temperature=1.0),
            seed=seed,
        )
        assert len(g.tokens) == N_NEW
        for j, t in enumerate(g.tokens):
            counts[j, t] += 1
        accepted += [c.accepted for c in g.stats.cycles]
    # drafts were accepted, rejected, and (chain) all accepted: every branch of the rule ran
    assert 0 in accepted and max(accepted) >= 2, accepted
    return counts


def check_decoded(shape: str) -> None:
    counts = decoded(shape)
    for j in range(N_NEW):
        fits(counts[j], LAW_P[len(PROMPT) + j])


@pytest.mark.slow  # ~3-4 s each: many decode loops; the rule itself is checked above, fast
@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_decode_loop_emits_the_target_law_at_every_position(shape):
    check_decoded(shape)


@pytest.mark.slow
@pytest.mark.parametrize("wrong", [skips_residual, bonus_from_q])
def test_power_decode_loop_with_a_wrong_sampler_fails(monkeypatch, wrong):
    monkeypatch.setattr(S, "accept_sampled", wrong)
    with pytest.raises(AssertionError, match="chi-square"):
        check_decoded("chain")
