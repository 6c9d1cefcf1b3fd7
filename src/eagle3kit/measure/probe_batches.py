"""The token sequences `probe` and the demo score on: the held-out split of a prepared DATA
dir (checked against the target first), or built-in conversations from the Python standard
library's own test suite rendered with the target's chat template. Only assistant tokens are
scored (loss_mask)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle3kit.core.errors import Eagle3Error

if TYPE_CHECKING:
    from eagle3kit.model.target import TargetModel


@dataclass
class Batch:
    """Token sequences to probe on (right-padded)."""

    input_ids: Any  # Long [B, T]
    attention_mask: Any  # Bool [B, T]
    loss_mask: Any  # Bool [B, T]
    source: str


# ---------------------------------------------------------------- token sequences


def _chat_ids(tok: Any, messages: list[dict[str, str]]) -> tuple[list[int], int]:
    """(ids of the whole conversation, number of prompt tokens before the assistant turn)."""
    if getattr(tok, "chat_template", None):
        full = tok.apply_chat_template(messages, tokenize=False)
        prompt = tok.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    else:
        prompt = messages[0]["content"] + "\n"
        full = prompt + messages[1]["content"]
    ids = tok(full, add_special_tokens=False)["input_ids"]
    n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
    return list(ids), n_prompt


def builtin_batch(tokenizer: Any, n: int = 16, max_len: int = 256) -> Batch:
    """``n`` built-in conversations (stdlib test-suite functions), tokenized by ``tokenizer``."""
    import torch

    from eagle3kit.zoo import corpus as corpus

    if tokenizer is None:
        raise Eagle3Error("probe: the target has no tokenizer; pass --data (a prepared data dir)")
    from eagle3kit.zoo import signed_requests

    files = corpus.spaced(corpus.files("test", held_out=True), max(4, n // 4))
    signed = signed_requests(getattr(tokenizer, "name_or_path", None))
    convs = corpus.spaced(corpus.chat_samples(files, signed=signed), n)
    rows = []
    for c in convs:
        ids, n_prompt = _chat_ids(tokenizer, c["messages"])
        ids = ids[:max_len]
        rows.append((ids, [i >= n_prompt for i in range(len(ids))]))
    return _pad(rows, "built-in stdlib conversations", torch)


def data_batch(
    path: str, n: int = 16, max_len: int = 256, target: TargetModel | None = None
) -> Batch:
    """The first ``n`` held-out samples of a prepared data dir, truncated; checked against
    ``target`` first (`data.prepared.check_data_matches_target`)."""
    import torch

    from eagle3kit.data.prepared import META, check_data_matches_target, load_prepared

    data = load_prepared(path)
    if target is not None:
        where, v = str(Path(path) / META), target.vocab_size
        check_data_matches_target(data.meta, where, vocab_size=v, tokenizer=target.tokenizer)
    _, held = data.split()
    idx = list(held)[:n] or list(range(min(n, len(data))))
    rows = []
    for i in idx:
        s = data[i]
        rows.append((s.input_ids[:max_len].tolist(), s.loss_mask[:max_len].tolist()))
    return _pad(rows, f"{path} (held-out split)", torch)


def _pad(rows: list[tuple[list[int], list[bool]]], source: str, torch: Any) -> Batch:
    rows = [r for r in rows if len(r[0]) >= 4]
    if not rows:
        raise Eagle3Error(f"probe: {source}: no sequence of at least 4 tokens")
    t = max(len(r[0]) for r in rows)
    ids = torch.zeros(len(rows), t, dtype=torch.long)  # [B, T]
    att = torch.zeros(len(rows), t, dtype=torch.bool)  # [B, T]
    lm = torch.zeros(len(rows), t, dtype=torch.bool)  # [B, T]
    for b, (x, m) in enumerate(rows):
        ids[b, : len(x)] = torch.tensor(x)
        att[b, : len(x)] = True
        lm[b, : len(x)] = torch.tensor(m, dtype=torch.bool)
    return Batch(ids, att, lm, source)


# ---------------------------------------------------------------- measurements


@dataclass
class Samples:
    """A probe batch as the offline evaluations read data: (ids, loss mask) per row."""

    samples: list[tuple[Any, Any]]  # (input_ids [T], loss_mask [T])
    source: Any
    skipped: list[Any] = field(default_factory=list)


def batch_samples(batch: Batch) -> Samples:
    """Each row of `batch` cut to its real tokens, with its loss mask."""
    rows = []
    for b in range(batch.input_ids.shape[0]):
        n = int(batch.attention_mask[b].sum())
        rows.append((batch.input_ids[b, :n], batch.loss_mask[b, :n].long()))
    return Samples(rows, batch.source)


def acceptance_summary(r: dict[str, Any]) -> dict[str, Any]:
    """The probe's acceptance fields from an offline eval result (all answer positions)."""
    ap = r["all_positions"]
    return {
        "acc": ap["per_position_acceptance"],
        "cond_acc": ap["conditional_acceptance"],
        "counted": ap["counted"],
        "tau_every_position": r["tau_every_position"],
        "tau_walk": r["tau_walk"],
    }
