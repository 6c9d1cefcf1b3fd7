"""OpenAI-compatible chat servers (SGLang, vLLM) as the generator of `data regenerate`.

``ServerPool`` spreads requests round-robin over base URLs and checks them once before a run
(``GET /v1/models``); ``server_generator`` asks ``POST /v1/chat/completions`` and retries what
a retry may fix (timeouts, connection errors, HTTP 429 and 5xx) with exponential backoff.
A sample whose every attempt failed to connect raises ``ServerUnreachable``, which
``regenerate`` counts to stop a run whose servers went away.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.data.conversations import sample_seed

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Answer:
    """A generated assistant turn and why its generation stopped, in the OpenAI protocol's
    terms (`choices[i].finish_reason`): "stop" (an end-of-turn or stop token) or "length"
    (`max_tokens` reached: the text is cut). vLLM reports the same strings
    (`vllm/v1/engine/__init__.py`, FINISH_REASON_STRINGS: "length" when max_tokens was consumed
    or max_model_len reached); SGLang's FINISH_LENGTH serialises as {"type": "length"}
    (`python/sglang/srt/managers/schedule_batch.py`), which its OpenAI server returns as
    finish_reason. None: the generator did not say."""

    text: str
    finish_reason: str | None = None

    @property
    def cut(self) -> bool:
        return self.finish_reason == "length"


# (history, sample id) -> the assistant's answer (plain text: the finish reason is unknown)
Generate = Callable[[Messages, str], "str | Answer"]


# -- OpenAI-compatible servers ---------------------------------------------------------------
class RetryableError(Exception):
    """A request failure worth retrying (timeout, connection, 429, 5xx, a torn response)."""


class ConnectionFailure(RetryableError):
    """Nothing answered at that address (refused, unknown host, reset before a response)."""


class ServerUnreachable(RuntimeError):
    """Every attempt for one sample failed to connect."""


def _connection_error(e: BaseException) -> bool:
    reason = getattr(e, "reason", e)  # URLError wraps the socket error
    if isinstance(reason, TimeoutError):
        return False  # a slow server is there; a timeout is retried, not counted
    return isinstance(reason, OSError | str)


class ServerPool:
    """Round-robin over server base URLs; every attempt (first or retry) takes the next one."""

    def __init__(self, urls: list[str], timeout: float = 120.0) -> None:
        if not urls:
            raise Eagle3Error("--server: expected at least one URL")
        self.urls = [self._base(u) for u in urls]
        self.timeout = timeout
        self._next = itertools.count()
        self._lock = threading.Lock()

    @staticmethod
    def _base(url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise bad("--server", f"expected an http(s):// URL, found {url!r}")
        url = url.rstrip("/")
        for suffix in ("/v1/chat/completions", "/v1"):
            if url.endswith(suffix):
                url = url[: -len(suffix)]
        return url

    def pick(self) -> str:
        with self._lock:
            return self.urls[next(self._next) % len(self.urls)]

    def request(self, base: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        """One HTTP call; RetryableError for what a retry may fix, Eagle3Error-free otherwise."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            base + path,
            data=data,
            method="GET" if body is None else "POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            if e.code == 429 or e.code >= 500:
                raise RetryableError(f"{base}: HTTP {e.code}") from None
            raise RuntimeError(f"{base}: HTTP {e.code} {e.read()[:200]!r}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as e:  # refused, reset, timeout
            kind = ConnectionFailure if _connection_error(e) else RetryableError
            raise kind(f"{base}: {getattr(e, 'reason', e)}") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise RetryableError(f"{base}: a response that is not JSON") from None

    def check(self) -> None:
        """Ask every server's ``/v1/models`` once; drop those nothing answers at, and raise
        Eagle3Error when none is left (one line, before any sample is tried)."""
        up, down = [], []
        for base in self.urls:
            try:
                self.request(base, "/v1/models", None)
            except ConnectionFailure as e:
                down.append(str(e))
                continue
            except (RetryableError, RuntimeError):
                pass  # it answered (an error status, a slow or odd reply): it is there
            up.append(base)
        if not up:
            raise bad(
                "--server",
                f"no server answers at {', '.join(self.urls)} (GET /v1/models: "
                f"{down[0].split(': ', 1)[-1]}); is it running?",
            )
        self.urls = up

    def model_name(self) -> str:
        """The served model's name from ``/v1/models`` (first answering server), else "default"."""
        for base in self.urls:
            try:
                return str(self.request(base, "/v1/models", None)["data"][0]["id"])
            except (RetryableError, RuntimeError, KeyError, IndexError, TypeError):
                continue
        return "default"


def server_generator(
    pool: ServerPool,
    model: str,
    max_tokens: int,
    temperature: float,
    retries: int = 4,
    backoff: float = 0.5,
    template_kwargs: dict | None = None,
    top_p: float = 1.0,
    seed: int = 0,
) -> Generate:
    """Ask ``/v1/chat/completions`` (an Answer: the text and its ``finish_reason``); retry
    with backoff ``backoff * 2^attempt`` (+ jitter, <= 8 s). When every attempt failed to
    connect: ServerUnreachable (a RuntimeError).
    Sampled requests carry ``top_p`` and a per-sample ``seed`` (vLLM's and SGLang's OpenAI
    servers accept both), so a rerun asks for the same draw."""

    def generate(history: Messages, sid: str) -> Answer:
        body = {
            "model": model,
            "messages": history,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": False,
        }
        if temperature > 0:
            body["top_p"] = top_p
            body["seed"] = sample_seed(seed, sid, len(history))
        if template_kwargs:
            body["chat_template_kwargs"] = (
                template_kwargs  # SGLang and vLLM pass these to the template
            )
        last, refused = "", 0
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(min(8.0, backoff * 2 ** (attempt - 1)) * (1 + 0.25 * random.random()))
            try:
                resp = pool.request(pool.pick(), "/v1/chat/completions", body)
                choice = resp["choices"][0]
                content, finish = choice["message"]["content"], choice.get("finish_reason")
            except RetryableError as e:
                last, refused = str(e), refused + isinstance(e, ConnectionFailure)
                continue
            except (KeyError, IndexError, TypeError):
                last = "a response without choices[0].message.content"
                continue
            if not isinstance(content, str):
                last = f"content is {type(content).__name__}, not text"
                continue
            return Answer(content, finish if isinstance(finish, str) else None)
        kind = ServerUnreachable if refused == retries + 1 else RuntimeError
        raise kind(f"{sid}: gave up after {retries + 1} attempts ({last})")

    return generate
