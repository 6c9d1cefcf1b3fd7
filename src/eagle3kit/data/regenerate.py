"""Regenerate conversations with the target itself: every assistant turn becomes its own answer.

A drafter learns to predict its target, so its training answers should be the target's own.
For each conversation, turn by turn:

    history = []
    for turn in conversation:
        if turn is an assistant turn:  turn.content = target(history)   # sees regenerated turns
        history.append(turn)

The generator is either the local target (``eagle3kit.decode.local.local_generator``: its chat
template, greedy at temperature 0 or sampled, stopping at EOS / end-of-turn) or one or more
OpenAI-compatible ``/v1/chat/completions`` servers (SGLang, vLLM) shared by ``concurrency``
worker threads; a failed request moves on to the next server.

Output: append-only JSONL, one finished sample per line, keyed by a stable id (the input's
``id`` field, else a hash of its turns: ``eagle3kit.data.conversations.sample_id``). Each
line is written by one ``os.write`` and fsynced, so a kill leaves at most one partial final
line; a rerun cuts it off, skips the ids already written and does the rest. Requests are
retried with exponential backoff on timeouts, connection errors, HTTP 429 and 5xx; a sample
that still fails is reported by id (and not written, so the next rerun tries it again).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle3kit.core.artifacts import stamp
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.progress import Progress, emit
from eagle3kit.core.stops import stop_point
from eagle3kit.data.conversations import (
    SHAREGPT_ROLES,
    Malformed,
    iter_records,
    summarise_reasons,
    validate,
)
from eagle3kit.data.openai_servers import (
    Answer,
    Generate,
    Messages,
    ServerPool,
    ServerUnreachable,
    server_generator,
)

if TYPE_CHECKING:
    from eagle3kit.model.target import TargetModel

CUT_FIELD = "cut_at_max_tokens"  # output record: how many of its answers max_tokens cut
TRUNCATED = ("keep", "drop")  # what to do with a sample holding such an answer


@dataclass
class RegenResult:
    """What ``regenerate`` did: samples done now, failed ids, ids found already done."""

    done: int = 0
    failed: list[str] = field(default_factory=list)
    already_done: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)  # input lines not understood
    errors: dict[str, str] = field(default_factory=dict)  # failed id -> last error
    output: str = ""
    answered: int = 0  # of `done`: prompt-only conversations (or empty assistant turns) answered
    truncated: str = "keep"  # samples with an answer cut at max_tokens: "keep" (marked) or "drop"
    max_tokens: int = 0
    cut_answers: int = 0  # answers that ended with finish_reason "length" (cut at max_tokens)
    cut_samples: int = 0  # samples holding at least one such answer (written or dropped)
    dropped: list[str] = field(default_factory=list)  # ids of those left out (truncated="drop")

    def to_json(self) -> dict[str, Any]:
        doc = {
            "done": self.done,
            "failed": self.failed,
            "already_done": self.already_done,
            "skipped": self.skipped,
            "errors": self.errors,
            "output": self.output,
            "answered": self.answered,
            CUT_FIELD: {
                "answers": self.cut_answers,
                "samples": self.cut_samples,
                "max_tokens": self.max_tokens,
                "action": self.truncated,
                "dropped": self.dropped,
            },
        }
        return stamp(doc, "regenerate")


# -- conversation records --------------------------------------------------------------------
def _assistant_turns(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's own assistant turns (in its own form), in order."""
    if rec.get("conversations") is not None:  # validate's rule: None reads as absent
        return [
            t
            for t in rec["conversations"]
            if SHAREGPT_ROLES.get(str(t.get("from")).lower()) == "assistant"
        ]
    return [t for t in rec["messages"] if t.get("role") == "assistant"]


def answered_open(rec: dict[str, Any], answers: list[str]) -> bool:
    """Did ``answers`` fill an empty assistant turn of ``rec`` or add one after a final user
    turn (a prompt-only conversation)?"""
    own = _assistant_turns(rec)
    if len(answers) > len(own):
        return True
    return any(not str(t.get("value", t.get("content")) or "").strip() for t in own)


def with_answers(rec: dict[str, Any], sid: str, answers: list[str]) -> dict[str, Any]:
    """The input record with its assistant turns' text replaced, in the input's own form.

    Every other field (of the record and of each turn) is kept as it was. One answer more
    than the record has assistant turns (it ended with a user turn) becomes a new last turn.
    """
    sharegpt = rec.get("conversations") is not None  # validate's rule: None reads as absent
    out = dict(rec)
    out["id"] = sid
    it = iter(answers)
    new_turns = []
    for t in rec["conversations"] if sharegpt else rec["messages"]:
        t = dict(t)
        if sharegpt and SHAREGPT_ROLES.get(str(t.get("from")).lower()) == "assistant":
            t["value"] = next(it)
        elif not sharegpt and t.get("role") == "assistant":
            t["content"] = next(it)
        new_turns.append(t)
    for extra in it:  # the answer to a final user turn
        new_turns.append(
            {"from": "gpt", "value": extra} if sharegpt else {"role": "assistant", "content": extra}
        )
    out["conversations" if sharegpt else "messages"] = new_turns
    return out


def regenerate_one(msgs: Messages, sid: str, generate: Generate) -> list[Answer]:
    """Turn by turn: each assistant turn is generated from the history, earlier ones replaced.
    A generator's plain-text answer reads as Answer(text) (finish reason unknown)."""
    history: Messages = []
    answers = []
    for m in msgs:
        if m["role"] == "assistant":
            a = generate(list(history), sid)
            a = a if isinstance(a, Answer) else Answer(a)
            m = {"role": "assistant", "content": a.text}
            answers.append(a)
        history.append(m)
    return answers


# -- resumable append-only output ------------------------------------------------------------
def resume_output(path: Path) -> set[str]:
    """Ids already written to ``path``; a partial final line (a kill mid-write) is cut off."""
    if not path.exists():
        return set()
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1  # bytes up to the last complete line
    if end < len(data):
        with open(path, "r+b") as f:
            f.truncate(end)
            os.fsync(f.fileno())
    ids: set[str] = set()
    for n, line in enumerate(data[:end].splitlines(), 1):
        if not line.strip():
            continue
        try:
            ids.add(str(json.loads(line)["id"]))
        except (ValueError, KeyError, TypeError):
            raise bad(
                f"{path}:{n}",
                "expected a JSON object with an 'id' (a finished sample), "
                "found something else; fix or remove that line",
            ) from None
    return ids


def append_line(fd: int, obj: dict[str, Any]) -> None:
    """One whole line in one write, then fsync: a kill leaves it complete or partial-at-the-end."""
    data = (json.dumps(obj, ensure_ascii=False) + "\n").encode()
    n = os.write(fd, data)
    while n < len(data):  # a short write (rare on regular files): finish it
        n += os.write(fd, data[n:])
    os.fsync(fd)


def read_input(path: Path) -> tuple[list[tuple[str, dict, Messages]], list[dict[str, Any]]]:
    """(samples [(id, record, turns)] in input order, skipped [{file, line, reason}]).

    Records are checked by the shared parser (``eagle3kit.data.conversations.validate``), in
    its ``open_ok`` mode: a conversation that ends with a user turn, or has an empty assistant
    turn, is kept (it gets the target's answer); a repeated id is skipped the second time.
    """
    samples, skipped, seen = [], [], set()
    for line, rec in iter_records(path):
        try:
            if isinstance(rec, Malformed):
                raise rec
            conv = validate(rec, open_ok=True)
        except Malformed as e:
            skipped.append({"file": str(path), "line": line, "reason": str(e)})
            continue
        if conv.id in seen:
            skipped.append({"file": str(path), "line": line, "reason": f"duplicate id {conv.id}"})
            continue
        seen.add(conv.id)
        samples.append((conv.id, rec, conv.turns))
    return samples, skipped


# -- the local target ------------------------------------------------------------------------
def stop_ids(target: TargetModel) -> set[int]:
    """EOS / end-of-turn ids: the tokenizer's eos plus generation_config's (int or list)."""
    ids: set[int] = set()
    tok = target.tokenizer
    if tok is not None and tok.eos_token_id is not None:
        ids.add(int(tok.eos_token_id))
    gen = getattr(target.model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None)
    for e in eos if isinstance(eos, list | tuple) else [eos]:
        if e is not None:
            ids.add(int(e))
    return ids


def chat_prompt_ids(
    tokenizer: Any, msgs: Messages, template_kwargs: dict | None = None
) -> list[int]:
    """The chat template's tokens for ``msgs`` plus the assistant generation prompt."""
    enc = tokenizer.apply_chat_template(
        msgs, add_generation_prompt=True, tokenize=True, return_dict=True, **(template_kwargs or {})
    )
    return list(enc["input_ids"])


def _results(
    pending: list[tuple[str, dict, Messages]], generate: Generate, concurrency: int
) -> Iterator[tuple[str, dict, list[Answer] | None, Exception | None]]:
    """Yield (id, record, answers or None, error) as samples finish (completion order).

    Closing the iterator early (a stop) cancels the samples not yet started."""
    if concurrency <= 1:
        for sid, rec, msgs in pending:
            try:
                yield sid, rec, regenerate_one(msgs, sid, generate), None
            except (RuntimeError, ValueError) as e:
                yield sid, rec, None, e
        return
    pool = ThreadPoolExecutor(concurrency)
    try:
        todo = iter(pending)
        running: dict[Any, tuple[str, dict]] = {}

        def submit() -> None:
            for sid, rec, msgs in itertools.islice(todo, concurrency * 2 - len(running)):
                running[pool.submit(regenerate_one, msgs, sid, generate)] = (sid, rec)

        submit()
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                sid, rec = running.pop(fut)
                try:
                    yield sid, rec, fut.result(), None
                except (RuntimeError, ValueError) as e:
                    yield sid, rec, None, e
            submit()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


MAX_UNREACHABLE = 8  # samples in a row that could not connect: the servers are gone, stop


def regenerate(
    input_path: str | Path,
    output_path: str | Path,
    *,
    generate: Generate | None = None,
    servers: list[str] | None = None,
    model: str | None = None,
    max_tokens: int = 512,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    concurrency: int = 1,
    retries: int = 4,
    timeout: float = 120.0,
    template_kwargs: dict[str, Any] | None = None,
    truncated: str = "keep",
    progress: Progress | None = None,
) -> RegenResult:
    """Regenerate every assistant turn of INPUT into OUTPUT (resumable; see the module doc).

    ``generate``: a local generator (``eagle3kit.decode.local.local_generator(TargetModel,
    ...)``, one sample at a time); or ``servers``: base URLs of OpenAI-compatible servers
    (``model`` defaults to the name ``/v1/models`` reports). ``template_kwargs`` go to the
    servers as ``chat_template_kwargs`` (the local generator takes its own), e.g.
    ``{"enable_thinking": False}`` for Qwen3's non-thinking mode.

    A conversation that ends with a user turn (prompts only) gets the target's answer as a
    new last turn (counted in ``answered``). The servers are asked once (``/v1/models``)
    before any sample; ``MAX_UNREACHABLE`` samples in a row that cannot connect stop the run
    with an Eagle3Error (what was written stays; a rerun resumes).

    An answer that ended because ``max_tokens`` ran out (finish_reason "length") is counted
    (``cut_answers``, ``cut_samples``); ``truncated="keep"`` writes its sample with
    ``"cut_at_max_tokens": n`` added, ``"drop"`` leaves the sample out (listed in ``dropped``;
    a rerun with a larger ``max_tokens`` tries it again).
    """
    _check_options(generate, servers, max_tokens, concurrency, retries, timeout, temperature, top_p)
    if truncated not in TRUNCATED:
        raise bad("--truncated", f"expected one of {', '.join(TRUNCATED)}, found {truncated!r}")
    inp, outp = Path(input_path), Path(output_path)
    pending, res = _resume(inp, outp)
    res.truncated, res.max_tokens = truncated, max_tokens
    if generate is not None:
        concurrency = 1
    else:
        pool = ServerPool(list(servers or []), timeout)
        if pending:
            pool.check()
        generate = server_generator(
            pool,
            model or (pool.model_name() if pending else "default"),
            max_tokens,
            temperature,
            retries,
            template_kwargs=template_kwargs,
            top_p=top_p,
            seed=seed,
        )
    _write(outp, pending, generate, concurrency, res, progress)
    return res


def _check_options(
    generate: Generate | None,
    servers: list[str] | None,
    max_tokens: int,
    concurrency: int,
    retries: int,
    timeout: float,
    temperature: float,
    top_p: float,
) -> None:
    """Refuse a bad option (Eagle3Error naming it) before any file is read."""
    if (generate is None) == (not servers):
        raise Eagle3Error("regenerate: give exactly one of a local generator or --server URLs")
    if max_tokens < 1:
        raise bad("--max-tokens", f"expected a positive int, found {max_tokens}")
    if concurrency < 1:
        raise bad("--concurrency", f"expected a positive int, found {concurrency}")
    if retries < 0:
        raise bad("--retries", f"expected an int >= 0, found {retries}")
    if not timeout > 0:
        raise bad("--timeout", f"expected seconds > 0, found {timeout}")
    if not temperature >= 0:
        raise bad("--temperature", f"expected a number >= 0, found {temperature}")
    if not 0 < top_p <= 1:
        raise bad("--top-p", f"expected a number in (0, 1], found {top_p}")


def _resume(inp: Path, outp: Path) -> tuple[list, RegenResult]:
    """The samples OUTPUT does not hold yet, and the result so far (those it holds, skips)."""
    _check_paths(inp, outp)
    samples, skipped = read_input(inp)
    if not samples:
        raise bad(str(inp), f"no usable conversation ({_why(skipped)})")
    finished = resume_output(outp)
    pending = [s for s in samples if s[0] not in finished]
    res = RegenResult(already_done=len(samples) - len(pending), skipped=skipped, output=str(outp))
    return pending, res


def _why(skipped: list[dict[str, Any]]) -> str:
    """'3 no assistant turn, 1 bad JSON' from skip reasons (their 'turn N: ' prefix dropped)."""
    if not skipped:
        return "the file holds no record"
    return summarise_reasons(s["reason"] for s in skipped)


def _check_paths(inp: Path, outp: Path) -> None:
    if not inp.exists():
        raise bad(str(inp), "no such file")
    if inp.is_dir():
        raise bad(str(inp), "expected a JSONL file, found a directory")
    if outp.exists() and not outp.is_file():
        raise bad(f"--output {outp}", "expected a JSONL file, found a directory")
    if outp.resolve() == inp.resolve():
        raise bad(f"--output {outp}", "is the input file; write the answers elsewhere")


def _write(
    outp: Path,
    pending: list,
    generate: Generate,
    concurrency: int,
    res: RegenResult,
    progress: Progress | None,
) -> None:
    """Append each finished sample to OUTPUT as it completes; failures go to `res`.

    ``MAX_UNREACHABLE`` connection failures in a row stop the run (Eagle3Error, one line)."""
    outp.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(outp, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    results = _results(pending, generate, concurrency)
    unreachable = 0
    try:
        emit(progress, "regenerate", 0, len(pending), "sample")
        t0 = time.monotonic()
        for sid, rec, answers, err in results:
            if answers is None:
                res.failed.append(sid)
                res.errors[sid] = str(err)
                unreachable = unreachable + 1 if isinstance(err, ServerUnreachable) else 0
                if unreachable >= MAX_UNREACHABLE:
                    raise _gone(outp, res, str(err))
            else:
                if _finish(fd, sid, rec, answers, res):
                    stop_point("after", outp)  # a line in place (core/stops.py)
                unreachable = 0
            n = res.done + len(res.failed)
            rate = n / max(time.monotonic() - t0, 1e-9)
            emit(
                progress,
                "regenerate",
                n,
                len(pending),
                "sample",
                failed=len(res.failed),
                per_s=rate,
            )
    finally:
        results.close()
        os.close(fd)


def _finish(fd: int, sid: str, rec: dict, answers: list[Answer], res: RegenResult) -> bool:
    """Write one regenerated sample (marked when max_tokens cut an answer), or drop it: True
    when written."""
    cut = sum(a.cut for a in answers)
    out = with_answers(rec, sid, [a.text for a in answers])
    if cut:
        res.cut_answers += cut
        res.cut_samples += 1
        if res.truncated == "drop":
            res.dropped.append(sid)
            return False
        out[CUT_FIELD] = cut
    append_line(fd, out)
    res.done += 1
    res.answered += answered_open(rec, answers)
    return True


def _gone(outp: Path, res: RegenResult, last: str) -> Eagle3Error:
    return bad(
        "--server",
        f"stopped after {MAX_UNREACHABLE} samples in a row could not connect (last: "
        f"{last.split(' (', 1)[-1].rstrip(')')}); {res.done} samples written to {outp} are "
        "kept, rerun the same command to resume",
    )
