"""Plain decoding with the target's KV cache: one target forward per token, greedy or sampled
(temperature + top-p, decode/sampling.py). The one such decoder: the greedy baseline of eval
and bench, and the local generator of `data regenerate`, both run it."""

from __future__ import annotations

from collections.abc import Collection, Iterator

import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode.generation import Clock, Generation, Output, prompt_tensor, stop_set
from eagle3kit.decode.sampling import GREEDY, Sampling, draw, probs
from eagle3kit.decode.stats import Cycle, DecodeStats


def next_tokens(
    target, ids: torch.Tensor, sampling: Sampling, gen: torch.Generator | None
) -> Iterator[int]:
    """x_1, x_2, ...: the prefill of ``ids`` [1, P] gives x_1, then each x_i is run through
    the target (one forward) for the next. Stop pulling when done."""
    logits = target.prefill(ids).logits[0, -1]  # [V]
    while True:
        x = int(logits.argmax()) if sampling.greedy else draw(probs(logits, sampling), gen)
        yield x
        logits = target.verify(ids.new_tensor([[x]])).logits[0, -1]  # [V]


def plain_generate(
    target,
    prompt_ids: list[int] | torch.Tensor,
    *,
    max_new_tokens: int = 128,
    eos_token_id: int | Collection[int] | None = None,
    sampling: Sampling = GREEDY,
    generator: torch.Generator | None = None,
) -> Generation:
    """Up to ``max_new_tokens`` after ``prompt_ids``, stopping at any of ``eos_token_id``
    (dropped). Timed per step: ``stats.cycles[i].verify_s`` is decode step i."""
    if max_new_tokens < 1:
        raise Eagle3Error(f"max_new_tokens: expected >= 1, found {max_new_tokens}")
    ids = prompt_tensor(prompt_ids, target.device)  # [1, P]
    method = "greedy" if sampling.greedy else "sample"
    stats = DecodeStats(depth=0, method=method, prompt_tokens=ids.shape[1])
    out = Output(stop_set(eos_token_id), max_new_tokens)
    clock = Clock(target.device)
    with torch.inference_mode():
        steps = next_tokens(target, ids, sampling, generator)
        x = next(steps)
        stats.prefill_s = clock.lap()
        while not out.add([x])[0]:
            clock.lap(sync=False)
            x = next(steps)
            dt = clock.lap()
            stats.cycles.append(Cycle(0, 0, 0.0, dt, dt))
    stats.total_s = clock.total()
    stats.new_tokens = len(out.tokens)
    return Generation(ids[0].tolist(), out.tokens, stats)


def greedy_generate(
    target,
    prompt_ids: list[int] | torch.Tensor,
    *,
    max_new_tokens: int = 128,
    eos_token_id: int | Collection[int] | None = None,
) -> Generation:
    """Plain greedy decoding (the baseline): `plain_generate` at temperature 0."""
    return plain_generate(
        target, prompt_ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id
    )
