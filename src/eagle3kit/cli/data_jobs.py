"""CLI verbs `eagle3kit data regenerate|capture`, added to the `data` group by cli/data.py.

torch/transformers are imported inside the commands only (`eagle3kit --help` stays fast).
"""

from __future__ import annotations

from pathlib import Path

import typer

from eagle3kit.cli._checks import check_device, check_output

JSON_HELP = "Print one JSON document on stdout (progress stays on stderr)."


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


def register(data_app: typer.Typer) -> None:
    """Add `regenerate` and `capture` to the `data` group (created by cli/data.py)."""

    @data_app.command("regenerate")
    def regenerate_cmd(
        input: Path = typer.Argument(..., help="Conversations JSONL (ShareGPT or OpenAI form)."),
        output: Path = typer.Option(
            ..., "-o", "--output", help="Output JSONL (appended; a rerun resumes)."
        ),
        target: str = typer.Option(
            None, "--target", help="Generate locally with this model dir / hub id."
        ),
        server: list[str] = typer.Option(
            None, "--server", help="OpenAI-compatible server base URL; repeat for a fleet."
        ),
        model: str = typer.Option(
            None, "--model", help="Model name for the servers (default: what /v1/models says)."
        ),
        max_tokens: int = typer.Option(512, "--max-tokens", help="Most tokens per assistant turn."),
        temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy."),
        concurrency: int = typer.Option(
            8, "--concurrency", help="Requests in flight (servers only)."
        ),
        retries: int = typer.Option(
            4, "--retries", help="Retries per request (timeouts, connection errors, 429, 5xx)."
        ),
        timeout: float = typer.Option(300.0, "--timeout", help="Seconds per request."),
        template_kwargs: str = typer.Option(
            None,
            "--template-kwargs",
            help="JSON for the chat template, e.g. '{\"enable_thinking\": false}' (servers get it as chat_template_kwargs).",
        ),
        device: str = typer.Option("cpu", "--device", callback=check_device),
        dtype: str = typer.Option("float32", "--dtype"),
        trust_remote_code: bool = typer.Option(False, "--trust-remote-code"),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Replace every assistant turn with the target's own answer, turn by turn (resumable).

        Exit 1 when some samples failed (listed; rerun the same command to retry them).
        """
        from eagle3kit.cli._progress import bar
        from eagle3kit.cli._render import emit_json, err, out
        from eagle3kit.core.errors import Eagle3Error
        from eagle3kit.data.prepare import parse_template_kwargs
        from eagle3kit.data.regenerate import regenerate

        if (target is None) == (not server):
            raise Eagle3Error("data regenerate: give exactly one of --target or --server")
        check_output(output, "-o", input, kind="file")
        kwargs = parse_template_kwargs(template_kwargs)
        local = None
        if target:
            from eagle3kit.decode.local import local_generator

            tm = _load_target(target, device, dtype, None, trust_remote_code)
            local = local_generator(tm, max_tokens, temperature, template_kwargs=kwargs)
        with bar(not json_) as progress:
            res = regenerate(
                input,
                output,
                generate=local,
                servers=server,
                model=model,
                max_tokens=max_tokens,
                temperature=temperature,
                concurrency=concurrency,
                retries=retries,
                timeout=timeout,
                template_kwargs=kwargs,
                progress=progress,
            )
        if json_:
            emit_json(res.to_json())
        else:
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
        if res.failed:
            raise typer.Exit(1)

    @data_app.command("capture")
    def capture_cmd(
        data: Path = typer.Argument(..., help="A DATA directory written by `data prepare`."),
        target: str = typer.Option(..., "--target", help="The target model (local dir or hub id)."),
        output: Path = typer.Option(
            ..., "-o", "--output", help="The feature store directory (a rerun resumes)."
        ),
        aux_layers: tuple[int, int, int] = typer.Option(
            None, "--aux-layers", help="Three HF hidden-state ids (default: the target's default)."
        ),
        vocab: Path = typer.Option(
            None,
            "--vocab",
            help="Draft vocab (d2t/t2d safetensors from `data vocab`); default: the full vocab.",
        ),
        topk: int = typer.Option(
            64,
            "--topk",
            min=0,
            help="Teacher log-probs kept per token (0 = the whole draft vocab).",
        ),
        shard_tokens: int = typer.Option(32768, "--shard-tokens", min=1, help="Tokens per shard."),
        batch_tokens: int = typer.Option(
            4096, "--batch-tokens", min=1, help="Padded tokens per target forward."
        ),
        device: str = typer.Option("cpu", "--device", callback=check_device),
        dtype: str = typer.Option("float32", "--dtype"),
        trust_remote_code: bool = typer.Option(False, "--trust-remote-code"),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Offline feature store: fp8 aux states + top-K teacher log-probs, sharded, resumable."""
        from eagle3kit.cli._progress import bar
        from eagle3kit.cli._render import emit_json, out
        from eagle3kit.data.store import capture

        check_output(output, "-o", data, vocab, kind="dir")
        tm = _load_target(
            target, device, dtype, list(aux_layers) if aux_layers else None, trust_remote_code
        )
        with bar(not json_) as progress:
            res = capture(
                data,
                tm,
                output,
                vocab=vocab,
                topk=topk or None,
                shard_tokens=shard_tokens,
                batch_tokens=batch_tokens,
                progress=progress,
            )
        if json_:
            emit_json(res)
            return
        out().print(
            f"{output}: {res['samples']} samples, {res['tokens']} tokens in {len(res['shards'])} shards, "
            f"{res['bytes_per_token']:.0f} bytes/token (aux layers {res['aux_layers']}, top-{res['quantisation']['topk']})"
            + (f"; resumed after {res['resumed_from']} samples" if res["resumed_from"] else "")
        )
