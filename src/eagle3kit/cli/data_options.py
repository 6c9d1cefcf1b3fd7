"""The options of `eagle3kit data prepare|regenerate|capture`, one typed object per verb
(core/options.py): the command line and `--config FILE` read them (cli/_command.py)."""

from __future__ import annotations

from dataclasses import dataclass

from eagle3kit.core.options import option

JSON_HELP = "Print one JSON document on stdout (progress stays on stderr)."
TRUST_HELP = "Allow the target's own tokenizer and model code."


@dataclass
class PrepareOptions:
    """`data prepare`: conversations -> a DATA directory."""

    inputs: list[str] = option(
        None,
        "JSONL files (ShareGPT or OpenAI form), saved `datasets` dirs or hub dataset ids.",
        argument=True,
        required=True,
    )
    target: str = option(
        None,
        "The target model (zoo name, local dir or hub id): its tokenizer and chat template.",
        required=True,
    )
    output: str = option(None, "The DATA directory to write.", short="-o", required=True)
    max_length: int = option(2048, "Truncate samples to this many tokens.", min=2)
    strict: bool = option(False, "Stop at the first malformed record (exit 2).")
    chat_template: str | None = option(
        None, "A Jinja file replacing the tokenizer's chat template."
    )
    template_kwargs: str | None = option(
        None, "JSON passed to the template, e.g. '{\"enable_thinking\": false}'."
    )
    trust_remote_code: bool = option(False, "Allow the target's own tokenizer code.")
    json_: bool = option(False, "Print one JSON document.", record=False)


@dataclass
class RegenerateOptions:
    """`data regenerate`: every assistant turn replaced by the target's own answer."""

    input: str = option(
        None, "Conversations JSONL (ShareGPT or OpenAI form).", argument=True, required=True
    )
    output: str = option(
        None, "Output JSONL (appended; a rerun resumes).", short="-o", required=True
    )
    target: str | None = option(None, "Generate locally with this model dir / hub id.")
    server: list[str] | None = option(
        None, "OpenAI-compatible server base URL; repeat for a fleet."
    )
    model: str | None = option(None, "Model name for the servers (default: what /v1/models says).")
    max_tokens: int = option(512, "Most tokens per assistant turn.", min=1)
    temperature: float = option(0.0, "0 = greedy.", min=0)
    top_p: float = option(1.0, "Nucleus sampling (with --temperature).", above=0, max=1)
    seed: int = option(0, "Sampling seed; each sample's draw is fixed by (seed, sample id).")
    concurrency: int = option(8, "Requests in flight (servers only).", min=1)
    retries: int = option(4, "Retries per request (timeouts, connection errors, 429, 5xx).", min=0)
    timeout: float = option(300.0, "Seconds per request.", above=0)
    template_kwargs: str | None = option(
        None,
        "JSON for the chat template, e.g. '{\"enable_thinking\": false}' (servers get it as "
        "chat_template_kwargs).",
    )
    truncated: str = option(
        "keep",
        "A sample with an answer cut at --max-tokens (finish_reason length): keep (marked "
        "cut_at_max_tokens) or drop (left out; a rerun with more --max-tokens retries it).",
        choices=("keep", "drop"),
    )
    device: str = option("cpu", "cpu, cuda, cuda:1 ... (with --target).")
    dtype: str = option("float32", "The target's dtype (with --target).")
    trust_remote_code: bool = option(False, TRUST_HELP)
    json_: bool = option(False, JSON_HELP, record=False)


@dataclass
class CaptureOptions:
    """`data capture`: the offline feature store of a DATA directory."""

    data: str | None = option(None, "A DATA directory written by `data prepare`.", argument=True)
    target: str = option(None, "The target model (zoo name, local dir or hub id).", required=True)
    output: str | None = option(None, "The feature store directory (a rerun resumes).", short="-o")
    aux_layers: tuple[int, int, int] | None = option(
        None, "Three HF hidden-state ids (default: the target's default)."
    )
    vocab: str | None = option(
        None,
        "Draft vocab: d2t/t2d safetensors from `data vocab`, or a drafter checkpoint (its own "
        "d2t/t2d; what warm-start training needs); default: the full vocab.",
    )
    topk: int = option(64, "Teacher log-probs kept per token (0 = the whole draft vocab).", min=0)
    shard_tokens: int = option(32768, "Tokens per shard.", min=1)
    batch_tokens: int = option(4096, "Padded tokens per target forward.", min=1)
    device: str = option("cpu", "cpu, cuda, cuda:1 ...")
    dtype: str | None = option(
        None,
        "The target's dtype (default float32). With --engine: the dtype the server runs "
        "(its --dtype) and the states' dtype, by default the checkpoint's torch_dtype.",
    )
    trust_remote_code: bool = option(False, TRUST_HELP)
    engine: str | None = option(
        None,
        "Take the hidden states from a running engine (vllm, or vllm@RELEASE) instead of "
        "loading the target; only its final norm and lm_head are read.",
    )
    url: str | None = option(None, "Engine: the server's base URL.")
    states_dir: str | None = option(
        None, "Engine: the connector's shared_storage_path, as seen here."
    )
    launch_command: bool = option(
        False, "Engine: print the `vllm serve` line and exit.", record=False
    )
    drafter: str | None = option(None, "The drafter whose aux layers to capture (headers read).")
    layer_ids: str | None = option(None, "Engine: the vLLM layer ids the server was launched with.")
    extra_layers: str | None = option(
        None,
        "More h-indices to hold beside the drafter's (e.g. 3,5,6); train, eval and probe pick "
        "theirs.",
    )
    probe_layers: bool = option(
        False,
        "Also hold the probe's candidate layers (both readings of the drafter's ids): one "
        "store for probe, train and eval.",
    )
    heldout_data: bool = option(
        False,
        "DATA is held-out data (not trained on): `eval --features` scores all of it by default "
        '(also when DATA\'s data.json says "split": "test").',
    )
    model: str | None = option(None, "Engine: model name for the server.")
    concurrency: int = option(8, "Engine: requests in flight.", min=1)
    timeout: float = option(300.0, "Engine: seconds per request.", above=0)
    lock_timeout: float = option(60.0, "Engine: seconds to wait for a states file.", above=0)
    json_: bool = option(False, JSON_HELP, record=False)
