"""The options of `eagle3kit eval` and `eagle3kit bench`, one typed object per verb
(core/options.py): the command line and `--config FILE` read them (cli/_command.py).

The fields are in the order `--help` lists them. A check a field cannot say (the device, the
held-out amount, the depth of a local run) is in the verb (cli/decode.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3kit.cli._options import (
    BY_LENGTH_HELP,
    CONTEXT_LENGTHS_HELP,
    DOCUMENTS_HELP,
    PROMPT_SET_HELP,
)
from eagle3kit.core.options import option

TARGET_HELP = "Target: a model dir, a hub id, or a zoo member (dsv3-v2, llama-v1-tiny)."
LOCAL_TARGET_HELP = (
    TARGET_HELP + " With --url: only with context lengths (its tokenizer cuts them)."
)
DRAFTER_HELP = "Drafter dir (any layout: SGLang, speculators/vLLM, EAGLE)."
METHOD_HELP = (
    "eagle3 (--drafter: a drafter dir) or mtp (the target's own MTP head; --drafter: a head dir "
    "from `train --method mtp`)."
)
DATA_HELP = "A DATA dir from `data prepare`, or a JSONL of conversations."
THREADS_HELP = "torch CPU threads."
JSON_HELP = "Print one JSON document."
LIVE_URL_HELP = "Live: a speculative server (SGLang or vLLM), repeatable."
LIVE_BASE_HELP = "Live: the plain (no speculation) server to compare with."
LIVE_SUITE_HELP = (
    "Live: mt-bench,gsm8k,humaneval,math-500,chat (hub) or NAME=FILE; --prompts caps each."
)
LIVE_TEMPERATURE_HELP = "Live: 0 = greedy."
LIVE_ENDPOINT_HELP = (
    "Live: chat (default), completions, or generate (SGLang's native endpoint); with "
    "context lengths: completions (default) or generate, the prompts sent as token ids."
)
LIVE_TIMEOUT_HELP = "Live: bound on the whole run, s."
LIVE_DEPTH_HELP = "Live: the drafter's trained depth (warns when the server's settings cap tau)."
FEATURES_HELP = (
    "Offline from a feature store (`data capture`, in-process or --engine) instead of --data: "
    "no target loaded (--target: where its embedding is read)."
)
HELDOUT_HELP = (
    "Samples scored: a count (32) or fraction (0.05) of the split by sample id; default: DATA's "
    "5% split, or the whole store when it was captured from held-out data."
)
CONCURRENCY_HELP = (
    "Levels, e.g. 1,4,16. Live: each level's requests run that many at a time; in-process: the "
    "costs plan --methods reads, measured at each level."
)


@dataclass
class EvalOptions:
    """`eval`: acceptance offline and online, in-process or on live servers."""

    target: str | None = option(None, LOCAL_TARGET_HELP)
    drafter: str | None = option(None, DRAFTER_HELP)
    method: str = option("eagle3", METHOD_HELP)
    data: str | None = option(None, DATA_HELP)
    features: str | None = option(None, FEATURES_HELP)
    # a count or a fraction: cli/_checks.py heldout_amount reads it in the verb (the command
    # line's text as given, so that any bad text gets its message; a file may give a number)
    heldout: str | int | float | None = option(None, HELDOUT_HELP)
    online: bool = option(False, "Also decode for real: tau, tok/s.")
    depth: int = option(3, "Draft steps (chain depth).")  # >= 1 checked by a local run only
    max_new_tokens: int = option(128, "Online: per prompt.", min=1)
    repeats: int = option(3, "Online: repeats (median/min/max).", min=1)
    limit: int = option(20, "Online: at most this many prompts.", min=1)
    device: str = option("cpu")
    threads: int | None = option(None, THREADS_HELP, min=1)
    json_: bool = option(False, JSON_HELP, record=False)
    url: list[str] | None = option(None, LIVE_URL_HELP + " With --online.")
    suite: str | None = option(None, LIVE_SUITE_HELP.replace("--prompts", "--limit"))
    temperature: float = option(0.0, LIVE_TEMPERATURE_HELP)
    endpoint: str | None = option(None, LIVE_ENDPOINT_HELP)
    timeout: float = option(600.0, LIVE_TIMEOUT_HELP)
    by_length: str | None = option(None, BY_LENGTH_HELP, metavar="[LENGTHS]")
    documents: str | None = option(None, DOCUMENTS_HELP)
    prompt_set: str = option("all", PROMPT_SET_HELP)
    seed: int = option(0)


@dataclass
class BenchOptions:
    """`bench`: greedy vs prompt lookup vs chain vs tree here, or an A/B of live servers."""

    target: str | None = option(None, LOCAL_TARGET_HELP)
    drafter: str | None = option(None, DRAFTER_HELP)
    method: str = option("eagle3", METHOD_HELP)
    data: str | None = option(None, DATA_HELP + " Default: built-in chat prompts.")
    prompts: int = option(8, "At most this many prompts.", min=1)
    repeats: int = option(5, min=1)
    max_new_tokens: int = option(128, min=1)
    depth: int | None = option(
        None, "Chain depth; default: the drafter's own (a block drafter's), else 4.", min=1
    )
    tree_depth: int = option(5, min=1)
    topk: int = option(4, min=1)
    budget: int = option(16, min=1)
    lookup: int = option(10, "Prompt lookup's drafts per cycle (prompt_lookup_num_tokens).", min=1)
    device: str = option("cpu")
    threads: int | None = option(None, THREADS_HELP, min=1)
    json_: bool = option(False, JSON_HELP, record=False)
    url: list[str] | None = option(None, LIVE_URL_HELP)
    baseline_url: str | None = option(None, LIVE_BASE_HELP)
    suite: str | None = option(None, LIVE_SUITE_HELP)
    concurrency: str = option("1", CONCURRENCY_HELP)
    temperature: float = option(0.0, LIVE_TEMPERATURE_HELP)
    endpoint: str | None = option(None, LIVE_ENDPOINT_HELP)
    timeout: float = option(600.0, LIVE_TIMEOUT_HELP)
    drafter_depth: int | None = option(None, LIVE_DEPTH_HELP)
    context_lengths: str | None = option(None, CONTEXT_LENGTHS_HELP, metavar="LENGTHS")
    documents: str | None = option(None, DOCUMENTS_HELP)
    prompt_set: str = option("all", PROMPT_SET_HELP)
    seed: int = option(0)
