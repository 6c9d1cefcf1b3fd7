"""Test fixture: vLLM's `extract_hidden_states` route on 127.0.0.1, backed by a zoo target.

Not a product feature. It speaks the protocol as vLLM and speculators implement it:

- launch config: the JSON of ``--speculative-config`` (``method`` "extract_hidden_states",
  ``num_speculative_tokens`` 1, ``draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids``;
  vLLM `vllm/v1/spec_decode/extract_hidden_states.py` asserts num_speculative_tokens == 1) and
  of ``--kv-transfer-config`` (``kv_connector`` "ExampleHiddenStatesConnector", ``kv_role``
  "kv_producer", ``kv_connector_extra_config.shared_storage_path``, default /tmp; vLLM
  `vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py`);
- ``POST /v1/completions`` with ``prompt`` as token ids; generates one greedy token and, as the
  connector does, writes ``<shared_storage_path>/<request id>.safetensors`` with
  ``hidden_states`` [T, n_layers, H] (model dtype, layers in ascending id order) and
  ``token_ids`` [T] int64 (the prompt), holding ``LOCK_EX`` on ``<path>.lock`` from before the
  response until the write is done (the connector's ``wait_for_save``/``_write_tensors``);
  the response carries ``kv_transfer_params.hidden_states_path`` (``request_finished``) and,
  with ``return_token_ids``, ``choices[0].prompt_token_ids`` / ``token_ids`` and, with
  ``logprobs``, the completions API's ``logprobs.token_logprobs``.
- layer id k < L is the residual stream after decoder layer k-1 (vLLM
  `EagleModelMixin._maybe_add_hidden_state`), i.e. transformers' ``hidden_states[k]``; id L is
  the last layer's output before the final norm (taken here at the norm's input).

Faults: ``n_minus_1`` (one layer fewer, vLLM #46973), ``few_positions`` (two positions short),
``http500`` (every completion answers HTTP 500 with vLLM's error JSON), ``slow`` (each write
held ``write_delay`` s), ``stuck`` (the writer never finishes: the lock stays held),
``no_answer`` (requests are accepted and never answered until the server stops),
``no_file`` (the writer fails: the lock is released and no file written). Wrong
layers: launch it with other ids. The server stops itself after ``lifetime`` seconds.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from local_server import LocalServer, send_json

FAULTS = (None, "n_minus_1", "few_positions", "http500", "slow", "stuck", "no_answer", "no_file")


def check_launch(spec: dict, kv: dict) -> tuple[list[int], str]:
    """What vLLM would refuse at startup; returns (layer ids, shared_storage_path)."""
    if spec.get("method") != "extract_hidden_states":
        raise ValueError(f"method: expected extract_hidden_states, found {spec.get('method')!r}")
    if spec.get("num_speculative_tokens") != 1:
        raise ValueError("num_speculative_tokens must be 1 for extract_hidden_states")
    ids = spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"]
    if kv.get("kv_connector") != "ExampleHiddenStatesConnector" or kv.get("kv_role") != (
        "kv_producer"
    ):
        raise ValueError(f"kv-transfer-config: unexpected {kv}")
    path = (kv.get("kv_connector_extra_config") or {}).get("shared_storage_path", "/tmp")
    return [int(i) for i in ids], str(path)


class FakeVllmCapture(LocalServer):
    def __init__(
        self,
        model_dir: str,
        spec: dict,
        kv: dict,
        *,
        fault: str | None = None,
        write_delay: float = 0.02,
        lifetime: float = 120.0,
    ) -> None:
        import torch

        from eagle3kit.model.target import TargetModel

        if fault not in FAULTS:
            raise ValueError(f"fault: expected one of {FAULTS}, found {fault!r}")
        self.layer_ids, self.storage = check_launch(spec, kv)
        self.tm = TargetModel.from_pretrained(model_dir)
        self.model = self.tm.model
        super().__init__(lifetime)
        self.fault, self.write_delay = fault, write_delay
        if fault == "slow":
            self.write_delay = max(write_delay, 0.3)
        self.requests = 0
        self._model_lock = threading.Lock()
        self._torch = torch

    # -- the model ---------------------------------------------------------------------------
    def _states(self, ids: list[int]):
        """(hidden_states [T, n, H], greedy next token) for one prompt."""
        torch = self._torch
        pre_norm: list = []
        norm = self.model.model.norm
        with self._model_lock, torch.no_grad():  # one forward (and its hook) at a time
            h = norm.register_forward_pre_hook(lambda _m, args: pre_norm.append(args[0]))
            try:
                out = self.model(torch.tensor([ids]), output_hidden_states=True)
            finally:
                h.remove()
        L = len(out.hidden_states) - 1
        cols = []
        for k in sorted(self.layer_ids):  # the connector writes in ascending id order
            cols.append(pre_norm[0][0] if k == L else out.hidden_states[k][0])  # [T, H]
        hs = torch.stack(cols, dim=1)  # [T, n, H]
        lp = torch.log_softmax(out.logits[0, -1].float(), -1)  # [V]
        tok = int(lp.argmax())
        return hs, tok, float(lp[tok])

    def _write(self, path: Path, ids: list[int]):
        """Take the lock, answer, then write and release (in a thread)."""
        torch = self._torch
        from safetensors.torch import save_file

        hs, tok, lp = self._states(ids)
        toks = torch.tensor(ids, dtype=torch.int64)
        if self.fault == "n_minus_1":
            hs = hs[:, :-1]
        if self.fault == "few_positions":
            hs, toks = hs[:-2], toks[:-2]
        lock_fd = os.open(str(path) + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)

        def writer() -> None:
            try:
                if self.fault == "stuck":
                    self.stopped.wait(self.lifetime)
                    return
                if self.fault == "no_file":  # the connector logs the failed write and goes on
                    return
                time.sleep(self.write_delay)
                save_file({"hidden_states": hs.contiguous(), "token_ids": toks}, str(path))
            finally:
                os.close(lock_fd)  # releases LOCK_EX

        threading.Thread(target=writer, daemon=True).start()
        return tok, lp

    def completion(self, body: dict) -> tuple[int, dict]:
        self.requests += 1
        ids = body.get("prompt")
        if not (isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids)):
            return 400, {"error": {"message": "prompt: expected token ids", "code": 400}}
        if body.get("max_tokens") != 1:
            return 400, {"error": {"message": "this test server expects max_tokens 1"}}
        if self.fault == "no_answer":
            self.stopped.wait(self.lifetime)
            return 503, {"error": {"message": "shutting down", "code": 503}}
        if self.fault == "http500":
            return 500, {"error": {"message": "EngineCore encountered an issue", "code": 500}}
        rid = f"cmpl-{uuid.uuid4().hex}-0"
        Path(self.storage).mkdir(parents=True, exist_ok=True)
        path = Path(self.storage) / f"{rid}.safetensors"
        tok, lp = self._write(path, ids)
        choice: dict[str, Any] = {"index": 0, "text": "", "finish_reason": "length"}
        if body.get("logprobs"):  # the completions API's logprobs object
            name = f"token_id:{tok}"
            choice["logprobs"] = {
                "tokens": [name],
                "token_logprobs": [lp],
                "top_logprobs": [{name: lp}],
                "text_offset": [0],
            }
        if body.get("return_token_ids"):
            choice.update(prompt_token_ids=ids, token_ids=[tok])
        return 200, {
            "id": rid,
            "object": "text_completion",
            "model": body.get("model", "fake"),
            "choices": [choice],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": 1},
            "kv_transfer_params": {"hidden_states_path": str(path)},
        }

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeVllmCapture:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n) or b"{}")
                if self.path.rstrip("/") != "/v1/completions":
                    code, doc = 404, {"error": {"message": "not found"}}
                else:
                    try:
                        code, doc = server.completion(body)
                    except Exception as e:  # noqa: BLE001 - vLLM answers 500 with the error
                        code, doc = 500, {"error": {"message": repr(e), "code": 500}}
                send_json(self, code, doc)

        return self.serve(Handler)
