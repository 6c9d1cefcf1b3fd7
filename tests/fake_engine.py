"""Test fixture: a fake SGLang or vLLM server on 127.0.0.1 doing real speculative decoding.

Not a product feature. Built on a zoo tiny target and an eagle3kit drafter; every generation
runs `eagle3kit.decode.speculative_generate` (speculative mode) or a plain greedy/sampling loop
on the target (plain mode), and the server keeps its own decoder's counts (`self.log`,
`self.totals`) so a test can check what the client measured against them.

Protocols, with the field names of the engines' sources:
- both: `GET /v1/models`; `POST /v1/chat/completions` and `/v1/completions`, SSE streaming
  (`data: {...}` lines, `data: [DONE]`), one chunk per decode step (a speculative step sends
  its accepted drafts and bonus in one delta); `stream_options.include_usage` adds a last
  chunk with `choices: []` and `usage`; `continuous_usage_stats` puts the cumulative usage on
  every chunk.
- vllm: `/metrics` Prometheus text with the cumulative counters of
  vllm/v1/spec_decode/metrics.py (vllm-project/vllm@016a858): `vllm:spec_decode_num_drafts`,
  `..._num_draft_tokens`, `..._num_accepted_tokens`, `..._num_accepted_tokens_per_pos`
  (labels `engine`, `model_name`, `position`), present only when speculating, every position
  from startup; `per_request=True` adds `metrics.speculative_decoding` to the usage chunk
  (vLLM PR #48915: `num_spec_steps`, `num_draft_tokens`, `num_accepted_draft_tokens`,
  `acceptance_histogram` dense of length k+1, `mean_acceptance_length`, `num_spec_tokens`);
  `/version`; with `dev_mode=True` (vLLM's VLLM_SERVER_DEV_MODE=1) also
  `/server_info?config_format=json` with `vllm_config.speculative_config`.
- sglang: native `POST /generate` (cumulative `text`, `meta_info.completion_tokens` per chunk,
  spec keys only on the finished output as in
  python/sglang/srt/managers/tokenizer_manager_components/spec_decoding_meta.py
  (sgl-project/sglang@9155cf0): `spec_verify_ct`, `spec_accept_length` = completion tokens /
  verify count, `spec_num_correct_drafts`, `spec_num_proposed_drafts` = verify count x
  (num_draft_tokens - 1), `spec_correct_drafts_histogram`, plus the aliases); with
  `sglext=True` the OpenAI endpoints honour `return_spec_tokens_details` (PR #33518) with a
  `choices: []` chunk carrying `sglext.spec_tokens_details`; `GET /server_info` and
  `/get_server_info`: flat ServerArgs with `speculative_*`, `version` and
  `internal_states[0].avg_spec_accept_length` cumulative over the server's life.

`drafter="ngram"` serves prompt lookup (vLLM `"method": "ngram"`, SGLang `NGRAM`) with
eagle3kit's lookup loop at `depth` drafts per cycle, greedy only; its counters are kept as
for a drafter (a cycle that found no match drafted nothing). A DFlash, P-EAGLE or MTP drafter
(or `method=`) is served and reported as vLLM and SGLang serve and report that method
(tests/fake_methods.py, with the sources).
`batching=True` serves greedy plain decoding and prompt lookup in a running batch, one
batched target forward per step for every active request (tests/fake_batching.py); other
methods, and sampling, decode one generation at a time under the model lock.
`stats_lag=S` moves the counters S seconds after the answer went out.
Faults (`fault=`): "drop" (every `fault_every`-th generation request: connection closed
without an answer), "500" (every `fault_every`-th answers HTTP 500), "stall" (the
`fault_every`-th stream sends two chunks and then nothing), "no-metrics" (`/metrics` 404).
Each server stops itself after `lifetime` seconds.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

import torch
from fake_methods import check, decode, method_of, sglang_args, vllm_config
from local_server import LocalServer, send_json

from eagle3kit.data.regenerate import chat_prompt_ids
from eagle3kit.decode import Sampling
from eagle3kit.decode.sampling import draw, probs

MODEL_LOCK = threading.Lock()  # one generation at a time in this process (shared target)
GEN_PATHS = ("/v1/chat/completions", "/v1/completions", "/generate")


class FakeEngine(LocalServer):
    def __init__(
        self,
        target,
        drafter=None,
        *,
        engine: str = "vllm",
        depth: int = 3,
        per_request: bool = False,
        sglext: bool = False,
        fault: str | None = None,
        fault_every: int = 3,
        lifetime: float = 60.0,
        name: str = "zoo-tiny",
        draft_path: str = "/models/zoo-drafter",
        dev_mode: bool = False,
        stats_lag: float = 0.0,
        batching: bool = False,
        method: str | None = None,
    ) -> None:
        if engine not in ("vllm", "sglang"):
            raise ValueError(f"engine: expected vllm or sglang, found {engine!r}")
        if fault not in (None, "drop", "500", "stall", "no-metrics"):
            raise ValueError(f"fault: unknown {fault!r}")
        self.target, self.drafter, self.engine, self.depth = target, drafter, engine, depth
        self.method = method or method_of(drafter)  # tests/fake_methods.py
        check(self.method, engine)
        self.per_request, self.sglext, self.fault = per_request, sglext, fault
        super().__init__(lifetime)
        self.fault_every, self.name = fault_every, name
        self.draft_path, self.dev_mode, self.stats_lag = draft_path, dev_mode, stats_lag
        self.batching = batching
        self.batcher = None  # tests/fake_batching.py StepBatcher, started with the server
        self.log: list[dict[str, Any]] = []  # one entry per finished generation
        self.totals = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * depth}
        self.life = {"cycles": 0, "tokens": 0}  # sglang's cumulative accept length
        self.requests = 0
        self.bodies: list[dict[str, Any]] = []  # every generation request body, in order
        self.arrivals: list[float] = []  # time.monotonic() of each generation request
        self._lock = threading.Lock()

    @property
    def speculative(self) -> bool:
        return self.drafter is not None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeEngine:
        if self.batching and self.method in (None, "ngram"):
            from fake_batching import StepBatcher

            k = self.depth if self.method == "ngram" else 0
            self.batcher = StepBatcher(self.target, MODEL_LOCK, self.stopped, lookup=k)
        return self.serve(_handler(self))

    # -- ground truth --------------------------------------------------------------------------
    def tau(self, entries: list[dict] | None = None) -> float:
        """1 + accepted drafts / verify cycles over `entries` (default: every generation)."""
        es = self.log if entries is None else entries
        cycles = sum(len(e["accepted"]) for e in es)
        return 1 + sum(sum(e["accepted"]) for e in es) / cycles

    def per_position(self, entries: list[dict] | None = None) -> list[float]:
        es = self.log if entries is None else entries
        acc = [a for e in es for a in e["accepted"]]
        return [sum(a >= i for a in acc) / len(acc) for i in range(1, self.depth + 1)]

    def _record(self, stats, n_tokens: int, path: str) -> dict[str, Any]:
        accepted = [c.accepted for c in stats.cycles]
        drafted = sum(c.drafted for c in stats.cycles)
        entry = {"path": path, "accepted": accepted, "drafted": drafted, "tokens": n_tokens}
        entry["total_s"] = stats.total_s
        with self._lock:
            self.log.append(entry)
        if self.stats_lag > 0:  # the counters move a little after the answer (as vLLM's may)
            timer = threading.Timer(self.stats_lag, self._count, (accepted, drafted))
            timer.daemon = True
            timer.start()
        else:
            self._count(accepted, drafted)
        return entry

    def _count(self, accepted: list[int], drafted: int) -> None:
        with self._lock:
            t = self.totals
            t["drafts"] += len(accepted)
            t["draft_tokens"] += drafted
            t["accepted"] += sum(accepted)
            for i in range(self.depth):
                t["per_pos"][i] += sum(a >= i + 1 for a in accepted)
            self.life["cycles"] += len(accepted)
            self.life["tokens"] += sum(a + 1 for a in accepted)

    # -- generation ----------------------------------------------------------------------------
    def generate(self, ids: list[int], max_tokens: int, temperature: float, on_tokens, path: str):
        """Decode under the model lock; `on_tokens(new)` once per decode step."""
        eos = self.target.tokenizer.eos_token_id
        if self.batcher is not None and temperature == 0:
            return self._batched(ids, max_tokens, eos, on_tokens, path)
        with MODEL_LOCK:
            if self.speculative:
                g = decode(self, ids, max_tokens, temperature, eos, on_tokens)
                entry = self._record(g.stats, len(g.tokens), path)
                entry["tokens_ids"] = g.tokens
                return g.tokens, entry
            tokens = _plain(self.target, ids, max_tokens, temperature, eos, on_tokens)
        with self._lock:
            entry = {"path": path, "accepted": [], "drafted": 0, "tokens": len(tokens)}
            entry["tokens_ids"] = tokens
            self.log.append(entry)
        return tokens, entry

    def _batched(self, ids: list[int], max_tokens: int, eos, on_tokens, path: str):
        """Greedy plain decoding or prompt lookup in the running batch (fake_batching.py)."""
        row = self.batcher.generate(ids, max_tokens, eos, on_tokens)
        tokens = row.out.tokens
        if self.speculative:
            entry = self._record(_Stats(row.cycles), len(tokens), path)
        else:
            entry = {"path": path, "accepted": [], "drafted": 0, "tokens": len(tokens)}
            with self._lock:
                self.log.append(entry)
        entry["tokens_ids"] = tokens
        return tokens, entry

    def vllm_spec(self, e: dict) -> dict[str, Any]:
        acc, k = e["accepted"], self.depth
        steps = len(acc)
        hist = [sum(a == j for a in acc) for j in range(k + 1)]
        return {
            "mean_acceptance_length": 1 + sum(acc) / steps if steps else 0.0,
            "draft_acceptance_rate": sum(acc) / e["drafted"] if e["drafted"] else 0.0,
            "acceptance_histogram": hist,
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": sum(acc),
            "num_draft_tokens": e["drafted"],
            "num_spec_tokens": k,
        }

    def sglang_spec(self, e: dict) -> dict[str, Any]:
        acc = e["accepted"]
        if not acc:
            return {}
        correct, proposed = sum(acc), len(acc) * self.depth  # num_draft_tokens - 1 = depth
        hist = [0] * (max(acc) + 1)
        for a in acc:
            hist[a] += 1
        return {
            "spec_accept_rate": correct / proposed,
            "spec_accept_length": e["tokens"] / len(acc),
            "spec_num_correct_drafts": correct,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": len(acc),
            "spec_accepted_drafts": correct,
            "spec_proposed_drafts": proposed,
            "spec_correct_drafts_histogram": hist,
            "spec_accept_histogram": hist,
        }

    # -- server documents ----------------------------------------------------------------------
    def metrics_text(self) -> str:
        lab = f'engine="0",model_name="{self.name}"'
        lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches."]
        lines += [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lab}}} 0.0",
        ]
        if not self.speculative:
            return "\n".join(lines) + "\n"
        t = self.totals
        for key, help_ in (
            ("num_drafts", "Number of spec decoding drafts."),
            ("num_draft_tokens", "Number of draft tokens."),
            ("num_accepted_tokens", "Number of accepted tokens."),
        ):
            name = f"vllm:spec_decode_{key}"
            val = t[
                {"num_drafts": "drafts", "num_draft_tokens": "draft_tokens"}.get(key, "accepted")
            ]
            lines += [f"# HELP {name}_total {help_}", f"# TYPE {name}_total counter"]
            lines += [f"{name}_total{{{lab}}} {float(val)}", f"{name}_created{{{lab}}} 1.7e9"]
        name = "vllm:spec_decode_num_accepted_tokens_per_pos"
        lines += [f"# HELP {name}_total Accepted tokens per draft position."]
        lines += [f"# TYPE {name}_total counter"]
        for i, v in enumerate(t["per_pos"]):
            lines.append(f'{name}_total{{{lab},position="{i}"}} {float(v)}')
        return "\n".join(lines) + "\n"

    def server_info(self) -> dict[str, Any]:
        spec = self.speculative
        state: dict[str, Any] = {"last_gen_throughput": 0.0}
        if spec and self.life["cycles"]:
            state["avg_spec_accept_length"] = self.life["tokens"] / self.life["cycles"]
        args = sglang_args(self) if spec else dict.fromkeys(sglang_args(self))
        return {
            "model_path": self.name,
            "tp_size": 1,
            **args,
            "internal_states": [state],
            "version": "0.5.14",
        }

    def take_fault(self) -> str | None:
        """The fault this generation request suffers (every `fault_every`-th), or None."""
        with self._lock:
            self.requests += 1
            n = self.requests
        if self.fault in ("drop", "500", "stall") and n % self.fault_every == 0:
            return self.fault
        return None


class _Stats:
    """What `_record` reads of a batched row: its cycles."""

    def __init__(self, cycles) -> None:
        self.cycles, self.total_s = cycles, 0.0


def _plain(target, ids, max_tokens: int, temperature: float, eos, on_tokens) -> list[int]:
    """Plain decoding, one target forward per token (greedy at temperature 0)."""
    s = Sampling(temperature)
    gen = None if s.greedy else torch.Generator().manual_seed(0)

    def choose(logits):
        return int(logits.argmax()) if s.greedy else draw(probs(logits, s), gen)

    tokens: list[int] = []
    with torch.inference_mode():
        x = choose(target.prefill(torch.tensor([ids])).logits[0, -1])
        while x != eos:
            tokens.append(x)
            on_tokens([x])
            if len(tokens) >= max_tokens:
                break
            x = choose(target.verify(torch.tensor([[x]])).logits[0, -1])
    return tokens


def _handler(eng: FakeEngine):
    class Handler(_Base):
        engine = eng

    return Handler


class _Base(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one request per connection; a stream ends by closing
    engine: FakeEngine

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send_body(self, status: int, ctype: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json(self, status: int, doc: Any) -> None:
        send_json(self, status, doc)

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        eng, path = self.engine, self.path.split("?")[0]
        if path == "/v1/models":
            card = {"id": eng.name, "object": "model", "created": 0, "owned_by": eng.engine}
            card.update(root=eng.name, parent=None, max_model_len=2048, permission=[])
            return self._json(200, {"object": "list", "data": [card]})
        if path == "/metrics" and eng.fault != "no-metrics":
            text = eng.metrics_text() if eng.engine == "vllm" else _sglang_metrics(eng)
            return self._send_body(200, "text/plain; version=0.0.4", text.encode())
        if eng.engine == "sglang" and path in ("/server_info", "/get_server_info"):
            return self._json(200, eng.server_info())
        if eng.engine == "vllm" and eng.dev_mode and path == "/server_info":
            cfg = {"speculative_config": vllm_config(eng) if eng.speculative else None}
            return self._json(200, {"vllm_config": cfg})
        if eng.engine == "vllm" and path == "/version":
            return self._json(200, {"version": "0.32.0"})
        if path == "/health":
            return self._send_body(200, "text/plain", b"")
        self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        eng, path = self.engine, self.path
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        if path not in GEN_PATHS or (path == "/generate" and eng.engine != "sglang"):
            return self._json(404, {"detail": "Not Found"})
        eng.bodies.append(body)
        eng.arrivals.append(time.monotonic())
        fault = eng.take_fault()
        if fault == "drop":
            self.close_connection = True
            return  # nothing written: the client sees the connection closed
        if fault == "500":
            err = {"object": "error", "message": "Internal Server Error", "code": 500}
            return self._json(500, err)
        try:
            _Generation(self, body, path, fault).run()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def sse_start(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()

    def sse(self, doc: Any) -> None:
        payload = doc if isinstance(doc, str) else json.dumps(doc)
        self.wfile.write(f"data: {payload}\n\n".encode())
        self.wfile.flush()


def _sglang_metrics(eng: FakeEngine) -> str:
    """SGLang's gauges (last decode-log interval, not cumulative), as --enable-metrics gives."""
    lab = f'model_name="{eng.name}",tp_rank="0"'
    acc = eng.tau() if eng.speculative and any(e["accepted"] for e in eng.log) else 0.0
    return (
        "# HELP sglang:spec_accept_length The average acceptance length\n"
        "# TYPE sglang:spec_accept_length gauge\n"
        f"sglang:spec_accept_length{{{lab}}} {acc}\n"
    )


class _Generation:
    """One generation request: prompt ids, decode, stream or answer in the path's protocol."""

    def __init__(self, h: _Base, body: dict, path: str, fault: str | None) -> None:
        self.h, self.body, self.path, self.fault = h, body, path, fault
        self.eng = h.engine
        self.tok = self.eng.target.tokenizer
        self.native = path == "/generate"
        sp = body.get("sampling_params") or {} if self.native else body
        self.max_tokens = int(sp.get("max_new_tokens" if self.native else "max_tokens") or 16)
        self.temperature = float(sp.get("temperature") or 0.0)
        self.stream = bool(body.get("stream"))
        self.opts = body.get("stream_options") or {}
        self.rid = f"req-{time.monotonic_ns()}"
        self.ids: list[int] = []
        self.emitted: list[int] = []
        self.shown = ""
        self.t0 = time.perf_counter()

    def prompt_ids(self) -> list[int]:
        if self.path.endswith("chat/completions"):
            return chat_prompt_ids(self.tok, self.body["messages"])
        given = self.body.get("input_ids" if self.native else "prompt")
        if isinstance(given, list):  # token ids (SGLang's input_ids; a completions prompt)
            return [int(t) for t in given]
        text = self.body.get("text" if self.native else "prompt") or ""
        return self.tok(text)["input_ids"]

    def run(self) -> None:
        self.ids = self.prompt_ids()
        live = self.stream and self.fault != "stall"
        if self.stream:
            self.h.sse_start()
        tokens, entry = self.eng.generate(
            self.ids,
            self.max_tokens,
            self.temperature,
            self.step if live else self.keep,
            self.path,
        )
        if self.fault == "stall":
            for upto in range(1, min(2, len(self.emitted)) + 1):
                self.send_upto(upto)
            self.eng.stopped.wait(self.eng.lifetime)
            return
        finish = "length" if len(tokens) >= self.max_tokens else "stop"
        if not self.stream:
            return self.h._json(200, self.whole(tokens, entry, finish))
        self.finish(tokens, entry, finish)
        self.h.sse("[DONE]")

    def keep(self, new: list[int]) -> None:
        self.emitted.extend(new)

    def usage(self, n: int) -> dict[str, int]:
        p = len(self.ids)
        return {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}

    def step(self, new: list[int]) -> None:
        """One decode step: one chunk with the step's text."""
        self.emitted.extend(new)
        self.send_upto(len(self.emitted))

    def send_upto(self, upto: int) -> None:
        text = self.tok.decode(self.emitted[:upto])
        delta, self.shown = text[len(self.shown) :], text
        if self.native:
            meta = {"id": self.rid, "finish_reason": None, **self.meta(upto)}
            return self.h.sse({"text": text, "output_ids": self.emitted[:upto], "meta_info": meta})
        chunk = self.chunk(delta, None)
        if self.opts.get("include_usage") and self.opts.get("continuous_usage_stats"):
            chunk["usage"] = self.usage(upto)
        self.h.sse(chunk)

    def meta(self, n: int) -> dict[str, Any]:
        return {"prompt_tokens": len(self.ids), "completion_tokens": n, "cached_tokens": 0}

    def chunk(self, delta: str, finish: str | None) -> dict[str, Any]:
        chat = self.path.endswith("chat/completions")
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
        choice.update({"delta": {"content": delta}} if chat else {"text": delta})
        obj = "chat.completion.chunk" if chat else "text_completion"
        return {
            "id": self.rid,
            "object": obj,
            "created": 0,
            "model": self.eng.name,
            "choices": [choice],
            "usage": None,
        }

    def spec_blocks(self, entry: dict) -> dict[str, Any]:
        """What the engine adds about speculation for this request (maybe nothing)."""
        eng = self.eng
        if not eng.speculative:
            return {}
        if eng.engine == "vllm" and eng.per_request:
            return {"metrics": {"speculative_decoding": eng.vllm_spec(entry)}}
        if eng.engine == "sglang" and eng.sglext and self.body.get("return_spec_tokens_details"):
            return {"sglext": {"spec_tokens_details": eng.sglang_spec(entry) or None}}
        return {}

    def finish(self, tokens: list[int], entry: dict, finish: str) -> None:
        n = len(tokens)
        if self.native:
            reason = {"type": "length", "length": n} if finish == "length" else {"type": "stop"}
            meta = {"id": self.rid, "finish_reason": reason, **self.meta(n)}
            meta["e2e_latency"] = time.perf_counter() - self.t0
            meta.update(self.eng.sglang_spec(entry) if self.eng.speculative else {})
            return self.h.sse({"text": self.shown, "output_ids": tokens, "meta_info": meta})
        self.h.sse(self.chunk("", finish))
        extra = self.spec_blocks(entry)
        if "sglext" in extra:  # SGLang sends it in its own chunk before the usage chunk
            self.h.sse({"id": self.rid, "object": "text_completion", "choices": [], **extra})
            extra = {}
        if self.opts.get("include_usage"):
            self.h.sse(
                {
                    "id": self.rid,
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": self.eng.name,
                    "choices": [],
                    "usage": self.usage(n),
                    **extra,
                }
            )

    def whole(self, tokens: list[int], entry: dict, finish: str) -> dict[str, Any]:
        text = self.tok.decode(tokens)
        if self.native:
            meta = {"id": self.rid, "finish_reason": {"type": finish}, **self.meta(len(tokens))}
            meta.update(self.eng.sglang_spec(entry) if self.eng.speculative else {})
            return {"text": text, "output_ids": tokens, "meta_info": meta}
        chat = self.path.endswith("chat/completions")
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
        choice.update(
            {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        )
        return {
            "id": self.rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": 0,
            "model": self.eng.name,
            "choices": [choice],
            "usage": self.usage(len(tokens)),
            **self.spec_blocks(entry),
        }
