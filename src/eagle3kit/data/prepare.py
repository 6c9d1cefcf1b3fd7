"""`eagle3kit data prepare`: conversations -> a DATA directory of tokens + loss masks.

    for each record of each INPUT (JSONL line or dataset row):
        turns        = conversations.validate(record)       # or skipped: file:line: reason
        ids, mask    = ChatEncoder(target tokenizer).encode(turns)   # templates.py
        ids, mask    = ids[:max_length], mask[:max_length]  # counted in "truncated"
        (no mask left after truncation -> skipped, reason given)
    write shards + data.json (prepared.py), all at once via atomic_dir

`--strict` turns the first skipped record into an error (`file:line: reason`, exit 2).
Only the tokenizer and config of the target are read, never its weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eagle3kit.core.artifacts import stamp
from eagle3kit.core.atomic import atomic_dir
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.progress import Progress, emit
from eagle3kit.data.conversations import (
    Conversation,
    Malformed,
    Problem,
    read_conversations,
    summarise_reasons,
)
from eagle3kit.data.prepared import META, PreparedWriter
from eagle3kit.data.templates import ChatEncoder, template_sha256


def load_tokenizer(target: str, *, trust_remote_code: bool = False, revision: str | None = None):
    """The target's tokenizer (local dir or hub id)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(
            str(target), trust_remote_code=trust_remote_code, revision=revision
        )
    except (OSError, ValueError) as e:
        raise Eagle3Error(f"{target}: cannot load the target's tokenizer ({e})") from e


def target_identity(
    target: str, tokenizer: Any, *, trust_remote_code: bool = False
) -> dict[str, Any]:
    """What data.json records about the target: from its config (no weights) and tokenizer.

    Keys match `TargetModel.identity()` where they overlap (name_or_path, model_type,
    num_layers, hidden_size, vocab_size).
    """
    from eagle3kit.data.prepared import tokenizer_fingerprint

    ident: dict[str, Any] = {
        "name_or_path": str(target),
        "tokenizer_size": len(tokenizer),
        "tokenizer_sha256": tokenizer_fingerprint(tokenizer),
    }
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(str(target), trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        return {
            **ident,
            "model_type": None,
            "num_layers": None,
            "hidden_size": None,
            "vocab_size": len(tokenizer),
        }
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    return {
        **ident,
        "model_type": getattr(cfg, "model_type", None),
        "num_layers": getattr(text, "num_hidden_layers", None),
        "hidden_size": getattr(text, "hidden_size", None),
        "vocab_size": int(getattr(text, "vocab_size", None) or len(tokenizer)),
    }


def _check_out(out: Path, inputs: list[str]) -> None:
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / META).is_file())):
        raise Eagle3Error(f"{out}: exists and is not a DATA directory; refusing to replace it")
    for i in inputs:
        if Path(i).expanduser().resolve() == out.resolve():
            raise Eagle3Error(f"{out}: the output is also an input")


def _line_bases(paths: list[str]) -> tuple[dict[str, int], int | None]:
    """Lines before each JSONL input and the total (for the progress bar); None for datasets."""
    bases, n = {}, 0
    for p in paths:
        if not Path(p).is_file() or Path(p).suffix.lower() == ".json":
            return {}, None  # datasets and JSON arrays count records, not lines
        bases[p] = n
        with open(p, "rb") as f:
            n += sum(1 for _ in f)
    return bases, n


class _Run:
    """The counters and the skip list of one prepare run."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.skipped: list[Problem] = []
        self.truncated = 0
        self.seen: dict[str, str] = {}

    def skip(self, p: Problem) -> None:
        if self.strict:
            raise Eagle3Error(str(p))
        self.skipped.append(p)


def _encode_one(
    enc: ChatEncoder, conv: Conversation, max_length: int, run: _Run, file: str, line: int
):
    """(ids, mask) of one conversation, truncated; None when it was skipped."""
    if conv.id in run.seen:
        run.skip(Problem(file, line, f"duplicate id {conv.id!r} (first at {run.seen[conv.id]})"))
        return None
    try:
        ids, mask = enc.encode(conv.turns)
    except Malformed as e:
        run.skip(Problem(file, line, str(e)))
        return None
    if len(ids) > max_length:
        ids, mask = ids[:max_length], mask[:max_length]
        if not any(mask):
            run.skip(
                Problem(
                    file,
                    line,
                    f"no assistant token within the first {max_length} tokens (--max-length)",
                )
            )
            return None
        run.truncated += 1
    if not any(mask):
        run.skip(Problem(file, line, "the chat template marks no assistant token"))
        return None
    run.seen[conv.id] = f"{file}:{line}"
    return ids, mask


def prepare(
    inputs: list[str | Path],
    target: str | Path,
    out: str | Path,
    *,
    max_length: int = 2048,
    strict: bool = False,
    chat_template: str | None = None,
    template_kwargs: dict[str, Any] | None = None,
    trust_remote_code: bool = False,
    revision: str | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Tokenise conversations with the target's chat template into the DATA directory `out`.

    Returns {"samples", "tokens", "loss_tokens", "truncated", "skipped": [{"file", "line",
    "reason"}], "out", "mask_method"}. `chat_template` (Jinja text) replaces the tokenizer's;
    `template_kwargs` go to the template (e.g. {"enable_thinking": False} for Qwen3).
    """
    inputs = [str(i) for i in inputs]
    out = Path(out)
    if not inputs:
        raise Eagle3Error("prepare: expected at least one INPUT, found none")
    if max_length < 2:
        raise Eagle3Error(f"--max-length: expected an int >= 2, found {max_length}")
    _check_out(out, inputs)
    tok = load_tokenizer(str(target), trust_remote_code=trust_remote_code, revision=revision)
    enc = ChatEncoder(
        tok, template=chat_template, template_kwargs=template_kwargs, where=str(target)
    )
    ident = target_identity(str(target), tok, trust_remote_code=trust_remote_code)
    run = _Run(strict)
    bases, total = _line_bases(inputs)
    with atomic_dir(out) as tmp:
        w = PreparedWriter(tmp)
        n = _add_all(w, enc, inputs, ident, str(target), max_length, run, bases, total, progress)
        if not w.samples:
            raise _nothing_usable(inputs, run.skipped)
        doc = w.finish(_meta(ident, enc, max_length, inputs, run))
        emit(
            progress,
            "prepare",
            total if total is not None else n,
            total,
            "lines",
            samples=w.samples,
        )
    keys = ("samples", "tokens", "loss_tokens", "truncated", "skipped")
    res = {**{k: doc[k] for k in keys}, "out": str(out), "mask_method": enc.mode}
    return stamp(res, "prepare")


def _add_all(
    w: PreparedWriter,
    enc: ChatEncoder,
    inputs: list[str],
    ident: dict[str, Any],
    target: str,
    max_length: int,
    run: _Run,
    bases: dict[str, int],
    total: int | None,
    progress: Progress | None,
) -> int:
    """Encode every record of the inputs into `w` (skips go to `run`); the records read."""
    n = 0
    for n, (file, line, item) in enumerate(read_conversations(inputs), 1):
        if isinstance(item, Problem):
            run.skip(item)
        else:
            got = _encode_one(enc, item, max_length, run, file, line)
            if got is not None:
                _check_ids(got[0], ident["vocab_size"], target, file, line)
                w.add(item.id, *got)
        if n % 256 == 0:
            done = bases[file] + line if total else n
            emit(progress, "prepare", done, total, "lines", samples=w.samples)
    return n


def _meta(
    ident: dict[str, Any], enc: ChatEncoder, max_length: int, inputs: list[str], run: _Run
) -> dict[str, Any]:
    """What data.json records of the run besides the writer's own counts."""
    return {
        "target": ident,
        "template_sha256": template_sha256(enc.template),
        "template_kwargs": enc.kwargs,
        "mask_method": enc.mode,
        "max_length": max_length,
        "inputs": inputs,
        "truncated": run.truncated,
        "skipped": [p.to_json() for p in run.skipped],
    }


def _nothing_usable(inputs: list[str], skipped: list[Problem]) -> Eagle3Error:
    """The error for a run without one usable sample: why the samples were skipped, counted."""
    where = inputs[0] if len(inputs) == 1 else f"{len(inputs)} inputs"
    if not skipped:
        return Eagle3Error(f"{where}: no conversation found (empty input); nothing written")
    return Eagle3Error(
        f"{where}: no usable sample, {len(skipped)} skipped "
        f"({summarise_reasons(p.reason for p in skipped)}); nothing written"
    )


def _check_ids(ids: list[int], vocab_size: int, target: str, file: str, line: int) -> None:
    top = max(ids)
    if top >= vocab_size:
        raise Eagle3Error(
            f"{file}:{line}: token id {top} is outside the target's vocab_size {vocab_size} "
            f"({target}); the tokenizer and model disagree"
        )


def parse_template_kwargs(text: str | None) -> dict[str, Any]:
    """`--template-kwargs '{"enable_thinking": false}'` -> dict (Eagle3Error otherwise)."""
    if not text:
        return {}
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise Eagle3Error(f"--template-kwargs: expected a JSON object, found {text!r} ({e})") from e
    if not isinstance(doc, dict):
        raise Eagle3Error(f"--template-kwargs: expected a JSON object, found {type(doc).__name__}")
    return doc
