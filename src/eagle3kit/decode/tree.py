"""Tree drafting (EAGLE-2 style dynamic tree) and the tree's verify-side structures.

The drafter grows the tree one depth at a time from the root (the last emitted token x_m,
not yet in the target's cache). Every candidate node c carries the cumulative draft
log-probability of its path, score(c) = score(parent) + log q(c | path).

    depth 1:     the top-K tokens of the drafter's distribution after x_m
    depth j > 1: the frontier (the K best-scoring nodes of depth j-1) is run through the
                 drafter in ONE call -- node i sees the committed cache, its ancestors and
                 itself (tree mask), at rotary position m + j - 1 -- and each frontier node
                 offers its top-K children: K*K candidates, of which the best K are the next
                 frontier
    selection:   the `budget` best-scoring candidates over all depths. A child never scores
                 above its parent (log q <= 0) and ties go to the earlier node, so the
                 selection holds every selected node's parent.

The target then verifies [x_m, nodes...] in one forward with the mask "a node sees the root,
its ancestors and itself" at positions m + depth, and `walk` follows the target's choices down
the tree: the accepted path is the longest one whose every token is the target's own choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from eagle3kit.model.protocols import Drafter


@dataclass
class Tree:
    """Selected draft nodes in verify order (parents before children); the root is index 0."""

    tokens: list[int]  # [N] target ids of the nodes
    parents: list[int]  # [N] verify index of each node's parent (0 = the root)
    depths: list[int]  # [N] 1..D

    def __len__(self) -> int:
        return len(self.tokens)

    def mask(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """Bool [N+1, N+1] over [root, nodes]: row i may attend to i's ancestors and i."""
        n = len(self.tokens) + 1
        m = torch.eye(n, dtype=torch.bool, device=device)  # [N+1, N+1]
        m[:, 0] = True
        for i, p in enumerate(self.parents, start=1):
            m[i] |= m[p]  # parents come first, so m[p] is already complete
        return m

    def position_ids(self, root_pos: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """[1, N+1]: the root at root_pos, a node at root_pos + its depth."""
        return torch.tensor([[root_pos] + [root_pos + d for d in self.depths]], device=device)

    def children(self) -> dict[tuple[int, int], int]:
        """(parent verify index, token) -> the node's verify index."""
        return {
            (p, t): i
            for i, (p, t) in enumerate(zip(self.parents, self.tokens, strict=True), start=1)
        }


def draft_tree(
    drafter: Drafter, cache, logits, hidden, pos: int, topk: int, depth: int, budget: int
) -> Tree:
    """Grow the tree (module docstring) from the drafter's state after the root.

    ``logits`` [Vd] and ``hidden`` [1, 1, H] are the drafter's output at the root; ``cache``
    holds the committed prefix (length ``pos`` = m) and gains the expanded nodes (crop it back
    to ``pos`` afterwards). Returns the ``budget`` best nodes.
    """
    dev = hidden.device
    lp = torch.log_softmax(logits.float(), -1)  # [Vd]
    top = lp.topk(topk)
    scores = top.values.tolist()  # cumulative log q of every candidate
    toks = drafter.to_target_ids(top.indices).tolist()
    parents = [-1] * topk  # candidate index of the parent, -1 = root
    depths = [1] * topk
    frontier = list(range(topk))
    front_hidden = hidden.expand(1, topk, hidden.shape[-1])  # [1, F, H]
    slot: dict[int, int] = {}  # expanded candidate -> its column in the drafter cache
    for d in range(2, depth + 1):
        f = len(frontier)
        past = cache.length
        mask = torch.zeros(f, past + f, dtype=torch.bool, device=dev)  # [F, S]
        mask[:, :pos] = True  # the committed prefix
        for r, c in enumerate(frontier):
            a = parents[c]
            while a >= 0:
                mask[r, slot[a]] = True
                a = parents[a]
            slot[c] = past + r
            mask[r, past + r] = True
        ids = torch.tensor([[toks[c] for c in frontier]], device=dev)  # [1, F]
        posid = torch.full((1, f), pos + d - 2, device=dev)  # [1, F]
        out = drafter(ids, front_hidden, cache, posid, mask, from_aux=False)
        lp = torch.log_softmax(out.logits[0].float(), -1)  # [F, Vd]
        lp = lp + torch.tensor([scores[c] for c in frontier], device=dev)[:, None]
        top = lp.topk(topk, dim=-1)  # [F, K]
        first = len(scores)
        scores += top.values.flatten().tolist()
        toks += drafter.to_target_ids(top.indices.flatten()).tolist()
        parents += [c for c in frontier for _ in range(topk)]
        depths += [d] * (f * topk)
        best = top.values.flatten().topk(min(topk, f * topk)).indices  # [K] into the F*K
        frontier = [first + int(i) for i in best]
        front_hidden = out.hidden[:, best // topk]  # [1, K, H] each new node's parent hidden
    return _select(scores, toks, parents, depths, budget)


def _select(scores, toks, parents, depths, budget: int) -> Tree:
    """The ``budget`` best candidates (stable: ties to the earlier one), in candidate order."""
    order = sorted(range(len(scores)), key=lambda c: -scores[c])  # stable: ties keep order
    keep = sorted(order[:budget])
    vidx = {c: i for i, c in enumerate(keep, start=1)}  # candidate -> verify index
    return Tree(
        tokens=[toks[c] for c in keep],
        parents=[0 if parents[c] < 0 else vidx[parents[c]] for c in keep],
        depths=[depths[c] for c in keep],
    )


def walk(tree: Tree, choose) -> tuple[list[int], int]:
    """Follow the target down the tree: (accepted verify indices, the next token).

    ``choose(i)`` is the target's token after verify row i (argmax, or a sample from its
    distribution): a child with that token is accepted and the walk goes on from it; when no
    child matches, that token is the cycle's bonus token.
    """
    kids = tree.children()
    path, cur = [], 0
    while True:
        tok = choose(cur)
        nxt = kids.get((cur, tok))
        if nxt is None:
            return path, tok
        path.append(nxt)
        cur = nxt
