"""What every decoder here shares: the prompt as ids, the output (stop ids, the token limit,
streaming), the clock that times whole phases from outside the math, and the result."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.decode.stats import DecodeStats


@dataclass
class Generation:
    prompt_ids: list[int]
    tokens: list[int]  # the continuation, without the EOS token
    stats: DecodeStats


def prompt_tensor(prompt_ids: list[int] | torch.Tensor, device: torch.device) -> torch.Tensor:
    """The prompt as [1, P] long ids on ``device``; an empty prompt is refused."""
    ids = torch.as_tensor(prompt_ids, dtype=torch.long, device=device).reshape(1, -1)  # [1, P]
    if ids.shape[1] == 0:
        raise Eagle3Error("prompt: expected at least one token, found none (an empty prompt)")
    return ids


def stop_set(eos_token_id: int | Collection[int] | None) -> frozenset[int]:
    """EOS as a set of ids: None -> none, an int -> that one, a collection -> all of them."""
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, int):
        return frozenset([eos_token_id])
    return frozenset(int(e) for e in eos_token_id)


class Output:
    """The tokens emitted so far: cut at the first stop id (dropped) or at the limit; new
    tokens go to ``on_tokens`` as they come."""

    def __init__(
        self,
        stops: frozenset[int],
        limit: int,
        on_tokens: Callable[[list[int]], None] | None = None,
    ) -> None:
        self.stops, self.limit, self.on_tokens = stops, limit, on_tokens
        self.tokens: list[int] = []

    def add(self, new: list[int]) -> tuple[bool, int]:
        """Append a cycle's tokens. (done, made): True when generation ends; how many of
        ``new`` were produced, a stop id included."""
        done, made = False, len(new)
        hit = next((i for i, t in enumerate(new) if t in self.stops), None)
        if hit is not None:
            made = hit + 1
            new, done = new[:hit], True
        if len(self.tokens) + len(new) >= self.limit:
            new, done = new[: self.limit - len(self.tokens)], True
            made = min(made, len(new))
        self.tokens.extend(new)
        if self.on_tokens is not None and new:
            self.on_tokens(new)
        return done, made


class Clock:
    """Seconds between phase boundaries. A synced lap first waits for the device's queued
    work (CUDA), so the work of a phase is counted in that phase."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.start = self.last = time.perf_counter()

    def lap(self, sync: bool = True) -> float:
        if sync and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        dt, self.last = now - self.last, now
        return dt

    def total(self) -> float:
        return time.perf_counter() - self.start
