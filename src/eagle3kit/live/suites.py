"""The prompt sets published acceptance tables use, by hub id or from a local file.

Each suite is one file of a Hugging Face dataset repository, fetched once with
`huggingface_hub.hf_hub_download` (its cache; no `datasets` needed), or a local file of the
same shape given as `NAME=PATH` (`.jsonl`, `.json`, `.parquet` with pyarrow):

    mt-bench   HuggingFaceH4/mt_bench_prompts  raw/question.jsonl  80 x 2 turns (`turns`)
    gsm8k      openai/gsm8k      main/test-00000-of-00001.parquet   `question`
    humaneval  openai/openai_humaneval  openai_humaneval/test-00000-of-00001.parquet  `prompt`
    math-500   HuggingFaceH4/MATH-500   test.jsonl                  `problem`
    chat       tatsu-lab/alpaca_eval    alpaca_eval.json            `instruction`

MT-Bench rows may also carry the turns as `prompt` (a list), as the parquet export does.
When a repository has no file of that name (repositories get reorganised), its file listing
is asked for a data file of the split (`pick_data_file`: JSON before parquet).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.io.hub_files import cached_hub_file
from eagle3kit.core.environment import hub_offline
from eagle3kit.core.errors import Eagle3Error, bad


@dataclass(frozen=True)
class Prompt:
    suite: str
    id: str
    turns: tuple[str, ...]  # user turns; a later turn follows the answer to the earlier ones
    ids: tuple[int, ...] | None = None  # a prompt built to a context length: sent as tokens


@dataclass(frozen=True)
class Suite:
    repo: str
    filename: str  # tried first; else the repo's listing picks a data file of `split`
    turns: Callable[[dict[str, Any]], list[str] | None]
    split: str = "test"


def _field(name: str) -> Callable[[dict[str, Any]], list[str] | None]:
    def get(row: dict[str, Any]) -> list[str] | None:
        v = row.get(name)
        return [v] if isinstance(v, str) and v.strip() else None

    return get


def _mt_turns(row: dict[str, Any]) -> list[str] | None:
    v = row.get("turns", row.get("prompt"))
    if isinstance(v, list) and v and all(isinstance(t, str) for t in v):
        return list(v)
    return None


SUITES: dict[str, Suite] = {
    "mt-bench": Suite(
        "HuggingFaceH4/mt_bench_prompts", "raw/question.jsonl", _mt_turns, split="train"
    ),
    "gsm8k": Suite("openai/gsm8k", "main/test-00000-of-00001.parquet", _field("question")),
    "humaneval": Suite(
        "openai/openai_humaneval",
        "openai_humaneval/test-00000-of-00001.parquet",
        _field("prompt"),
    ),
    "math-500": Suite("HuggingFaceH4/MATH-500", "test.jsonl", _field("problem")),
    "chat": Suite("tatsu-lab/alpaca_eval", "alpaca_eval.json", _field("instruction"), split="eval"),
}


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl, .json (a list, or {"data"|"rows": [...]}) or .parquet file."""
    try:
        if path.suffix == ".parquet":
            return _parquet_rows(path)
        text = path.read_text()
    except FileNotFoundError:
        raise Eagle3Error(f"{path}: no such file") from None
    try:
        if path.suffix == ".jsonl":
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            rows = json.loads(text)
            rows = rows.get("data", rows.get("rows")) if isinstance(rows, dict) else rows
    except ValueError as e:
        raise bad(str(path), f"expected JSON rows, found unreadable JSON ({e})") from e
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise bad(str(path), "expected a list of JSON objects (one per prompt)")
    return rows


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise Eagle3Error(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    return pq.read_table(path).to_pylist()


DATA_SUFFIXES = (".jsonl", ".json", ".parquet")  # in this order of preference


def pick_data_file(files: list[str], split: str) -> str | None:
    """The repo file most likely to hold `split`: a data file with the split in its path,
    JSON before parquet (no pyarrow needed), shortest path first."""
    ok = [f for f in files if f.endswith(DATA_SUFFIXES) and split in f.lower()]
    ok = [f for f in ok if not f.startswith(".") and "/." not in f]
    rank = {s: i for i, s in enumerate(DATA_SUFFIXES)}
    ok.sort(key=lambda f: (rank[next(s for s in DATA_SUFFIXES if f.endswith(s))], len(f), f))
    return ok[0] if ok else None


HUB_PROBE_TIMEOUT_S = 3.0  # one request to the hub; without it, an offline run retries ~47 s


def hub_unreachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """None when the hub endpoint answers one HEAD request (any status) within ``timeout``
    seconds, else why not. huggingface_hub's own session, so its proxy settings apply; one
    attempt, where huggingface_hub's downloads retry five times with backoff."""
    from huggingface_hub import constants, get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=timeout)
    except Exception as e:
        return f"cannot reach {constants.ENDPOINT}: {type(e).__name__}"
    return None


def _cached(s: Suite) -> Path | None:
    """The suite's file from the huggingface_hub cache alone (no request), or None."""
    found = cached_hub_file(s.repo, s.filename, repo_type="dataset")
    return Path(found) if found else None


def hub_file(s: Suite) -> Path:
    """The suite's file: from the huggingface_hub cache when it is there (no network), else
    from the hub: `s.filename`, or when the repo has no such file, the data file its listing
    offers. With HF_HUB_OFFLINE set, or when one short request finds the hub unreachable,
    a cache miss fails at once in one line instead of waiting out network retries."""
    try:
        from huggingface_hub import hf_hub_download, list_repo_files
        from huggingface_hub.errors import RemoteEntryNotFoundError
    except ImportError:
        raise Eagle3Error("--suite: loading from the hub needs huggingface_hub") from None
    cached = _cached(s)
    if cached is not None:
        return cached
    why = "HF_HUB_OFFLINE is set" if hub_offline() else hub_unreachable()
    if why is not None:
        raise Eagle3Error(
            f"--suite: cannot fetch {s.filename} of the hub dataset {s.repo} (not in the local "
            f"cache, {why}); give a local file as NAME=PATH"
        )
    try:
        try:
            return Path(hf_hub_download(s.repo, s.filename, repo_type="dataset"))
        except RemoteEntryNotFoundError:  # the hub answered: no such file in the repo
            name = pick_data_file(list_repo_files(s.repo, repo_type="dataset"), s.split)
            if name is None:
                raise
            return Path(hf_hub_download(s.repo, name, repo_type="dataset"))
    except Exception as e:  # missing repo or file, a network failure: one line for the user
        raise Eagle3Error(
            f"--suite: cannot fetch {s.filename} of the hub dataset {s.repo} "
            f"({type(e).__name__}); give a local file as NAME=PATH"
        ) from None


def load_suite(spec: str, limit: int | None = None) -> list[Prompt]:
    """`NAME` (from the hub) or `NAME=PATH` (a local file of the same shape)."""
    name, _, local = spec.partition("=")
    name = name.strip()
    if name not in SUITES:
        raise Eagle3Error(f"--suite: expected one of {', '.join(SUITES)}, found {name!r}")
    s = SUITES[name]
    path = Path(local) if local else hub_file(s)
    prompts = []
    for i, row in enumerate(read_rows(path)):
        turns = s.turns(row)
        if turns is None:
            raise bad(f"{path} row {i + 1}", f"expected the {name} shape ({s.filename})")
        pid = str(row.get("question_id", row.get("task_id", row.get("unique_id", i))))
        prompts.append(Prompt(name, pid, tuple(turns)))
        if limit is not None and len(prompts) >= limit:
            break
    if not prompts:
        raise bad(str(path), f"expected {name} prompts, found none")
    return prompts


def load_suites(specs: str, limit: int | None = None) -> list[Prompt]:
    """A comma-separated `--suite` value, each suite capped at `limit` prompts."""
    return [p for s in specs.split(",") if s.strip() for p in load_suite(s.strip(), limit)]


def load_conversations(path: Path, limit: int | None = None) -> tuple[list[Prompt], list[Any]]:
    """`--data`: (prompts, the records skipped as unusable: `Problem`s). Read as `data prepare`
    reads conversations (JSONL, a .json array, a saved dataset; ShareGPT or OpenAI form),
    except that prompts only are enough, and a row may be {"prompt": "..."}; a .parquet file's
    rows likewise. The user turns are sent, in order."""
    from eagle3kit.data.conversations import (
        Malformed,
        Problem,
        read_prompts,
        user_turns,
        validate_prompt,
    )

    if path.suffix == ".parquet":
        convs, problems = [], []
        for i, row in enumerate(read_rows(path), 1):
            try:
                convs.append(validate_prompt(row))
            except Malformed as e:
                problems.append(Problem(str(path), i, str(e)))
            if limit is not None and len(convs) >= limit:
                break
        if not convs:
            raise bad(str(path), f"expected prompts, found none ({problems[:1]})")
    else:
        convs, problems = read_prompts(path, limit)
    prompts = [Prompt("data", c.id, tuple(user_turns(c))) for c in convs]
    return prompts, problems
