"""One sample through vLLM's `extract_hidden_states` route: the request, the lock, the file.

The protocol, as vLLM and speculators implement it (cited in docs/engine-capture.md):

- request: ``POST {url}/v1/completions`` with ``prompt`` = the sample's token ids,
  ``max_tokens`` 1, ``temperature`` 0 and ``return_token_ids`` true (speculators
  `src/speculators/data_generation/vllm_client.py`);
- response: the usual completion, plus a top-level ``kv_transfer_params.hidden_states_path``
  naming the file the connector writes, ``<shared_storage_path>/<request id>.safetensors``
  (vLLM `ExampleHiddenStatesConnector.request_finished`);
- file: ``hidden_states`` [T, n_layers, H] in the model's dtype (layers in ascending id order)
  and ``token_ids`` [T] int64, the prompt's tokens; written by a writer thread that holds
  ``LOCK_EX`` on ``<path>.lock`` until the write is complete. We take ``LOCK_SH`` (vLLM's own
  ``load_hidden_states``), polling without blocking so that a stuck writer times out.

The server writes paths on its own filesystem; we read the same file name under
``states_dir`` (the same directory, possibly mounted elsewhere), then delete it and its lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from eagle3kit.core.errors import Eagle3Error

RETRY_STATUS = (429, 500, 502, 503, 504)


class CaptureError(Eagle3Error):
    """A sample the engine did not capture as asked (one line: the sample and what differs)."""


@dataclass(frozen=True)
class Expect:
    """What every file must hold: n_layers layers of hidden_size, in dtype."""

    layer_ids: tuple[int, ...]
    hidden_size: int
    dtype: torch.dtype | None


def _post(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - the user's server
        return json.loads(r.read().decode())


def _error_text(e: urllib.error.HTTPError) -> str:
    try:
        doc = json.loads(e.read().decode() or "{}")
    except (ValueError, OSError):
        return f"HTTP {e.code}"
    err = doc.get("error") if isinstance(doc.get("error"), dict) else doc
    msg = err.get("message") if isinstance(err, dict) else None
    return f"HTTP {e.code}" + (f" ({msg})" if msg else "")


def request_states(
    base: str, model: str | None, sid: str, ids: list[int], timeout: float, retries: int
) -> dict[str, Any]:
    """POST the completion for one sample; retries 429/5xx and connection errors."""
    body: dict[str, Any] = {
        "prompt": ids,
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": 1,
        "return_token_ids": True,
    }
    if model:
        body["model"] = model
    url = base.rstrip("/") + "/v1/completions"
    why = ""
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(min(0.2 * 2**attempt, 5.0))
        try:
            return _post(url, body, timeout)
        except urllib.error.HTTPError as e:
            why = _error_text(e)
            if e.code not in RETRY_STATUS:
                break
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
            reason = getattr(e, "reason", None) or e
            if isinstance(reason, TimeoutError) or "timed out" in str(reason):
                why = f"no answer within {timeout:g} s"
            else:
                why = f"cannot reach the server ({reason})"
        except ValueError as e:
            why = f"the response is not JSON ({e})"
            break
    raise CaptureError(f"sample {sid}: {url}: {why} (after {attempt + 1} tries)")


def states_path(resp: dict[str, Any], sid: str, ids: list[int], states_dir: Path) -> Path:
    """Where the file is, under states_dir; checks the response echoes the prompt's tokens."""
    ch = (resp.get("choices") or [{}])[0]
    echoed = ch.get("prompt_token_ids", resp.get("prompt_token_ids"))
    if echoed is not None and list(echoed) != ids:
        raise CaptureError(
            f"sample {sid}: the server tokenised another prompt: prompt_token_ids has "
            f"{len(echoed)} tokens, the request {len(ids)}"
        )
    params = resp.get("kv_transfer_params") or {}
    path = params.get("hidden_states_path") if isinstance(params, dict) else None
    if not isinstance(path, str) or not path:
        raise CaptureError(
            f"sample {sid}: the response has no kv_transfer_params.hidden_states_path; launch "
            "vLLM with the --kv-transfer-config of `data capture --launch-command`"
        )
    return states_dir / Path(path).name


def wait_unlocked(path: Path, sid: str, timeout: float) -> None:
    """Until the writer's LOCK_EX on ``<path>.lock`` is released and ``path`` exists."""
    lock = path.with_name(path.name + ".lock")
    end = time.monotonic() + timeout
    while True:
        if lock.exists():
            try:
                fd = os.open(lock, os.O_RDONLY)
            except FileNotFoundError:
                fd = None
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    if path.exists():
                        return
                    raise CaptureError(
                        f"sample {sid}: {path.name}: the writer released its lock without "
                        "writing the file (the server's log says why)"
                    )
                except BlockingIOError:
                    pass
                finally:
                    os.close(fd)  # also releases our shared lock
        elif path.exists():
            return
        if time.monotonic() > end:
            what = "still locked by the writer" if lock.exists() else "not there"
            raise CaptureError(f"sample {sid}: {path}: {what} after {timeout:g} s")
        time.sleep(0.01)


def read_states(path: Path, sid: str, ids: list[int], want: Expect) -> torch.Tensor:
    """The file's hidden_states [T, n, H] after every check against the request."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            keys = set(f.keys())
            if not {"hidden_states", "token_ids"} <= keys:
                raise CaptureError(
                    f"sample {sid}: {path.name}: expected tensors hidden_states and token_ids, "
                    f"found {sorted(keys)}"
                )
            hs, toks = f.get_tensor("hidden_states"), f.get_tensor("token_ids")
    except SafetensorError as e:
        raise CaptureError(f"sample {sid}: {path.name}: not a safetensors file ({e})") from e
    check_states(hs, toks, sid, ids, want)
    return hs


def check_states(
    hs: torch.Tensor, toks: torch.Tensor, sid: str, ids: list[int], want: Expect
) -> None:
    """One line naming the sample and the first thing that differs from the request."""
    T, n, H = len(ids), len(want.layer_ids), want.hidden_size
    if hs.ndim != 3:
        raise CaptureError(
            f"sample {sid}: hidden_states: expected [T, n_layers, H] = [{T}, {n}, {H}], "
            f"found {list(hs.shape)}"
        )
    if hs.shape[0] != T or toks.numel() != T:
        raise CaptureError(
            f"sample {sid}: {hs.shape[0]} positions in hidden_states and {toks.numel()} "
            f"token_ids, expected the prompt's {T}"
        )
    if toks.tolist() != ids:
        at = next(i for i, (a, b) in enumerate(zip(toks.tolist(), ids, strict=True)) if a != b)
        raise CaptureError(
            f"sample {sid}: token_ids differ from the request at position {at} "
            f"({toks[at].item()} vs {ids[at]})"
        )
    if hs.shape[1] != n:
        extra = ""
        if hs.shape[1] == n - 1:
            extra = (
                "; one fewer: the server was launched without one of these ids, or it is "
                "the DeepSeek-family N-1 case (vLLM issue #46973)"
            )
        raise CaptureError(
            f"sample {sid}: hidden_states has {hs.shape[1]} layers, expected {n} "
            f"(layer ids {list(want.layer_ids)}){extra}"
        )
    if hs.shape[2] != H:
        raise CaptureError(f"sample {sid}: hidden size {hs.shape[2]}, expected the target's {H}")
    if want.dtype is not None and hs.dtype != want.dtype:
        raise CaptureError(
            f"sample {sid}: hidden_states dtype {str(hs.dtype).removeprefix('torch.')}, "
            f"expected {str(want.dtype).removeprefix('torch.')} (the launch command's --dtype)"
        )


def remove_states(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".lock")):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def sampled_token(resp: dict[str, Any]) -> tuple[int | None, float | None]:
    """(the token the engine sampled, its log-prob), each None when the response lacks it
    (completions ``choices[0].token_ids`` and ``logprobs.token_logprobs``)."""
    ch = (resp.get("choices") or [{}])[0]
    toks = ch.get("token_ids")
    tok = int(toks[0]) if isinstance(toks, list) and toks else None
    lps = (ch.get("logprobs") or {}).get("token_logprobs")
    lp = lps[0] if isinstance(lps, list) and lps and isinstance(lps[0], int | float) else None
    return tok, lp
