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
        top_p: float = typer.Option(1.0, "--top-p", help="Nucleus sampling (with --temperature)."),
        seed: int = typer.Option(
            0, "--seed", help="Sampling seed; each sample's draw is fixed by (seed, sample id)."
        ),
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
            help="JSON for the chat template, e.g. '{\"enable_thinking\": false}' (servers get "
            "it as chat_template_kwargs).",
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
            local = local_generator(
                tm, max_tokens, temperature, seed, template_kwargs=kwargs, top_p=top_p
            )
        with bar(not json_) as progress:
            res = regenerate(
                input,
                output,
                generate=local,
                servers=server,
                model=model,
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=top_p,
                seed=seed,
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
        data: Path = typer.Argument(None, help="A DATA directory written by `data prepare`."),
        target: str = typer.Option(..., "--target", help="The target model (local dir or hub id)."),
        output: Path = typer.Option(
            None, "-o", "--output", help="The feature store directory (a rerun resumes)."
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
        engine: str = typer.Option(
            None,
            "--engine",
            help="Take the hidden states from a running engine (vllm, or vllm@RELEASE) instead "
            "of loading the target; only its final norm and lm_head are read.",
        ),
        url: str = typer.Option(None, "--url", help="Engine: the server's base URL."),
        states_dir: Path = typer.Option(
            None, "--states-dir", help="Engine: the connector's shared_storage_path, as seen here."
        ),
        launch_command: bool = typer.Option(
            False, "--launch-command", help="Engine: print the `vllm serve` line and exit."
        ),
        drafter: str = typer.Option(
            None, "--drafter", help="Engine: the drafter whose aux layers to capture."
        ),
        layer_ids: str = typer.Option(
            None, "--layer-ids", help="Engine: the vLLM layer ids the server was launched with."
        ),
        extra_layers: str = typer.Option(
            None,
            "--extra-layers",
            help="Engine: more h-indices to hold (e.g. 3,5,6: both readings for `probe`).",
        ),
        model: str = typer.Option(None, "--model", help="Engine: model name for the server."),
        concurrency: int = typer.Option(8, "--concurrency", help="Engine: requests in flight."),
        timeout: float = typer.Option(300.0, "--timeout", help="Engine: seconds per request."),
        lock_timeout: float = typer.Option(
            60.0, "--lock-timeout", help="Engine: seconds to wait for a states file."
        ),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Offline feature store: fp8 aux states + top-K teacher log-probs, sharded, resumable."""
        from eagle3kit.cli._progress import bar
        from eagle3kit.cli._render import emit_json, out
        from eagle3kit.data.store import capture

        if engine is not None or launch_command:
            if output is not None:
                check_output(output, "-o", data, vocab, kind="dir")
            eng = dict(
                engine=engine,
                url=url,
                states_dir=states_dir,
                launch_command=launch_command,
                drafter=drafter,
                layer_ids=layer_ids,
                extra_layers=extra_layers,
                model=model,
                concurrency=concurrency,
                timeout=timeout,
                lock_timeout=lock_timeout,
                device=device,
            )
            common = dict(vocab=vocab, topk=topk, shard_tokens=shard_tokens)
            aux = list(aux_layers) if aux_layers else None
            res = _engine_capture(data, target, output, aux, eng, common, batch_tokens, json_)
            if res is None:
                return
        else:
            if data is None or output is None:
                from eagle3kit.core.errors import Eagle3Error

                raise Eagle3Error("data capture: expected DATA and -o STORE")
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
            f"{output}: {res['samples']} samples, {res['tokens']} tokens in {len(res['shards'])} "
            "shards, "
            f"{res['bytes_per_token']:.0f} bytes/token (aux layers {res['aux_layers']}, "
            f"top-{res['quantisation']['topk']})"
            + (f"; resumed after {res['resumed_from']} samples" if res["resumed_from"] else "")
        )


def _engine_capture(data, target, output, aux, eng: dict, common: dict, batch_tokens, json_):
    """`data capture --engine vllm` (or `--launch-command`): the store, or None when only the
    launch line was printed."""
    from eagle3kit.checkpoint.engines import parse_engines
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
    if eng["launch_command"]:
        if eng["states_dir"] is None:
            raise Eagle3Error("--launch-command: expected --states-dir (the shared directory)")
        ckpt, plan = L.plan_for(target, eng["drafter"], aux, ids, extra, version)
        line = L.launch_command(target, plan, str(eng["states_dir"]), L.target_shape(ckpt).dtype)
        if json_:
            doc = {"kind": "eagle3kit.launch_command", "schema": 1, "launch_command": line}
            emit_json({**doc, **plan.record()})
        else:
            print(line)
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
