"""Prompts of a given context length, cut from long real documents (`eval --by-length`,
`bench --context-lengths`, `probe --by-length`).

A prompt of context length L is exactly L tokens of the target's tokenizer: the chat
template's opening of a user turn, a window of document tokens, and the turn's end with the
assistant's generation prompt (a tokenizer without a chat template: the window alone, after
the tokenizer's own leading tokens), so the target answers, or continues, the document.

- **The zoo** (no `--documents`): the documents are the zoo's held-out standard-library files
  (`zoo/corpus.py` `files("lib", held_out=True)`: never the files a member trained on),
  concatenated; every prompt ends with a held-out request for a function ("Write the Python
  function ..."), from files kept apart from the context files, so the answer depends on the
  prompt.
- **A user's file** (`--documents FILE`, JSONL / JSON / saved dataset as `data prepare` reads
  them): every row's text (a `{"text": ...}` or `{"prompt": ...}` row, or a conversation's
  turns joined by blank lines) is one document, in file order.

Prompt i of every length ends at the same point of the document stream (its window is the L
tokens before that point, less the frame): the buckets differ by how much context precedes
the same request, and no two prompts of a set share a token of context. The documents are
split in two disjoint sets by a seeded shuffle (`SETS`): a prediction made on set A is checked
on set B. A length whose prompt and new tokens would pass the target's
`max_position_embeddings` is refused, as is one too short for the frame and the request.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.core.errors import Eagle3Error, bad

DEFAULT_LENGTHS = (128, 512, 1024, 2048)
SETS = ("all", "A", "B")  # every document, or one of the two disjoint halves
SENTINEL = "\x00EAGLE3KIT-DOCUMENT\x00"  # where the document goes in the rendered template
REQUEST_SHARE = 3  # every third file of a set (in its seeded order) gives requests, not context
SEPARATOR = "\n\n"


def parse_lengths(text: str | None, option: str = "--by-length") -> tuple[int, ...]:
    """'128,512,1K,2K' -> (128, 512, 1024, 2048); 'default' (or None) -> DEFAULT_LENGTHS.
    Each an integer >= 0 (a K suffix multiplies by 1024; 0 keeps the shortest contexts in a
    bucket of their own), all distinct; sorted."""
    if text is None or text.strip().lower() == "default":
        return DEFAULT_LENGTHS
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        scale = 1024 if part[-1] in "kK" else 1
        try:
            n = int(part[:-1] if scale > 1 else part) * scale
        except ValueError:
            n = -1
        if n < 0:
            raise bad(option, f"expected context lengths like 128,512,1K,2K, found {part!r}")
        out.append(n)
    if not out:
        raise bad(option, f"expected context lengths like 128,512,1K,2K, found {text!r}")
    if len(set(out)) != len(out):
        raise bad(option, f"expected each context length once, found {text!r}")
    return tuple(sorted(out))


def check_positions(
    lengths: tuple[int, ...],
    new_tokens: int,
    max_positions: int | None,
    option: str = "--by-length",
) -> None:
    """Refuse a length whose prompt plus its new tokens passes the target's positions."""
    if max_positions is None:
        return
    top = max_positions - new_tokens
    over = [n for n in lengths if n > top]
    if over:
        raise bad(
            option,
            f"expected context lengths <= {top} (max_position_embeddings {max_positions} - "
            f"{new_tokens} new tokens), found {over[0]}",
        )


@dataclass(frozen=True)
class Frame:
    """The tokens around a document window: `head` before it, `tail` after it."""

    head: tuple[int, ...]
    tail: tuple[int, ...]


def _ids(tok: Any, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False, verbose=False)["input_ids"])


def frame(tok: Any, request: str | None = None) -> Frame:
    """The chat template's user turn around the document (and after it, the request), up to
    the assistant's generation prompt; without a chat template, the tokenizer's leading
    special tokens and the request as plain text."""
    after = "" if request is None else SEPARATOR + request
    if getattr(tok, "chat_template", None):
        msgs = [{"role": "user", "content": SENTINEL + after}]
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        head, sep, tail = text.partition(SENTINEL)
        if not sep:
            raise Eagle3Error("the tokenizer's chat template drops the user's content")
        return Frame(tuple(_ids(tok, head)), tuple(_ids(tok, tail)))
    lead = list(tok("", add_special_tokens=True)["input_ids"])
    return Frame(tuple(lead), tuple(_ids(tok, after + SEPARATOR)) if request else ())


@dataclass
class Source:
    """Documents (token streams) and the requests that end the prompts (may be none)."""

    name: str
    documents: list[str]
    requests: list[str] = field(default_factory=list)


def _split(items: list, which: str, seed: int) -> list:
    """The seeded shuffle of ``items``; set A its even places, B its odd ones."""
    if which not in SETS:
        raise bad("--prompt-set", f"expected one of {', '.join(SETS)}, found {which!r}")
    order = list(items)
    random.Random(seed).shuffle(order)
    return order if which == "all" else order[SETS.index(which) - 1 :: 2]


def zoo_source(tok: Any, which: str = "all", seed: int = 0) -> Source:
    """The zoo's held-out stdlib files of set ``which``: two in three are context, every third
    one gives the held-out requests (signed when the target was trained on signed ones)."""
    from eagle3kit.zoo import signed_requests
    from eagle3kit.zoo.corpus import files, held_out_requests

    mine = _split(files("lib", held_out=True), which, seed)
    ctx = [f for i, f in enumerate(mine) if i % REQUEST_SHARE != REQUEST_SHARE - 1]
    req = [f for i, f in enumerate(mine) if i % REQUEST_SHARE == REQUEST_SHARE - 1]
    signed = signed_requests(getattr(tok, "name_or_path", None))
    asks = [r["messages"][0]["content"] for r in held_out_requests(req, 10_000, signed=signed)]
    name = f"zoo held-out stdlib (set {which}, seed {seed})"
    return Source(name, [f.text for f in ctx], asks)


def file_source(path: str | Path, which: str = "all", seed: int = 0) -> Source:
    """`--documents FILE`: every usable row's text is one document (module docstring)."""
    from eagle3kit.data.conversations import read_prompts

    p = Path(path)
    if not p.exists():
        raise bad("--documents", f"expected a JSONL file of documents, found no such file {p}")
    convs, _skipped = read_prompts(p, None)
    texts = [SEPARATOR.join(t["content"] for t in c.turns if t["content"]) for c in convs]
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise bad(str(p), "expected rows with text (documents or conversations), found none")
    return Source(f"{p.name} (set {which}, seed {seed})", _split(texts, which, seed))


@dataclass(frozen=True)
class LongPrompt:
    """One prompt: exactly `length` tokens, prompt `index` of its set at that length."""

    length: int
    index: int
    ids: tuple[int, ...]
    document_tokens: int  # of the window (the rest is the frame and the request)


def build(tok: Any, source: Source, lengths: tuple[int, ...], n: int) -> list[LongPrompt]:
    """``n`` prompts at each length (module docstring), bucket by bucket in order of length.
    Refused (one line) when the documents are too short for n windows of the longest."""
    if n < 1:
        raise bad("--prompts", f"expected >= 1 prompts per length, found {n}")
    frames = _frames(tok, source, lengths, n)
    stream = _stream(tok, source.documents)
    need = max(lengths) - min(len(f.head) + len(f.tail) for f in frames)
    if len(stream) < n * need:
        raise bad(
            source.name,
            f"expected at least {n * need} document tokens ({n} prompts x {need}), "
            f"found {len(stream)}",
        )
    out = []
    for length in lengths:
        for i, fr in enumerate(frames):
            d = length - len(fr.head) - len(fr.tail)
            end = (i + 1) * need
            ids = fr.head + tuple(stream[end - d : end]) + fr.tail
            out.append(LongPrompt(length, i, ids, d))
    return out


def _stream(tok: Any, documents: list[str]) -> list[int]:
    sep = _ids(tok, SEPARATOR)
    out: list[int] = []
    for doc in documents:
        out += _ids(tok, doc) + sep
    return out


def _frames(tok: Any, source: Source, lengths: tuple[int, ...], n: int) -> list[Frame]:
    """One frame per prompt: with ``n`` requests (evenly spaced among those that leave a
    quarter of the shortest length to the document: the zoo), else the bare frame."""
    shortest = min(lengths)
    if not source.requests:
        fr = frame(tok)
        size = len(fr.head) + len(fr.tail)
        if size >= shortest:
            raise bad("--by-length", f"expected lengths > {size} (the frame), found {shortest}")
        return [fr] * n
    budget = shortest - max(1, shortest // 4)
    fits = [frame(tok, ask) for ask in source.requests]
    fits = [fr for fr in fits if len(fr.head) + len(fr.tail) <= budget]
    if len(fits) < n:
        raise bad(
            "--by-length",
            f"expected {n} requests of at most {budget} tokens with their frame (three "
            f"quarters of the shortest length {shortest}), found {len(fits)}: name longer "
            "lengths",
        )
    step = len(fits) / n
    return [fits[int(i * step)] for i in range(n)]  # evenly spaced over the request files


def by_length(prompts: list[LongPrompt]) -> dict[int, list[list[int]]]:
    """{length: [ids of each prompt]}, lengths in order."""
    out: dict[int, list[list[int]]] = {}
    for p in prompts:
        out.setdefault(p.length, []).append(list(p.ids))
    return out


def long_prompts(
    tok: Any,
    lengths: tuple[int, ...],
    n: int,
    *,
    prompts_file: str | Path | None = None,
    which: str = "all",
    seed: int = 0,
    new_tokens: int = 0,
    max_positions: int | None = None,
    option: str = "--by-length",
) -> tuple[list[LongPrompt], str]:
    """(the prompts, the source's name): the zoo's documents, or ``prompts_file``'s."""
    if tok is None:
        raise bad("--target", "expected a target with a tokenizer (prompts are cut in tokens)")
    check_positions(lengths, new_tokens, max_positions, option)
    src = file_source(prompts_file, which, seed) if prompts_file else zoo_source(tok, which, seed)
    return build(tok, src, lengths, n), src.name


def served_target(target: str | None) -> tuple[Any, int | None]:
    """(the tokenizer, max_position_embeddings) of the target a server runs, read without its
    weights: what cuts the prompts of `bench --url --context-lengths`."""
    from eagle3kit.data.prepare import load_tokenizer
    from eagle3kit.model.loading import resolve_target

    if target is None:
        raise bad(
            "--target",
            "expected the served target (a zoo name, dir or hub id: its tokenizer cuts the "
            "prompts) with --url and --context-lengths, found none",
        )
    path = resolve_target(target)
    tok = load_tokenizer(path)
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(path)
    except (OSError, ValueError):
        cfg = None
    return tok, getattr(cfg, "max_position_embeddings", None)
