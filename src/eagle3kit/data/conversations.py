"""Conversations in, normalised turns out: the one parser that prepare and regenerate share.

Two input forms, one record per JSONL line (or one row of a Hugging Face `datasets` dataset):

    ShareGPT  {"id"?: ..., "system"?: str,
               "conversations": [{"from": "human"|"gpt"|..., "value": str}]}
    OpenAI    {"id"?: ..., "messages": [{"role": "system"|"user"|"assistant", "content": str}]}

A valid conversation, once normalised to `[{"role", "content"}]`, is: an optional system turn
first, then user and assistant turns alternating, starting with user and ending with assistant;
every content a non-empty string. Anything else is malformed: `validate` raises `Malformed`
with a short reason, and readers report it with the file and its line number (from 1).

A benchmark needs prompts only: `validate_prompt` also takes a conversation without answers and
a `{"prompt": str}` row (`read_prompts`; `bench --data`, in-process and live).

Nothing here imports torch: the CLI and the regenerate workers use it cheaply.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3kit.core.errors import Eagle3Error

# ShareGPT speaker names seen in public dumps -> OpenAI roles.
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "system": "system",
}
OPENAI_ROLES = ("system", "user", "assistant")


class Malformed(ValueError):
    """One record is unusable; the message is the reason (no file or line: readers add those)."""


@dataclass(frozen=True)
class Conversation:
    """A validated record: its turns, the input form it came in, and its stable id."""

    id: str
    form: str  # "sharegpt" | "openai"
    turns: list[dict[str, str]]  # [{"role": "system"|"user"|"assistant", "content": str}]
    open: bool = False  # validate(open_ok=True): an assistant turn was empty or missing at the end


@dataclass(frozen=True)
class Problem:
    """A skipped record: where it was and why (JSON: {"file", "line", "reason"})."""

    file: str
    line: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "reason": self.reason}

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


def _content(x: Any, where: str, allow_empty: bool = False) -> str:
    """A turn's text: a string, or OpenAI content parts that are all text.

    ``allow_empty``: an empty (or null) text is kept as "" (an assistant turn to be answered)."""
    if allow_empty and (x is None or (isinstance(x, str) and not x.strip())):
        return ""
    if isinstance(x, list):
        texts = []
        for part in x:
            if not (isinstance(part, dict) and part.get("type") == "text"):
                raise Malformed(f"{where}: only text content parts are supported")
            texts.append(part.get("text"))
        x = "".join(t for t in texts if isinstance(t, str))
    if not isinstance(x, str):
        raise Malformed(f"{where}: content must be a string, found {type(x).__name__}")
    if not x.strip():
        raise Malformed(f"{where}: empty content")
    return x


def _sharegpt_turns(record: dict, open_ok: bool = False) -> list[dict[str, str]]:
    conv = record["conversations"]
    if not isinstance(conv, list):
        raise Malformed(f"conversations: expected a list, found {type(conv).__name__}")
    turns = []
    system = record.get("system")
    if isinstance(system, str) and system.strip():
        turns.append({"role": "system", "content": system})
    for i, t in enumerate(conv, 1):
        if not isinstance(t, dict) or "from" not in t or "value" not in t:
            raise Malformed(f"turn {i}: expected an object with 'from' and 'value'")
        who = t["from"]
        role = SHAREGPT_ROLES.get(who.lower()) if isinstance(who, str) else None
        if role is None:
            raise Malformed(f"turn {i}: unknown role {who!r}")
        empty_ok = open_ok and role == "assistant"
        turns.append({"role": role, "content": _content(t["value"], f"turn {i}", empty_ok)})
    return turns


def _openai_turns(record: dict, open_ok: bool = False) -> list[dict[str, str]]:
    msgs = record["messages"]
    if not isinstance(msgs, list):
        raise Malformed(f"messages: expected a list, found {type(msgs).__name__}")
    turns = []
    for i, m in enumerate(msgs, 1):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise Malformed(f"turn {i}: expected an object with 'role' and 'content'")
        if m["role"] not in OPENAI_ROLES:
            raise Malformed(f"turn {i}: unknown role {m['role']!r}")
        empty_ok = open_ok and m["role"] == "assistant"
        turns.append({"role": m["role"], "content": _content(m["content"], f"turn {i}", empty_ok)})
    return turns


def check_turns(turns: list[dict[str, str]]) -> None:
    """Optional system first, then user/assistant alternating from user, ending with assistant."""
    body = turns[1:] if turns and turns[0]["role"] == "system" else turns
    if not body:
        raise Malformed("no turns")
    for i, t in enumerate(body):
        n = i + 1 + (len(turns) - len(body))
        want = "user" if i % 2 == 0 else "assistant"
        if t["role"] != want:
            raise Malformed(
                f"turn {n}: expected role {want} (turns must alternate), found {t['role']}"
            )
    if not any(t["role"] == "assistant" for t in body):
        raise Malformed("no assistant turn")
    if body[-1]["role"] != "assistant":
        raise Malformed(f"turn {len(turns)}: the last turn must be assistant, found user")


def reason_kind(reason: str) -> str:
    """A skip reason without its specifics, for counting: 'turn 3: empty content' ->
    'empty content', 'bad JSON: Expecting value at column 1' -> 'bad JSON'."""
    r = re.sub(r"^turn \d+: ", "", reason)
    for cut in (": ", " (", ", found", " 'id", " {"):
        if cut in r and not r.startswith(cut):
            r = r.split(cut, 1)[0]
    return "duplicate id" if r.startswith("duplicate id") else r


def summarise_reasons(reasons: Iterable[str]) -> str:
    """'3 no assistant turn, 1 bad JSON': skip reasons counted by kind, most common first."""
    from collections import Counter

    counts = Counter(reason_kind(r) for r in reasons)
    return ", ".join(f"{n} {why}" for why, n in counts.most_common())


def sample_id(record: dict, turns: list[dict[str, str]]) -> str:
    """The record's `id` field when it has one, else a hash of its normalised turns (stable)."""
    rid = record.get("id")
    if isinstance(rid, str) and rid:
        return rid
    if isinstance(rid, int) and not isinstance(rid, bool):
        return str(rid)
    blob = json.dumps(turns, ensure_ascii=False, sort_keys=True).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()[:20]


def validate(record: Any, open_ok: bool = False) -> Conversation:
    """A raw record -> Conversation, or Malformed(reason).

    ``open_ok`` (regenerate: the answers are written anew): an assistant turn may be empty,
    and a conversation may end with a user turn, in which case an empty assistant turn is
    appended to ``turns`` (the Conversation's ``open`` is then True, as it is when an
    assistant turn was empty): prompts only are enough.
    """
    if not isinstance(record, dict):
        raise Malformed(f"expected a JSON object, found {type(record).__name__}")
    # a column absent from a row of a datasets table reads as None: treat it as absent
    has_sg = record.get("conversations") is not None
    has_oa = record.get("messages") is not None
    if has_sg == has_oa:
        what = "both" if has_sg else "neither"
        raise Malformed(
            f"expected one of 'conversations' (ShareGPT) or 'messages' (OpenAI), found {what}"
        )
    form = "sharegpt" if has_sg else "openai"
    turns = _sharegpt_turns(record, open_ok) if has_sg else _openai_turns(record, open_ok)
    if open_ok and turns and turns[-1]["role"] == "user":
        turns.append({"role": "assistant", "content": ""})
    check_turns(turns)
    is_open = open_ok and any(t["role"] == "assistant" and not t["content"] for t in turns)
    return Conversation(sample_id(record, turns), form, turns, is_open)


def _jsonl_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number from 1, parsed object or Malformed) for each non-blank line."""
    try:
        fh = open(path, encoding="utf-8-sig", errors="strict")  # noqa: SIM115
    except OSError as e:
        raise Eagle3Error(f"{path}: cannot read ({e.strerror or e})") from e
    with fh:
        n = 0
        while True:
            n += 1
            try:
                line = fh.readline()
            except UnicodeDecodeError as e:
                raise Eagle3Error(f"{path}:{n}: not UTF-8 text ({e.reason})") from e
            if not line:
                return
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as e:
                yield n, Malformed(f"bad JSON: {e.msg} at column {e.colno}")


def _json_array_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(record number from 1, record) of a `.json` file holding one JSON array (ShareGPT dumps)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise Eagle3Error(f"{path}: expected a JSON array of conversations ({e})") from e
    if not isinstance(doc, list):
        raise Eagle3Error(
            f"{path}: expected a JSON array of conversations, found {type(doc).__name__}"
        )
    yield from enumerate(doc, 1)


def _is_json_array(path: Path) -> bool:
    if path.suffix.lower() != ".json":
        return False
    with open(path, "rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"[")


def _dataset_rows(source: str) -> Iterator[tuple[int, Any]]:
    """(row number from 1, row dict) of a saved Hugging Face dataset (or a hub id)."""
    from eagle3kit.data.hf_datasets import iter_rows

    yield from enumerate(iter_rows(source), 1)


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def iter_records(path: str | Path) -> Iterator[tuple[int, Any]]:
    """Raw records of one input: a JSONL file, a `.json` array (numbered by record), a saved
    `datasets` directory (numbered by row), or a hub dataset id."""
    p = Path(path).expanduser()
    if p.is_file():
        return _json_array_records(p) if _is_json_array(p) else _jsonl_records(p)
    if p.is_dir():
        return _dataset_rows(str(p))
    s = str(path)
    if _HUB_ID.fullmatch(s) and not s.endswith((".jsonl", ".json")):
        return _dataset_rows(s)  # "owner/name": a hub dataset id (needs `datasets` and network)
    raise Eagle3Error(f"{path}: no such file or directory")


PROMPT_FIELDS = ("prompt", "text")  # a prompt-only row: {"prompt": str} (or {"text": str})


def validate_prompt(record: Any) -> Conversation:
    """A record a benchmark can send, or Malformed(reason): what `validate(open_ok=True)`
    accepts (a conversation; assistant turns may be empty or absent: prompts only are enough)
    or a row with neither 'conversations' nor 'messages' but a 'prompt' string (one user turn).
    Training data keeps `validate`'s rule: at least one assistant answer."""
    is_row = isinstance(record, dict)
    if is_row and record.get("conversations") is None and record.get("messages") is None:
        field = next((f for f in PROMPT_FIELDS if record.get(f) is not None), None)
        if field is not None:
            turns = [{"role": "user", "content": _content(record[field], field)}]
            turns.append({"role": "assistant", "content": ""})
            return Conversation(sample_id(record, turns[:1]), "prompt", turns, True)
        raise Malformed(
            "expected one of 'conversations' (ShareGPT), 'messages' (OpenAI) or 'prompt', "
            "found none"
        )
    return validate(record, open_ok=True)


def user_turns(conv: Conversation) -> list[str]:
    """The texts of a conversation's user turns, in order (what a benchmark sends)."""
    return [t["content"] for t in conv.turns if t["role"] == "user"]


def read_conversations(
    paths: Iterable[str | Path], check: Callable[[Any], Conversation] = validate
) -> Iterator[tuple[str, int, Conversation | Problem]]:
    """(file, line, Conversation) per valid record and (file, line, Problem) per malformed one.

    Lines count from 1 (blank lines count but yield nothing). The caller decides what a
    Problem means (skip and report, or --strict: stop). ``check`` is `validate` (training
    data) or `validate_prompt` (benchmark prompts).
    """
    for path in paths:
        for line, rec in iter_records(path):
            if isinstance(rec, Malformed):
                yield str(path), line, Problem(str(path), line, str(rec))
                continue
            try:
                yield str(path), line, check(rec)
            except Malformed as e:
                yield str(path), line, Problem(str(path), line, str(e))


def read_prompts(
    path: str | Path, limit: int | None = None
) -> tuple[list[Conversation], list[Problem]]:
    """The benchmark prompts of one input (`validate_prompt`; at most ``limit``) and the
    records skipped as unusable, as `data prepare` skips them. None usable: Eagle3Error."""
    convs: list[Conversation] = []
    problems: list[Problem] = []
    for _file, _line, item in read_conversations([path], validate_prompt):
        if isinstance(item, Problem):
            problems.append(item)
        elif limit is None or len(convs) < limit:
            convs.append(item)
        else:
            break
    if not convs:
        why = f" ({len(problems)} unusable, first: {problems[0].reason})" if problems else ""
        raise Eagle3Error(
            f"{path}: expected at least one prompt (a conversation with a user turn, "
            f'or {{"prompt": ...}}), found none{why}'
        )
    return convs, problems


def sample_seed(seed: int, sid: str, prompt_len: int) -> int:
    """A 63-bit seed from (seed, sample id, prompt length): a rerun gives the same text."""
    h = hashlib.sha256(f"{seed}:{sid}:{prompt_len}".encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1
