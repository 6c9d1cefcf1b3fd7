"""HTTP clients of running SGLang and vLLM servers (stdlib only, torch-free).

Everything here is bounded by a `Deadline`: every socket read waits at most the time left, so a
stalled stream or a silent server ends the call with a `ServerFault` (one line naming the URL
and what went wrong) instead of hanging.

Field names and meanings (see docs/live.md for the sources):
- OpenAI streaming (both engines): `data: {json}` lines, `data: [DONE]` at the end; with
  `stream_options.include_usage` a last chunk with `choices: []` carries `usage`; vLLM with
  `continuous_usage_stats` puts the cumulative `usage.completion_tokens` on every chunk.
- vLLM per request (`--per-request-spec-decode-metrics`): `metrics.speculative_decoding` on
  the final usage chunk (`num_spec_steps`, `num_accepted_draft_tokens`, `num_draft_tokens`,
  `acceptance_histogram`, `num_spec_tokens`).
- SGLang per request: `meta_info.spec_verify_ct`, `spec_num_correct_drafts` (older
  `spec_accepted_drafts`), `spec_correct_drafts_histogram` on the finished output of the native
  `/generate`; `sglext.spec_tokens_details` with the same keys on the OpenAI endpoints when the
  request sets `return_spec_tokens_details`.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from eagle3kit.core.errors import Eagle3Error


class ServerFault(Exception):
    """A server misbehaved (refused, dropped, HTTP error, stalled, bad JSON): one line."""


class Deadline:
    """A wall-clock bound shared by every call of one run."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self, what: str) -> float:
        left = self.left()
        if left <= 0:
            raise ServerFault(f"{what}: --timeout reached")
        return left


def split_url(url: str) -> tuple[str, int, str]:
    """(host, port, path prefix) of an http URL; Eagle3Error naming --url otherwise."""
    u = urlsplit(url if "://" in url else "http://" + url)
    if u.scheme != "http" or not u.hostname:
        raise Eagle3Error(f"--url: expected http://HOST:PORT, found {url!r}")
    try:
        port = u.port or 80
    except ValueError:
        raise Eagle3Error(f"--url: expected http://HOST:PORT, found {url!r}") from None
    return u.hostname, port, u.path.rstrip("/")


def _connect(url: str, deadline: Deadline, what: str) -> tuple[http.client.HTTPConnection, str]:
    host, port, prefix = split_url(url)
    conn = http.client.HTTPConnection(host, port, timeout=deadline.check(what))
    return conn, prefix


def request(
    url: str, path: str, deadline: Deadline, body: dict | None = None
) -> tuple[int, str, bytes]:
    """(status, content type, body) of GET (body None) or POST json; ServerFault on I/O."""
    what = f"{url}{path}"
    conn, prefix = _connect(url, deadline, what)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request("GET" if data is None else "POST", prefix + path, data, headers)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type") or "", r.read()
    except TimeoutError:
        raise ServerFault(f"{what}: no answer before --timeout") from None
    except (OSError, http.client.HTTPException) as e:
        raise ServerFault(f"{what}: {type(e).__name__} ({e})") from None
    finally:
        conn.close()


def get_json(url: str, path: str, deadline: Deadline) -> Any | None:
    """The JSON at GET path, or None when the server answers non-200 or non-JSON."""
    status, _, raw = request(url, path, deadline)
    if status != 200:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def get_text(url: str, path: str, deadline: Deadline) -> str | None:
    status, _, raw = request(url, path, deadline)
    return raw.decode("utf-8", "replace") if status == 200 else None


@dataclass
class Streamed:
    """One streamed request as the client saw it (times: seconds since the request was sent)."""

    text: str = ""
    ttft: float | None = None  # first chunk with content
    chunk_times: list[float] = field(default_factory=list)  # every chunk with content
    chunk_tokens: list[int] = field(default_factory=list)  # cumulative tokens when known
    end: float = 0.0
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    spec: dict[str, Any] | None = None  # normalised acceptance, see spec_from_*
    finish_reason: str | None = None

    def decode_span(self) -> tuple[int, float] | None:
        """(tokens - 1, last content chunk - first): what was decoded after the first token,
        and in how long."""
        n, t = self.completion_tokens, self.chunk_times
        if not n or n < 2 or len(t) < 2 or t[-1] <= t[0]:
            return None
        return n - 1, t[-1] - t[0]

    def decode_tps(self) -> float | None:
        """(tokens - 1) / (last content chunk - first): the decode rate after the first token."""
        span = self.decode_span()
        return None if span is None else span[0] / span[1]

    def itl(self) -> list[float]:
        """Inter-chunk latencies (a speculative step sends its tokens in one chunk)."""
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)]


def spec_from_vllm(m: dict) -> dict[str, Any] | None:
    """vLLM `metrics.speculative_decoding` -> {steps, accepted, drafted, histogram}."""
    if not isinstance(m, dict) or "num_spec_steps" not in m:
        return None
    return {
        "steps": int(m["num_spec_steps"]),
        "accepted": int(m.get("num_accepted_draft_tokens", 0)),
        "drafted": int(m.get("num_draft_tokens", 0)),
        "histogram": [int(x) for x in m.get("acceptance_histogram") or []],
        "k": m.get("num_spec_tokens"),
    }


def spec_from_sglang(m: dict) -> dict[str, Any] | None:
    """SGLang `meta_info` or `sglext.spec_tokens_details` -> the same normalised dict.
    Correct drafts: `spec_num_correct_drafts` (PR #24081), earlier `spec_accepted_drafts`
    (PR #23530), first `spec_accept_token_num` (PR #11144), else from the histogram."""
    if not isinstance(m, dict) or not m.get("spec_verify_ct"):
        return None
    correct = next(
        (
            m[k]
            for k in ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
            if m.get(k) is not None
        ),
        None,
    )
    hist = m.get("spec_correct_drafts_histogram", m.get("spec_accept_histogram")) or []
    if correct is None and hist:
        correct = sum(j * c for j, c in enumerate(hist))
    return {
        "steps": int(m["spec_verify_ct"]),
        "accepted": None if correct is None else int(correct),
        "drafted": m.get("spec_num_proposed_drafts", m.get("spec_proposed_drafts")),
        "histogram": [int(x) for x in hist],
        "engine_accept_length": m.get("spec_accept_length"),
    }


def _sse_lines(resp: http.client.HTTPResponse, conn, deadline: Deadline, what: str):
    """Yield each `data:` payload; stop at [DONE]; ServerFault on stall or drop."""
    while True:
        if conn.sock is not None:
            conn.sock.settimeout(max(deadline.check(what), 0.001))
        try:
            line = resp.readline()
        except TimeoutError:
            raise ServerFault(f"{what}: stream stalled until --timeout") from None
        except (OSError, http.client.HTTPException) as e:
            raise ServerFault(f"{what}: stream broken ({type(e).__name__})") from None
        if not line:
            raise ServerFault(f"{what}: stream ended without [DONE]")
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            return
        try:
            yield json.loads(payload)
        except ValueError:
            raise ServerFault(f"{what}: a stream chunk is not JSON: {payload[:80]!r}") from None


def _absorb_openai(s: Streamed, chunk: dict, t: float) -> None:
    """Fold one OpenAI chunk (chat or completions) into `s`."""
    usage = chunk.get("usage") or {}
    text = ""
    for c in chunk.get("choices") or []:
        delta = c.get("delta") or {}
        text += (delta.get("content") or "") + (c.get("text") or "")
        s.finish_reason = c.get("finish_reason") or s.finish_reason
    if text:
        s.text += text
        s.ttft = t if s.ttft is None else s.ttft
        s.chunk_times.append(t)
        if usage.get("completion_tokens") is not None:
            s.chunk_tokens.append(int(usage["completion_tokens"]))
    if usage.get("completion_tokens") is not None:
        s.completion_tokens = int(usage["completion_tokens"])
        s.prompt_tokens = usage.get("prompt_tokens")
    metrics = chunk.get("metrics")
    if isinstance(metrics, dict) and metrics.get("speculative_decoding"):
        s.spec = spec_from_vllm(metrics["speculative_decoding"])
    ext = chunk.get("sglext")
    if isinstance(ext, dict) and ext.get("spec_tokens_details"):
        d = ext["spec_tokens_details"]
        s.spec = spec_from_sglang(d[0] if isinstance(d, list) else d)


def _absorb_generate(s: Streamed, chunk: dict, t: float) -> None:
    """Fold one SGLang native /generate chunk (cumulative `text`) into `s`."""
    meta = chunk.get("meta_info") or {}
    text = chunk.get("text") or ""
    if not text.startswith(s.text):  # incremental streaming output: a delta, not the whole
        text = s.text + text
    if len(text) > len(s.text):
        s.text = text
        s.ttft = t if s.ttft is None else s.ttft
        s.chunk_times.append(t)
        if meta.get("completion_tokens") is not None:
            s.chunk_tokens.append(int(meta["completion_tokens"]))
    if meta.get("completion_tokens") is not None:
        s.completion_tokens = int(meta["completion_tokens"])
        s.prompt_tokens = meta.get("prompt_tokens")
    fin = meta.get("finish_reason")
    if isinstance(fin, dict):
        s.finish_reason = fin.get("type")
    spec = spec_from_sglang(meta)
    if spec is not None:
        s.spec = spec


def stream(url: str, path: str, body: dict, deadline: Deadline) -> Streamed:
    """POST a streaming request and time it chunk by chunk."""
    what = f"{url}{path}"
    conn, prefix = _connect(url, deadline, what)
    s, t0 = Streamed(), time.perf_counter()
    absorb = _absorb_generate if path == "/generate" else _absorb_openai
    try:
        conn.request("POST", prefix + path, json.dumps(body).encode(), _JSON)
        resp = conn.getresponse()
        if resp.status != 200:
            head = resp.read(200).decode("utf-8", "replace").replace("\n", " ")
            raise ServerFault(f"{what}: HTTP {resp.status} ({head.strip()})")
        for chunk in _sse_lines(resp, conn, deadline, what):
            absorb(s, chunk, time.perf_counter() - t0)
    except TimeoutError:
        raise ServerFault(f"{what}: no answer before --timeout") from None
    except (OSError, http.client.HTTPException) as e:
        raise ServerFault(f"{what}: {type(e).__name__} ({e})") from None
    finally:
        conn.close()
    s.end = time.perf_counter() - t0
    return s


_JSON = {"Content-Type": "application/json"}
