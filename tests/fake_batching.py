"""Test fixture: step-synchronous batching for the fake engines (tests/fake_engine.py).

A real engine (vLLM's scheduler, SGLang's) keeps a running batch: every engine step runs one
forward over all active requests, each advancing by its own tokens, and new requests join the
batch between steps. This module does that for the fake server's greedy plain decoding and
prompt lookup (the methods whose drafting needs no model of its own), on the shared zoo target:

- a new request is prefilled alone (batch 1) between two steps, emits its first token, and its
  KV cache is spliced into the running batch (left padding, masked out);
- one step = one target forward over [B, n]: row i carries its last token and its drafts
  (prompt lookup: the n-gram rule of methods/lookup/decode.py, at most `lookup` tokens; plain:
  none),
  padded to the longest row; n = 1 + the most drafts any row proposed;
- each row accepts its longest draft prefix equal to the target's argmax plus the bonus token,
  exactly as methods/lookup/decode.py does batch 1; rejected drafts and padding stay in the cache as
  holes, masked out in every later step (their keys are never attended to); positions are
  each row's own count of real tokens, so rotary embeddings see each sequence as if alone;
- finished rows leave the batch, and leading columns no row uses are trimmed.

The tokens go to each request's handler thread through a queue, so writing the stream (the
HTTP/SSE work a real engine does in its API server process) is off the engine loop. The loop
holds the fake's model lock for each step, so other fakes in the process never run beside it.
EAGLE-3, DFlash, P-EAGLE and MTP requests are not batched: their drafters here are batch-1
modules with one cache per sequence, so the fake serves them one generation at a time.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from eagle3kit.decode.generation import Output, stop_set
from eagle3kit.decode.stats import Cycle
from eagle3kit.methods.lookup.decode import lookup_candidates


@dataclass
class Row:
    """One request in the running batch."""

    ids: list[int]
    max_tokens: int
    eos: int | None
    out: Output = None  # type: ignore[assignment]
    q: queue.Queue = field(default_factory=queue.Queue)  # lists of new tokens; None: finished
    cycles: list[Cycle] = field(default_factory=list)
    pos: int = 0  # real tokens in the cache (the row's next position)
    last: int = -1  # the last emitted token, not yet in the cache
    done: bool = False

    def __post_init__(self) -> None:
        self.out = Output(stop_set(self.eos), self.max_tokens, self.q.put)

    def drafts(self, k: int) -> list[int]:
        if k == 0:
            return []
        seq = self.ids + self.out.tokens
        return lookup_candidates(
            seq,
            num_output_tokens=k,
            max_matching_ngram_size=2,
            max_length=len(self.ids) + self.max_tokens,
            eos_token_id=self.eos,
        )


class StepBatcher:
    """The engine loop: admit waiting requests, then one batched step over the active ones."""

    def __init__(self, target, lock: threading.Lock, stopped: threading.Event, lookup: int = 0):
        self.target, self.lock, self.stopped, self.lookup = target, lock, stopped, lookup
        self.model = target.model
        self.waiting: list[Row] = []
        self.rows: list[Row] = []
        self.cache: Any = None
        self.mask: torch.Tensor | None = None  # [B, S] 1 = a real token's key, 0 = hole/pad
        self.wake = threading.Condition()
        self.steps: list[int] = []  # batch size of every step, for the record
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    # -- the handler side ------------------------------------------------------------------
    def generate(self, ids: list[int], max_tokens: int, eos: int | None, on_tokens) -> Row:
        """Queue a request and stream its tokens to `on_tokens` (in the caller's thread)."""
        row = Row(list(ids), max_tokens, eos)
        with self.wake:
            self.waiting.append(row)
            self.wake.notify()
        while (new := row.q.get()) is not None:
            on_tokens(new)
        return row

    # -- the engine loop -------------------------------------------------------------------
    def _loop(self) -> None:
        dev = self.target.device
        while not self.stopped.is_set():
            with self.wake:
                while not self.waiting and not self.rows and not self.stopped.is_set():
                    self.wake.wait(0.5)
                new, self.waiting = self.waiting, []
            if self.stopped.is_set():
                break
            with self.lock, torch.inference_mode():
                for row in new:
                    self._admit(row, dev)
                if self.rows:
                    self._step(dev)
                self._drop_finished()

    def _forward(self, ids, mask, pos, cache):
        kw = {self.target._cache_kwarg: cache}  # "cache" (transformers 5) or past_key_values
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **kw)
        return out.logits

    def _admit(self, row: Row, dev) -> None:
        """Prefill alone, emit the first token, splice the row's cache into the batch."""
        ids = torch.tensor([row.ids], device=dev)  # [1, P]
        p = ids.shape[1]
        cache = self.target._new_cache()
        pos = torch.arange(p, device=dev)[None]
        logits = self._forward(ids, torch.ones_like(ids), pos, cache)
        row.last, row.pos = int(logits[0, -1].argmax()), p
        row.done = row.out.add([row.last])[0]
        if row.done:
            row.q.put(None)
            return
        self._splice(cache, torch.ones(1, p, dtype=torch.long, device=dev))
        self.rows.append(row)

    def _splice(self, cache, mask: torch.Tensor) -> None:
        if self.cache is None:
            self.cache, self.mask = cache, mask
            return
        s, p = self.mask.shape[1], mask.shape[1]
        width = max(s, p)
        for mine, theirs in zip(self.cache.layers, cache.layers, strict=True):
            for name in ("keys", "values"):
                a, b = getattr(mine, name), getattr(theirs, name)  # [B, h, S, d], [1, h, P, d]
                setattr(mine, name, torch.cat([_left_pad(a, width), _left_pad(b, width)], 0))
        self.mask = torch.cat([_left_pad(self.mask, width), _left_pad(mask, width)], 0)

    def _step(self, dev) -> None:
        """One forward over every active row: its last token and its drafts."""
        drafts = [r.drafts(self.lookup) for r in self.rows]
        n = 1 + max(len(d) for d in drafts)
        b = len(self.rows)
        ids = torch.zeros(b, n, dtype=torch.long, device=dev)
        cols = torch.zeros(b, n, dtype=torch.long, device=dev)
        for i, (r, d) in enumerate(zip(self.rows, drafts, strict=True)):
            ids[i, : 1 + len(d)] = torch.tensor([r.last, *d], device=dev)
            cols[i, : 1 + len(d)] = 1
        pos = torch.tensor([r.pos for r in self.rows], device=dev)[:, None] + torch.arange(
            n, device=dev
        )
        mask = torch.cat([self.mask, cols], 1)
        best = self._forward(ids, mask, pos, self.cache).argmax(-1).tolist()  # [B, n]
        self.steps.append(b)
        for i, (r, d) in enumerate(zip(self.rows, drafts, strict=True)):
            a = 0
            while a < len(d) and d[a] == best[i][a]:
                a += 1
            mask[i, self.mask.shape[1] + 1 + a :] = 0  # rejected drafts and padding: holes
            r.pos += 1 + a
            r.last = best[i][a]
            r.done, made = r.out.add(d[:a] + [r.last])
            r.cycles.append(Cycle(len(d), min(a, made - 1), 0.0, 0.0, 0.0))
        self.mask = mask

    def _drop_finished(self) -> None:
        for r in [r for r in self.rows if r.done]:
            r.q.put(None)
        keep = [i for i, r in enumerate(self.rows) if not r.done]
        if len(keep) == len(self.rows):
            return
        self.rows = [self.rows[i] for i in keep]
        if not keep:
            self.cache = self.mask = None
            return
        idx = torch.tensor(keep, device=self.mask.device)
        used = self.mask.index_select(0, idx)
        first = int(used.any(0).nonzero()[0])  # leading columns no row uses: trimmed
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                setattr(layer, name, getattr(layer, name).index_select(0, idx)[:, :, first:])
        self.mask = used[:, first:]


def _left_pad(t: torch.Tensor, width: int) -> torch.Tensor:
    """Zeros on the left of the sequence axis (-2 for keys/values [B, h, S, d], -1 for a mask
    [B, S]) up to `width`."""
    axis = -2 if t.ndim == 4 else -1
    short = width - t.shape[axis]
    if short == 0:
        return t
    shape = list(t.shape)
    shape[axis] = short
    return torch.cat([t.new_zeros(shape), t], axis)
