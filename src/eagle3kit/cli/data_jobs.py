"""CLI verbs `eagle3kit data regenerate|capture`, added to the `data` group by cli/data.py.

torch/transformers are imported inside the commands only (`eagle3kit --help` stays fast).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import typer

from eagle3kit.cli._checks import check_output
from eagle3kit.cli._command import command
from eagle3kit.cli.data_options import CaptureOptions, RegenerateOptions


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


def regenerate_cmd(o: RegenerateOptions) -> None:
    """Replace every assistant turn with the target's own answer, turn by turn (resumable).

    Exit 1 when some samples failed (listed; rerun the same command to retry them).
    """
    from eagle3kit.cli._checks import check_device
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json
    from eagle3kit.core.errors import Eagle3Error
    from eagle3kit.data.prepare import parse_template_kwargs
    from eagle3kit.data.regenerate import regenerate

    check_device(o.device)
    if (o.target is None) == (not o.server):
        raise Eagle3Error("data regenerate: give exactly one of --target or --server")
    output = Path(o.output)
    check_output(output, "-o", o.input, kind="file")
    kwargs = parse_template_kwargs(o.template_kwargs)
    local = None
    if o.target:
        here = TargetHere(o.target, o.device, o.dtype, o.trust_remote_code)
        local = _local_generator(here, o.max_tokens, o.temperature, o.top_p, o.seed, kwargs)
    with bar(not o.json_) as progress:
        res = regenerate(
            Path(o.input),
            output,
            generate=local,
            servers=o.server,
            model=o.model,
            max_tokens=o.max_tokens,
            temperature=o.temperature,
            top_p=o.top_p,
            seed=o.seed,
            concurrency=o.concurrency,
            retries=o.retries,
            timeout=o.timeout,
            template_kwargs=kwargs,
            truncated=o.truncated,
            progress=progress,
        )
    _warn_cut(res)
    if o.json_:
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


def capture_cmd(o: CaptureOptions) -> None:
    """Offline feature store: fp8 aux states + top-K teacher log-probs, sharded, resumable."""
    from eagle3kit.cli._checks import check_device
    from eagle3kit.cli._render import emit_json

    check_device(o.device)
    data = Path(o.data) if o.data is not None else None
    output = Path(o.output) if o.output is not None else None
    vocab = Path(o.vocab) if o.vocab is not None else None
    if vocab is not None:
        from eagle3kit.core.vocab import vocab_file

        vocab = vocab_file(vocab)  # a drafter checkpoint's directory: its weights file
    if o.engine is not None or o.launch_command:
        if output is not None:
            check_output(output, "-o", data, vocab, kind="dir")
        res = _engine_capture(o, data, output, vocab)
        if res is None:
            return
    else:
        here = TargetHere(o.target, o.device, o.dtype or "float32", o.trust_remote_code)
        res = _local_capture(
            LocalCapture(
                data=data,
                output=output,
                target=here,
                vocab=vocab,
                aux_layers=o.aux_layers,
                extra_layers=o.extra_layers,
                probe_layers=o.probe_layers,
                drafter=o.drafter,
                topk=o.topk,
                shard_tokens=o.shard_tokens,
                batch_tokens=o.batch_tokens,
                heldout_data=o.heldout_data,
                json_=o.json_,
            )
        )
    if o.json_:
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
    data_app.command("regenerate")(command(RegenerateOptions, regenerate_cmd))
    data_app.command("capture")(command(CaptureOptions, capture_cmd))


def _next_capture(target: str, o: CaptureOptions, vocab: Path | None) -> None:
    """After the launch line (stdout), the capture command that goes with it (stderr). With a
    drafter, its own checkpoint is the --vocab: a store over another draft vocab cannot
    train it from a warm start."""
    d = o.drafter
    v = vocab or d or "VOCAB"
    print(
        f"then: eagle3kit data capture DATA --target {target}"
        + (f" --drafter {d}" if d else "")
        + f" --vocab {v} --engine vllm --url URL --states-dir {o.states_dir} -o STORE",
        file=sys.stderr,
    )


def _engine_capture(o: CaptureOptions, data: Path | None, output: Path | None, vocab):
    """`data capture --engine vllm` (or `--launch-command`): the store, or None when only the
    launch line was printed."""
    from eagle3kit.checkpoint.engines.rules import parse_engines
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json
    from eagle3kit.core.errors import Eagle3Error
    from eagle3kit.live import capture as L

    target, aux = o.target, list(o.aux_layers) if o.aux_layers else None
    sel = parse_engines(o.engine or "vllm")
    if len(sel) != 1 or sel[0].name == "sglang":
        raise Eagle3Error(L.SGLANG_REFUSAL)
    version = sel[0].version
    ids = _int_list(o.layer_ids, "--layer-ids")
    extra = _int_list(o.extra_layers, "--extra-layers")
    probe = o.probe_layers
    if o.launch_command:
        if o.states_dir is None:
            raise Eagle3Error("--launch-command: expected --states-dir (the shared directory)")
        ckpt, plan = L.plan_for(target, o.drafter, aux, ids, extra, version, probe)
        dtype = L.served_dtype(o.dtype, L.target_shape(ckpt).dtype)
        line = L.launch_command(target, plan, str(o.states_dir), dtype)
        if o.json_:
            doc = {"kind": "eagle3kit.launch_command", "schema": 1, "launch_command": line}
            emit_json({**doc, **plan.record()})
        else:
            print(line)
            _next_capture(target, o, vocab)
        return None
    if data is None or output is None or not o.url or o.states_dir is None:
        raise Eagle3Error(
            "data capture --engine vllm: expected DATA, -o STORE, --url, --states-dir"
        )
    with bar(not o.json_) as progress:
        return L.capture_from_engine(
            data,
            target,
            output,
            url=o.url,
            states_dir=Path(o.states_dir),
            drafter=o.drafter,
            aux_layers=aux,
            layer_ids=ids,
            extra_layers=extra,
            probe_layers=probe,
            heldout_data=o.heldout_data or None,
            version=version,
            model=o.model,
            vocab=vocab,
            topk=o.topk or None,
            shard_tokens=o.shard_tokens,
            batch_tokens=o.batch_tokens,
            concurrency=o.concurrency,
            timeout=o.timeout,
            lock_timeout=o.lock_timeout,
            device=o.device,
            dtype=o.dtype,
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
