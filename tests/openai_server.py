"""Test fixture: an OpenAI-compatible chat server on 127.0.0.1 backed by a zoo tiny target.

Not a product feature. It answers ``GET /v1/models`` and ``POST /v1/chat/completions``
(greedy, ``max_tokens`` honoured, the target's chat template), one generation at a time. It
generates with transformers' own ``generate``, a different code path from the local
generator in ``eagle3kit.data.regenerate``, so the two can be compared.

Each answer carries ``finish_reason`` as the engines set it (the OpenAI protocol's field):
"length" when ``max_tokens`` tokens were generated without an end-of-turn token (vLLM:
``vllm/v1/engine/__init__.py`` FinishReason.LENGTH, "max_tokens was consumed"; SGLang:
``FINISH_LENGTH`` in ``python/sglang/srt/managers/schedule_batch.py``, serialised as
{"type": "length"} and returned as the choice's finish_reason), else "stop"; the cut text is
returned all the same.

Modes:
- ``normal``
- ``flaky``: every third chat request (3rd, 6th, ...) answers HTTP 500
- ``die``: the ``die_after``-th chat request gets its connection dropped without an answer and
  the server shuts down (later connections are refused)

Each server bounds its own lifetime: a daemon timer stops it after ``lifetime`` seconds even if
the test forgets to.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any

import torch
from local_server import LocalServer, send_json


def _hf_greedy(target: Any, ids: list[int], n: int, eos: int | None) -> list[int]:
    """transformers' own greedy generate (not eagle3kit's decoder): EOS kept when hit."""
    with torch.no_grad():
        out = target.model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=n,
            eos_token_id=eos,
            pad_token_id=eos if eos is not None else 0,
        )[0, len(ids) :].tolist()
    return out[: out.index(eos) + 1] if eos is not None and eos in out else out


class FakeOpenAIServer(LocalServer):
    def __init__(
        self,
        model_dir: str,
        *,
        mode: str = "normal",
        die_after: int = 3,
        lifetime: float = 120.0,
        name: str = "zoo-tiny",
    ) -> None:
        from eagle3kit.model.target import TargetModel

        if mode not in ("normal", "flaky", "die"):
            raise ValueError(f"mode: expected normal, flaky or die, found {mode!r}")
        self.target = TargetModel.from_pretrained(model_dir)
        super().__init__(lifetime)
        self.mode, self.die_after, self.name = mode, die_after, name
        self.chat_requests = 0  # chat requests received (answered or not)
        self.answered = 0
        self.bodies: list[dict] = []  # every chat request body, in arrival order
        self._count_lock = threading.Lock()
        self._model_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(
                        200, {"object": "list", "data": [{"id": server.name, "object": "model"}]}
                    )
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n) or b"{}")
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": "not found"})
                with server._count_lock:
                    server.bodies.append(body)
                    server.chat_requests += 1
                    k = server.chat_requests
                if server.mode == "flaky" and k % 3 == 0:
                    return self._send(500, {"error": "injected failure"})
                if server.mode == "die" and k >= server.die_after:
                    self.close_connection = True  # drop this request unanswered, then die
                    threading.Thread(target=server.stop, daemon=True).start()
                    return None
                text, finish = server.generate(body["messages"], int(body.get("max_tokens", 64)))
                with server._count_lock:
                    server.answered += 1
                return self._send(
                    200,
                    {
                        "id": f"chatcmpl-{k}",
                        "object": "chat.completion",
                        "model": server.name,
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": finish,
                                "message": {"role": "assistant", "content": text},
                            }
                        ],
                    },
                )

            def _send(self, code: int, doc: dict) -> None:
                send_json(self, code, doc)

        return self.serve(Handler)

    # -- generation ------------------------------------------------------------------------
    def generate(self, messages: list[dict], max_tokens: int) -> tuple[str, str]:
        """(text, finish_reason): "stop" at the end-of-turn token, "length" at max_tokens."""
        tok = self.target.tokenizer
        enc = tok.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True
        )
        with self._model_lock:
            ids = _hf_greedy(self.target, list(enc["input_ids"]), max_tokens, tok.eos_token_id)
        finish = "length"
        if ids and ids[-1] == tok.eos_token_id:
            ids, finish = ids[:-1], "stop"
        return tok.decode(ids, skip_special_tokens=True), finish
