"""The options of `eagle3kit probe`, one typed object (core/options.py): the command line and
`--config FILE` read them (cli/_command.py). The fields are in the order `--help` lists them;
what a field cannot check (the device, the method, which options go together) the verb does
(cli/probe.py)."""

from __future__ import annotations

from dataclasses import dataclass

from eagle3kit.cli._options import BY_LENGTH_HELP, DOCUMENTS_HELP
from eagle3kit.core.options import option

LIVE_NEW = "Live: the server of the NEW target running the drafter (SGLang or vLLM)."
LIVE_OLD = "Live: the server of the target the drafter was trained for, same drafter."
LIVE_BASE = "Live: the NEW target's plain server (the speedup then counts in the verdict)."
LIVE_SUITE = "Live: mt-bench,gsm8k,humaneval,math-500,chat or NAME=FILE; --samples caps each."
METHOD_HELP = (
    "eagle3 or dflash (--drafter: the drafter dir; its layout tells which) or mtp (an MTP head: "
    "the reference target's own, or --drafter HEAD_DIR; docs/probe.md)."
)
FEATURES_NEW_HELP = (
    "A feature store of the new target (`data capture`, e.g. --engine vllm): probe without "
    "loading it (--target, --reference-target: where embeddings and config are read by header; "
    "default: the stores' own record)."
)


@dataclass
class ProbeOptions:
    """`probe`: a drafter trained for one target (the reference) on a sibling (the target)."""

    drafter: str | None = option(None, "The drafter to reuse (any layout).")
    target: str | None = option(None, "The new target: a model dir, a hub id or a zoo member name.")
    reference_target: str | None = option(
        None, "The target the drafter was trained for (dir, hub id or zoo name)."
    )
    data: str | None = option(None, "Prepared data dir (default: built-in stdlib conversations).")
    baseline_tps: float | None = option(None, "Plain decoding tok/s.", above=0)
    cycle_ms: float | None = option(None, "One speculative cycle, ms.", above=0)
    bench: str | None = option(
        None, "bench JSON (bench --json, bench --url --json, or baseline_tps and cycle_ms)."
    )
    depth: int = option(3, "Draft steps scored.", min=1)
    samples: int = option(16, "Sequences to probe on.", min=1)
    online_prompts: int = option(
        4, "Prompts decoded for the online accept length (0: none).", min=0
    )
    device: str = option("cpu", "cpu, cuda, cuda:1 ...")
    dtype: str = option("float32", "float32 or bfloat16.")
    json_: bool = option(False, "Print one JSON document.", record=False)
    url: str | None = option(None, LIVE_NEW)
    reference_url: str | None = option(None, LIVE_OLD)
    baseline_url: str | None = option(None, LIVE_BASE)
    suite: str | None = option(None, LIVE_SUITE)
    max_new_tokens: int = option(128, "Live.")
    repeats: int = option(3, "Live: rounds.")
    endpoint: str | None = option(
        None, "Live: chat|completions|generate (with --by-length: completions or generate)."
    )
    timeout: float = option(600.0, "Live: bound on the run, s.")
    features_new: str | None = option(None, FEATURES_NEW_HELP)
    features_old: str | None = option(
        None,
        "The reference target's store of the same DATA (no target loaded).",
        flags=("--features-old", "--reference-features"),
    )
    max_len: int = option(256, "Tokens per sequence.")
    method: str = option("eagle3", METHOD_HELP)
    by_length: str | None = option(None, BY_LENGTH_HELP, metavar="[LENGTHS]")
    documents: str | None = option(None, DOCUMENTS_HELP)
