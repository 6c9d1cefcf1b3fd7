"""Interleaved A/B of running servers: `eagle3kit bench --url SPEC [--url ...] --baseline-url`.

Every deployment answers the same prompts. A block is (deployment, concurrency, suite): its
prompts run `concurrency` at a time, streamed. Round r runs, for every concurrency level and
suite, one block per deployment, the deployments in an order rotated by r, so drift in the
machines' speed hits them alike; `repeats` rounds give median/min/max.

Acceptance comes from the engines, never from a cumulative figure:
- vLLM's `/metrics` spec-decode counters are read just before and just after each of its
  blocks and the differences summed (over the `engine` label too), so the tau, per-position
  and conditional acceptance are those of this run's requests only;
- per request, where the engine reports it (vLLM `metrics.speculative_decoding`, SGLang
  `meta_info`/`sglext`), summed over the run's requests.
SGLang's `internal_states[].avg_spec_accept_length` is cumulative over the server's life: it
is shown, labelled so, and never used as the run's tau.

Everything is bounded by one `--timeout`: a fault (refused, dropped, HTTP error, stalled
stream) costs that request and becomes one line in `errors`; the rest is still measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.progress import Progress, emit
from eagle3kit.live.client import Deadline, ServerFault, Streamed, get_text, stream
from eagle3kit.live.server import (
    ServerInfo,
    SpecCounters,
    detect,
    sglang_life_tau,
    sglang_state,
    vllm_counters,
)
from eagle3kit.live.suites import Prompt
from eagle3kit.live.summary import summarise

ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
ENDPOINTS["generate"] = "/generate"


@dataclass
class LiveConfig:
    prompts: list[Prompt]
    max_tokens: int = 128
    temperature: float = 0.0
    repeats: int = 3
    concurrency: tuple[int, ...] = (1,)
    endpoint: str = "chat"  # chat | completions | generate (SGLang's native endpoint)
    timeout: float = 600.0
    depth: int | None = None  # the drafter's trained depth, for the tau-bound warning
    lengths: dict[str, int] = field(default_factory=dict)  # suite -> its prompts' context length

    def check(self) -> None:
        if not self.prompts:
            raise Eagle3Error("--suite/--data: expected prompts, found none")
        if self.endpoint not in ENDPOINTS:
            raise Eagle3Error(
                f"--endpoint: expected chat, completions or generate, found {self.endpoint!r}"
            )
        if self.endpoint == "chat" and any(p.ids is not None for p in self.prompts):
            raise Eagle3Error(
                "--endpoint: expected completions or generate with --context-lengths (the "
                "prompts go as token ids, exactly their length), found chat"
            )
        for name, v in (("--repeats", self.repeats), ("--max-tokens", self.max_tokens)):
            if v < 1:
                raise Eagle3Error(f"{name}: expected >= 1, found {v}")
        if not self.concurrency or min(self.concurrency) < 1:
            raise Eagle3Error(f"--concurrency: expected levels >= 1, found {self.concurrency}")
        if not self.timeout > 0:
            raise Eagle3Error(f"--timeout: expected > 0 seconds, found {self.timeout}")
        if self.temperature < 0:
            raise Eagle3Error(f"--temperature: expected >= 0, found {self.temperature}")


@dataclass
class Record:
    """One request (one turn) of one block."""

    round: int
    concurrency: int
    suite: str
    prompt: str
    turn: int
    result: Streamed | None = None
    error: str | None = None


@dataclass
class Deployment:
    url: str
    role: str  # "baseline" | "speculative"
    info: ServerInfo | None = None
    records: list[Record] = field(default_factory=list)
    counters: dict[tuple[int, str], SpecCounters] = field(default_factory=dict)
    block_s: dict[tuple[int, str], list[tuple[float, int]]] = field(default_factory=dict)
    life: dict[str, float | None] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def counted(self) -> bool:
        """vLLM with spec counters on /metrics: diff them around each block."""
        i = self.info
        return bool(i and i.engine == "vllm" and i.has_metrics and i.speculative)


def _body(
    dep: Deployment, cfg: LiveConfig, msgs: list[dict], text: str, ids: tuple[int, ...] | None
) -> dict[str, Any]:
    """The request body; a prompt built to a context length goes as its token ids: SGLang's
    `/generate` `input_ids` (GenerateReqInput, python/sglang/srt/managers/io_struct.py), the
    completions endpoint's `prompt` as a list of ints (vLLM's CompletionRequest.prompt:
    list[int] | list[list[int]] | str | list[str], vllm/entrypoints/openai; SGLang's alike)."""
    if cfg.endpoint == "generate":
        sp = {"max_new_tokens": cfg.max_tokens, "temperature": cfg.temperature}
        given = {"text": text} if ids is None else {"input_ids": list(ids)}
        return {**given, "sampling_params": sp, "stream": True}
    body: dict[str, Any] = {
        "model": dep.info.model if dep.info else None,
        "max_tokens": cfg.max_tokens,
        "temperature": cfg.temperature,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    prompt = text if ids is None else list(ids)
    body.update({"messages": msgs} if cfg.endpoint == "chat" else {"prompt": prompt})
    if dep.info and dep.info.engine == "sglang":
        body["return_spec_tokens_details"] = True  # SGLang PR #33518; ignored before it
    return body


def _run_prompt(dep: Deployment, cfg: LiveConfig, p: Prompt, r: int, c: int, dl: Deadline):
    """The prompt's turns in order (chat: each turn after the previous answer)."""
    out, msgs = [], []
    for t, turn in enumerate(p.turns):
        rec = Record(r, c, p.suite, p.id, t)
        msgs = msgs + [{"role": "user", "content": turn}]
        try:
            dl.check(dep.url)
            body = _body(dep, cfg, msgs, turn, p.ids)
            rec.result = stream(dep.url, ENDPOINTS[cfg.endpoint], body, dl)
        except ServerFault as e:
            rec.error = str(e)
            out.append(rec)
            break  # a later turn needs this answer
        msgs = msgs + [{"role": "assistant", "content": rec.result.text}]
        out.append(rec)
    return out


def _snapshot(dep: Deployment, dl: Deadline) -> SpecCounters | None:
    if not dep.counted:
        return None
    try:
        text = get_text(dep.url, "/metrics", dl)
    except ServerFault as e:
        dep.errors.append(f"/metrics: {e}")
        return None
    return vllm_counters(text) if text else None


def _settled(dep: Deployment, dl: Deadline, before: SpecCounters, tokens: int):
    """The counters after a block, once they account for the block's tokens: every verify
    step emits its accepted drafts + 1, so drafts + accepted should grow by the completion
    tokens after each request's first (vLLM's frontend may record the last step's stats
    just after the last chunk went out). Waits at most about 1.5 s, then takes what it has."""
    snap = _snapshot(dep, dl)
    for wait in (0.05, 0.1, 0.2, 0.4, 0.8):
        if snap is None or dl.left() < wait:
            return snap
        d = snap.minus(before)
        if d.drafts + d.accepted >= tokens:
            return snap
        time.sleep(wait)
        snap = _snapshot(dep, dl)
    return snap


def _block(dep: Deployment, cfg: LiveConfig, prompts: list[Prompt], key, r: int, dl: Deadline):
    """One block: counters before, the prompts `c` at a time, counters after."""
    c, suite = key
    before = _snapshot(dep, dl)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=c) as pool:
        futures = [pool.submit(_run_prompt, dep, cfg, p, r, c, dl) for p in prompts]
        recs = [rec for f in futures for rec in f.result()]
    wall = time.perf_counter() - t0
    dep.records += recs
    done = [x.result.completion_tokens or 0 for x in recs if x.result is not None]
    dep.block_s.setdefault(key, []).append((wall, sum(done)))
    decoded = sum(max(n - 1, 0) for n in done)
    after = _settled(dep, dl, before, decoded) if before is not None else None
    if before is not None and after is not None:
        prev = dep.counters.get(key, SpecCounters())
        dep.counters[key] = prev.plus(after.minus(before))


def _life(dep: Deployment, dl: Deadline, when: str) -> None:
    if dep.info is None or dep.info.engine != "sglang" or not dep.info.speculative:
        return
    try:
        doc = sglang_state(dep.url, dl)
    except ServerFault:
        doc = None
    dep.life[when] = sglang_life_tau(doc) if doc else None


def _detect_all(deps: list[Deployment], dl: Deadline, errors: list[str]) -> list[Deployment]:
    live = []
    for d in deps:
        try:
            d.info = detect(d.url, dl)
            live.append(d)
        except ServerFault as e:
            errors.append(f"{d.url}: not measured ({e})")
    return live


def run_live_bench(
    urls: list[str],
    baseline_url: str | None,
    cfg: LiveConfig,
    progress: Progress | None = None,
    on_detect: Callable[[ServerInfo], None] | None = None,
) -> dict[str, Any]:
    """Detect, then run the interleaved rounds; returns the `eagle3kit.bench-live` JSON."""
    cfg.check()
    if not urls:
        raise Eagle3Error("--url: expected at least one server URL")
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # orders before/after runs
    dl, errors = Deadline(cfg.timeout), []
    deps = [Deployment(baseline_url, "baseline")] if baseline_url else []
    deps += [Deployment(u, "speculative") for u in urls]
    deps = _detect_all(deps, dl, errors)
    for d in deps:
        if on_detect is not None and d.info is not None:
            on_detect(d.info)
        _life(d, dl, "before")
    suites = list(dict.fromkeys(p.suite for p in cfg.prompts))
    if not deps:
        return {**summarise(deps, cfg, errors, suites), "started": started}
    blocks = [(r, c, s) for r in range(cfg.repeats) for c in cfg.concurrency for s in suites]
    done = 0
    for r, c, s in blocks:
        if dl.left() <= 0:
            errors.append(
                f"--timeout ({cfg.timeout:g} s) reached after {done} of "
                f"{len(blocks)} rounds x levels x suites; figures are from those"
            )
            break
        prompts = [p for p in cfg.prompts if p.suite == s]
        for d in deps[r % len(deps) :] + deps[: r % len(deps)]:
            _block(d, cfg, prompts, (c, s), r, dl)
        done += 1
        emit(progress, "bench", done, len(blocks), unit="block")
    for d in deps:
        _life(d, dl, "after")
    return {**summarise(deps, cfg, errors, suites), "started": started}
