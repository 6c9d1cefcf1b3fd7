"""Speculative decoding with a target's own MTP head (batch 1, chain), as vLLM's "mtp" method.

The cycle is decode/speculative.py's (draft -> verify -> accept -> crop -> catch up, the same
acceptance rule, so greedy output is the target's greedy output token for token and sampled
output follows the target's law). What changes is the draft:

    features  h_t = the hidden state the target's model returns at t (after its final norm),
              not three aux layers: read by a hook on that norm during prefill and verify
    step 1    head(h_t, x_{t+1}) over the committed pairs, its own KV cache (MTPCache)
    step i>1  the same head again on its own output hidden and the token it just drafted
              (one head used recursively for K > 1, as vLLM does when K exceeds the
              checkpoint's ``num_nextn_predict_layers``)

The head's vocabulary is the target's, so d2t is the identity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode.generation import Generation, Output, prompt_tensor, stop_set
from eagle3kit.decode.sampling import GREEDY, Sampling
from eagle3kit.decode.speculative import SpecDecoder, run_cycles
from eagle3kit.decode.stats import DecodeStats
from eagle3kit.methods.mtp.model import FinalNormTap, MTPCache, MTPHead
from eagle3kit.model.target import TargetOutput

if TYPE_CHECKING:
    from eagle3kit.model.target import TargetModel


class FinalHidden:
    """A TargetModel whose prefill/verify outputs carry, as ``aux``, the final-normed hidden
    state [B, n, H] (what an MTP head reads) instead of the aux layers."""

    def __init__(self, target: TargetModel) -> None:
        self.target = target
        self.tap = FinalNormTap(target)

    def prefill(self, ids: torch.Tensor) -> TargetOutput:
        out = self.target.prefill(ids)
        return TargetOutput(logits=out.logits, aux=self.tap.take())

    def verify(self, tokens: torch.Tensor) -> TargetOutput:
        out = self.target.verify(tokens)
        return TargetOutput(logits=out.logits, aux=self.tap.take())

    def close(self) -> None:
        self.tap.close()

    def __getattr__(self, name: str) -> Any:  # seq_len, crop, device, ...: the target's own
        return getattr(self.target, name)


class HeadDrafter:
    """An MTPHead with the drafter interface SpecDecoder calls (identity d2t)."""

    embed_loaded = True
    method = MTPHead.method

    def __init__(self, head: MTPHead, device: torch.device) -> None:
        self.head = head
        self.d2t = torch.zeros(head.vocab_size, dtype=torch.long, device=device)

    def __call__(self, ids, hidden, cache, from_aux: bool | None = None, **kw):
        return self.head(ids, hidden, cache, **kw)

    def to_target_ids(self, ids: torch.Tensor) -> torch.Tensor:
        return ids


class MTPDecoder(SpecDecoder):
    """SpecDecoder drafting with an MTP head (chain only). ``target``: a TargetModel, or a
    FinalHidden (any object whose prefill/verify outputs carry the features as ``aux``)."""

    def __init__(self, target, head: MTPHead, depth: int, s: Sampling, seed: int = 0) -> None:
        feats = target if isinstance(target, FinalHidden) else FinalHidden(target)
        super().__init__(feats, HeadDrafter(head, feats.device), depth, None, s, seed)
        self.cache = MTPCache()

    def _drafter_on(self, ids: torch.Tensor, feats: torch.Tensor) -> None:
        """The head on pairs (h_t [1, n, H], x_{t+1} [1, n]) into its cache."""
        d = self.drafter(ids, feats, self.cache)
        self.logits, self.hidden = d.logits[0, -1], d.hidden[:, -1:]


def mtp_generate(
    target,
    head: MTPHead,
    prompt_ids: list[int] | torch.Tensor,
    *,
    max_new_tokens: int = 128,
    depth: int = 3,
    sampling: Sampling = GREEDY,
    eos_token_id: int | None = None,
    seed: int = 0,
    on_tokens: Callable[[list[int]], None] | None = None,
    tree: Any = None,
) -> Generation:
    """Decode up to ``max_new_tokens`` after ``prompt_ids`` drafting ``depth`` tokens a cycle
    with ``head`` (see the module docstring); stats.method is "mtp"."""
    if tree is not None:
        raise Eagle3Error("mtp: drafts a chain (one head, recursively); a tree is not supported")
    if depth < 1:
        raise Eagle3Error(f"depth: expected >= 1, found {depth}")
    if max_new_tokens < 1:
        raise Eagle3Error(f"max_new_tokens: expected >= 1, found {max_new_tokens}")
    dec = MTPDecoder(target, head, depth, sampling, seed)
    ids = prompt_tensor(prompt_ids, dec.target.device)  # [1, P]
    out = Output(stop_set(eos_token_id), max_new_tokens, on_tokens)
    stats = DecodeStats(depth=depth, method="mtp", prompt_tokens=ids.shape[1])
    try:
        return run_cycles(dec, ids, out, stats)
    finally:
        dec.target.close()


generate = mtp_generate  # the part core/registry.py asks for (decode/speculative.py's keywords)
