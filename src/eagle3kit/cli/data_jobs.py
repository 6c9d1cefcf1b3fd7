"""CLI verbs `eagle3kit data regenerate|capture`, added to the `data` group by cli/data.py.

torch/transformers are imported inside the commands only (`eagle3kit --help` stays fast).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from eagle3kit.cli._checks import check_output
from eagle3kit.cli._options import Device, TrustRemoteCode

JSON_HELP = "Print one JSON document on stdout (progress stays on stderr)."


@dataclass(frozen=True)
class TargetHere:
    """The target a command loads in this process: `--target`, `--device`, `--dtype`,
    `--trust-remote-code` as given."""

    name: str
    device: str
    dtype: str
    trust_remote_code: bool

    def load(self):
        return _load_target(self.name, self.device, self.dtype, None, self.trust_remote_code)


@dataclass(frozen=True)
class LocalCapture:
    """`data capture` with the target loaded here: its options, as given."""

    data: Path | None
    output: Path | None
    target: TargetHere
    vocab: Path | None
    aux_layers: tuple[int, int, int] | None
    extra_layers: str | None
    probe_layers: bool
    drafter: str | None
    topk: int
    shard_tokens: int
    batch_tokens: int
    heldout_data: bool
    json_: bool


def _load_target(
    target: str, device: str, dtype: str, aux_layers: list[int] | None, trust_remote_code: bool
):
    from eagle3kit.model.loading import resolve_target
    from eagle3kit.model.target import TargetModel

    return TargetModel.from_pretrained(
        resolve_target(target),  # zoo names, local dirs, hub ids
        device=device,
        dtype=dtype,
        aux_layers=aux_layers,
        trust_remote_code=trust_remote_code,
    )


Input = Annotated[Path, typer.Argument(help="Conversations JSONL (ShareGPT or OpenAI form).")]
RegenOutput = Annotated[
    Path, typer.Option("-o", "--output", help="Output JSONL (appended; a rerun resumes).")
]
RegenTarget = Annotated[
    str, typer.Option("--target", help="Generate locally with this model dir / hub id.")
]
Server = Annotated[
    list[str],
    typer.Option("--server", help="OpenAI-compatible server base URL; repeat for a fleet."),
]
RegenModel = Annotated[
    str, typer.Option("--model", help="Model name for the servers (default: what /v1/models says).")
]
MaxTokens = Annotated[int, typer.Option("--max-tokens", help="Most tokens per assistant turn.")]
Temperature = Annotated[float, typer.Option("--temperature", help="0 = greedy.")]
TopP = Annotated[float, typer.Option("--top-p", help="Nucleus sampling (with --temperature).")]
Seed = Annotated[
    int,
    typer.Option("--seed", help="Sampling seed; each sample's draw is fixed by (seed, sample id)."),
]
RegenConcurrency = Annotated[
    int, typer.Option("--concurrency", help="Requests in flight (servers only).")
]
Retries = Annotated[
    int,
    typer.Option("--retries", help="Retries per request (timeouts, connection errors, 429, 5xx)."),
]
RegenTimeout = Annotated[float, typer.Option("--timeout", help="Seconds per request.")]
TemplateKwargs = Annotated[
    str,
    typer.Option(
        "--template-kwargs",
        help="JSON for the chat template, e.g. '{\"enable_thinking\": false}' (servers get "
        "it as chat_template_kwargs).",
    ),
]
Truncated = Annotated[
    str,
    typer.Option(
        "--truncated",
        help="A sample with an answer cut at --max-tokens (finish_reason length): keep (marked "
        "cut_at_max_tokens) or drop (left out; a rerun with more --max-tokens retries it).",
    ),
]
Dtype = Annotated[str, typer.Option("--dtype")]
JsonOut = Annotated[bool, typer.Option("--json", help=JSON_HELP)]


def regenerate_cmd(
    *,
    input: Input,
    output: RegenOutput,
    target: RegenTarget = None,
    server: Server = None,
    model: RegenModel = None,
    max_tokens: MaxTokens = 512,
    temperature: Temperature = 0.0,
    top_p: TopP = 1.0,
    seed: Seed = 0,
    concurrency: RegenConcurrency = 8,
    retries: Retries = 4,
    timeout: RegenTimeout = 300.0,
    template_kwargs: TemplateKwargs = None,
    truncated: Truncated = "keep",
    device: Device = "cpu",
    dtype: Dtype = "float32",
    trust_remote_code: TrustRemoteCode = False,
    json_: JsonOut = False,
) -> None:
    """Replace every assistant turn with the target's own answer, turn by turn (resumable).

    Exit 1 when some samples failed (listed; rerun the same command to retry them).
    """
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json
    from eagle3kit.core.errors import Eagle3Error
    from eagle3kit.data.prepare import parse_template_kwargs
    from eagle3kit.data.regenerate import regenerate

    if (target is None) == (not server):
        raise Eagle3Error("data regenerate: give exactly one of --target or --server")
    check_output(output, "-o", input, kind="file")
    kwargs = parse_template_kwargs(template_kwargs)
    local = None
    if target:
        here = TargetHere(target, device, dtype, trust_remote_code)
        local = _local_generator(here, max_tokens, temperature, top_p, seed, kwargs)
    with bar(not json_) as progress:
        res = regenerate(input, output, generate=local, servers=server, model=model,
                         max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed,
                         concurrency=concurrency, retries=retries, timeout=timeout,
                         template_kwargs=kwargs, truncated=truncated,
                         progress=progress)  # fmt: skip
    _warn_cut(res)
    if json_:
        emit_json(res.to_json())
    else:
        _render_regenerate(res, output)
    if res.failed:
        raise typer.Exit(1)


def _local_generator(
    target: TargetHere, max_tokens: int, temperature: float, top_p: float, seed: int, kwargs: dict
):
    """`data regenerate --target`: the target loaded here, answering turn by turn."""
    from eagle3kit.decode.local import local_generator

    return local_generator(
        target.load(), max_tokens, temperature, seed, template_kwargs=kwargs, top_p=top_p
    )


def _warn_cut(res) -> None:
    """One warning line when --max-tokens cut answers (finish_reason "length")."""
    if res.cut_answers:
        what = (
            f"dropped ({len(res.dropped)} samples left out; rerun with a larger --max-tokens)"
            if res.truncated == "drop"
            else "kept, each sample marked cut_at_max_tokens (--truncated drop leaves them out)"
        )
        print(
            f"warning: {res.cut_answers} answers in {res.cut_samples} samples stopped at "
            f"--max-tokens {res.max_tokens} (finish_reason length): {what}",
            file=sys.stderr,
        )


def _render_regenerate(res, output: Path) -> None:
    """`data regenerate`'s account: skipped lines and failures on stderr, the counts."""
    from eagle3kit.cli._render import err, out

    for s in res.skipped:
        err().print(
            f"skipped {s['file']}:{s['line']}: {s['reason']}", markup=False, highlight=False
        )
    for sid, why in res.errors.items():
        err().print(f"failed {sid}: {why}", markup=False, highlight=False)
    out().print(
        f"{output}: {res.done} regenerated, {res.already_done} already done, "
        f"{len(res.failed)} failed, {len(res.skipped)} input lines skipped"
        + (
            f"; {res.answered} of them ended with a user turn (or an empty answer) "
            "and were answered"
            if res.answered
            else ""
        )
    )


DataArg = Annotated[Path, typer.Argument(help="A DATA directory written by `data prepare`.")]
CaptureTarget = Annotated[
    str, typer.Option("--target", help="The target model (local dir or hub id).")
]
CaptureOutput = Annotated[
    Path, typer.Option("-o", "--output", help="The feature store directory (a rerun resumes).")
]
AuxLayers = Annotated[
    tuple[int, int, int],
    typer.Option("--aux-layers", help="Three HF hidden-state ids (default: the target's default)."),
]
Vocab = Annotated[
    Path,
    typer.Option(
        "--vocab",
        help="Draft vocab: d2t/t2d safetensors from `data vocab`, or a drafter checkpoint "
        "(its own d2t/t2d; what warm-start training needs); default: the full vocab.",
    ),
]
Topk = Annotated[
    int,
    typer.Option(
        "--topk", min=0, help="Teacher log-probs kept per token (0 = the whole draft vocab)."
    ),
]
ShardTokens = Annotated[int, typer.Option("--shard-tokens", min=1, help="Tokens per shard.")]
BatchTokens = Annotated[
    int, typer.Option("--batch-tokens", min=1, help="Padded tokens per target forward.")
]
Engine = Annotated[
    str,
    typer.Option(
        "--engine",
        help="Take the hidden states from a running engine (vllm, or vllm@RELEASE) instead "
        "of loading the target; only its final norm and lm_head are read.",
    ),
]
Url = Annotated[str, typer.Option("--url", help="Engine: the server's base URL.")]
StatesDir = Annotated[
    Path,
    typer.Option("--states-dir", help="Engine: the connector's shared_storage_path, as seen here."),
]
LaunchCommand = Annotated[
    bool,
    typer.Option("--launch-command", help="Engine: print the `vllm serve` line and exit."),
]
Drafter = Annotated[
    str, typer.Option("--drafter", help="The drafter whose aux layers to capture (headers read).")
]
LayerIds = Annotated[
    str,
    typer.Option("--layer-ids", help="Engine: the vLLM layer ids the server was launched with."),
]
ExtraLayers = Annotated[
    str,
    typer.Option(
        "--extra-layers",
        help="More h-indices to hold beside the drafter's (e.g. 3,5,6); train, eval and probe "
        "pick theirs.",
    ),
]
ProbeLayers = Annotated[
    bool,
    typer.Option(
        "--probe-layers",
        help="Also hold the probe's candidate layers (both readings of the drafter's ids): "
        "one store for probe, train and eval.",
    ),
]
HeldoutData = Annotated[
    bool,
    typer.Option(
        "--heldout-data",
        help="DATA is held-out data (not trained on): `eval --features` scores all of it by "
        'default (also when DATA\'s data.json says "split": "test").',
    ),
]
EngineModel = Annotated[str, typer.Option("--model", help="Engine: model name for the server.")]
EngineConcurrency = Annotated[
    int, typer.Option("--concurrency", help="Engine: requests in flight.")
]
EngineTimeout = Annotated[float, typer.Option("--timeout", help="Engine: seconds per request.")]
LockTimeout = Annotated[
    float, typer.Option("--lock-timeout", help="Engine: seconds to wait for a states file.")
]


def capture_cmd(
    *,
    data: DataArg = None,
    target: CaptureTarget = ...,
    output: CaptureOutput = None,
    aux_layers: AuxLayers = None,
    vocab: Vocab = None,
    topk: Topk = 64,
    shard_tokens: ShardTokens = 32768,
    batch_tokens: BatchTokens = 4096,
    device: Device = "cpu",
    dtype: Dtype = "float32",
    trust_remote_code: TrustRemoteCode = False,
    engine: Engine = None,
    url: Url = None,
    states_dir: StatesDir = None,
    launch_command: LaunchCommand = False,
    drafter: Drafter = None,
    layer_ids: LayerIds = None,
    extra_layers: ExtraLayers = None,
    probe_layers: ProbeLayers = False,
    heldout_data: HeldoutData = False,
    model: EngineModel = None,
    concurrency: EngineConcurrency = 8,
    timeout: EngineTimeout = 300.0,
    lock_timeout: LockTimeout = 60.0,
    json_: JsonOut = False,
) -> None:
    """Offline feature store: fp8 aux states + top-K teacher log-probs, sharded, resumable."""
    from eagle3kit.cli._render import emit_json

    if vocab is not None:
        from eagle3kit.core.vocab import vocab_file

        vocab = vocab_file(vocab)  # a drafter checkpoint's directory: its weights file

    if engine is not None or launch_command:
        if output is not None:
            check_output(output, "-o", data, vocab, kind="dir")
        eng = dict(engine=engine, url=url, states_dir=states_dir, launch_command=launch_command,
                   drafter=drafter, layer_ids=layer_ids, extra_layers=extra_layers,
                   probe_layers=probe_layers, model=model, concurrency=concurrency,
                   timeout=timeout, lock_timeout=lock_timeout, device=device)  # fmt: skip
        common = dict(vocab=vocab, topk=topk, shard_tokens=shard_tokens,
                      heldout=heldout_data or None)  # fmt: skip
        aux = list(aux_layers) if aux_layers else None
        res = _engine_capture(
            data,
            target,
            output,
            aux,
            eng=eng,
            common=common,
            batch_tokens=batch_tokens,
            json_=json_,
        )
        if res is None:
            return
    else:
        here = TargetHere(target, device, dtype, trust_remote_code)
        res = _local_capture(LocalCapture(
            data=data, output=output, target=here, vocab=vocab, aux_layers=aux_layers,
            extra_layers=extra_layers, probe_layers=probe_layers, drafter=drafter, topk=topk,
            shard_tokens=shard_tokens, batch_tokens=batch_tokens, heldout_data=heldout_data,
            json_=json_))  # fmt: skip
    if json_:
        emit_json(res)
        return
    _render_capture(res, output)


def _local_capture(o: LocalCapture) -> dict:
    """`data capture` with the target loaded here: the drafter's layers first, then the extra
    and probe layers (`live.capture.capture_layers`)."""
    from eagle3kit.cli._progress import bar
    from eagle3kit.data.store import capture
    from eagle3kit.live.capture import capture_layers
    from eagle3kit.model.target import TargetModel

    data, output, vocab, aux_layers = o.data, o.output, o.vocab, o.aux_layers
    if data is None or output is None:
        from eagle3kit.core.errors import Eagle3Error

        raise Eagle3Error("data capture: expected DATA and -o STORE")
    check_output(output, "-o", data, vocab, kind="dir")
    extra = _int_list(o.extra_layers, "--extra-layers")
    tm = o.target.load()
    own, every = capture_layers(
        o.drafter, list(aux_layers) if aux_layers else None, extra, o.probe_layers, tm.num_layers
    )
    tm.close()  # the same weights, hooked at every layer the store holds
    tm = TargetModel(tm.model, tm.tokenizer, aux_layers=every, name_or_path=tm.name_or_path)
    with bar(not o.json_) as progress:
        return capture(
            data,
            tm,
            output,
            vocab=vocab,
            topk=o.topk or None,
            shard_tokens=o.shard_tokens,
            batch_tokens=o.batch_tokens,
            heldout_data=o.heldout_data or None,
            drafter_layers=own,
            progress=progress,
        )


def _render_capture(res: dict, output: Path) -> None:
    from eagle3kit.cli._render import out

    out().print(
        f"{output}: {res['samples']} samples, {res['tokens']} tokens in {len(res['shards'])} "
        "shards, "
        f"{res['bytes_per_token']:.0f} bytes/token (aux layers {res['aux_layers']}, the "
        f"drafter's {res['drafter_layers']}; top-{res['quantisation']['topk']}"
        + ("; held-out data" if res.get("heldout_data") else "")
        + ")"
        + (f"; resumed after {res['resumed_from']} samples" if res["resumed_from"] else "")
    )


def register(data_app: typer.Typer) -> None:
    """Add `regenerate` and `capture` to the `data` group (created by cli/data.py)."""
    data_app.command("regenerate")(regenerate_cmd)
    data_app.command("capture")(capture_cmd)


def _next_capture(target: str, eng: dict, vocab: Path | None) -> None:
    """After the launch line (stdout), the capture command that goes with it (stderr). With a
    drafter, its own checkpoint is the --vocab: a store over another draft vocab cannot
    train it from a warm start."""
    d = eng["drafter"]
    v = vocab or d or "VOCAB"
    print(
        f"then: eagle3kit data capture DATA --target {target}"
        + (f" --drafter {d}" if d else "")
        + f" --vocab {v} --engine vllm --url URL --states-dir {eng['states_dir']} -o STORE",
        file=sys.stderr,
    )


def _engine_capture(data, target, output, aux, *, eng: dict, common: dict, batch_tokens, json_):
    """`data capture --engine vllm` (or `--launch-command`): the store, or None when only the
    launch line was printed."""
    from eagle3kit.checkpoint.engines.rules import parse_engines
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json
    from eagle3kit.core.errors import Eagle3Error
    from eagle3kit.live import capture as L

    sel = parse_engines(eng["engine"] or "vllm")
    if len(sel) != 1 or sel[0].name == "sglang":
        raise Eagle3Error(L.SGLANG_REFUSAL)
    version = sel[0].version
    ids = _int_list(eng["layer_ids"], "--layer-ids")
    extra = _int_list(eng["extra_layers"], "--extra-layers")
    probe = eng["probe_layers"]
    if eng["launch_command"]:
        if eng["states_dir"] is None:
            raise Eagle3Error("--launch-command: expected --states-dir (the shared directory)")
        ckpt, plan = L.plan_for(target, eng["drafter"], aux, ids, extra, version, probe)
        line = L.launch_command(target, plan, str(eng["states_dir"]), L.target_shape(ckpt).dtype)
        if json_:
            doc = {"kind": "eagle3kit.launch_command", "schema": 1, "launch_command": line}
            emit_json({**doc, **plan.record()})
        else:
            print(line)
            _next_capture(target, eng, common["vocab"])
        return None
    if data is None or output is None or not eng["url"] or eng["states_dir"] is None:
        raise Eagle3Error(
            "data capture --engine vllm: expected DATA, -o STORE, --url, --states-dir"
        )
    with bar(not json_) as progress:
        return L.capture_from_engine(
            data,
            target,
            output,
            url=eng["url"],
            states_dir=eng["states_dir"],
            drafter=eng["drafter"],
            aux_layers=aux,
            layer_ids=ids,
            extra_layers=extra,
            probe_layers=probe,
            heldout_data=common["heldout"],
            version=version,
            model=eng["model"],
            vocab=common["vocab"],
            topk=common["topk"] or None,
            shard_tokens=common["shard_tokens"],
            batch_tokens=batch_tokens,
            concurrency=eng["concurrency"],
            timeout=eng["timeout"],
            lock_timeout=eng["lock_timeout"],
            device=eng["device"],
            progress=progress,
        )


def _int_list(text: str | None, option: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.replace(",", " ").split()]
    except ValueError:
        from eagle3kit.core.errors import Eagle3Error

        raise Eagle3Error(f"{option}: expected layer ids like 2,16,29,32, found {text!r}") from None
