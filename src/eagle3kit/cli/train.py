"""CLI verb: `eagle3kit train` — train an EAGLE-3 drafter with training-time test (eagle3kit.train).

Also runs under torchrun: `torchrun --nproc-per-node N -m eagle3kit train ...` (FSDP2).
"""

from __future__ import annotations

import typer


def _render(s: dict) -> None:
    from eagle3kit.cli._render import out

    o = out()
    depth = s.get("sim_accept_len_by_depth") or []
    o.print(
        f"trained {s['steps']} steps ({s['source']}, {s['attention']} drafter, "
        f"{s['train_samples']} samples, {s['world_size']} process(es))"
    )
    o.print(
        f"best step {s['best_step']}: every-position accept length {s['sim_accept_len']:.3f} "
        f"(by depth: {', '.join(f'{x:.2f}' for x in depth)})"
    )
    if s.get("tau_walk") is not None:
        o.print(f"walked accept length (tau_walk, picks best): {s['tau_walk']:.3f}")
    cov = s.get("vocab_coverage")
    if cov:
        o.print(f"DATA's loss tokens in the draft vocab: {cov['fraction']:.1%}")
    if s.get("best_acc"):
        o.print("held-out accuracy per draft step: " + ", ".join(f"{a:.3f}" for a in s["best_acc"]))
    tps = s.get("tokens_per_s")
    o.print(f"{tps:.0f} tokens/s; peak memory {s['peak_memory_mb']:.0f} MB" if tps else "")
    ref = s.get("reference")
    if ref:
        o.print(
            f"accept length on the old target {ref['target']}: {ref['before']['old']:.3f} -> "
            f"{ref['after']['old']:.3f}; on the new target: {ref['before']['new']:.3f} -> "
            f"{ref['after']['new']:.3f}"
        )


def _warnings(progress, main_rank: bool):
    """Print the library's "warning" events on stderr (also under --json); pass the rest on."""
    from eagle3kit.cli._render import err

    def on_event(e) -> None:
        if e.stage == "warning":
            if main_rank:
                err().print(
                    "warning: " + e.info["message"], markup=False, highlight=False, soft_wrap=True
                )
        elif progress is not None:
            progress(e)

    return on_event


def register(app: typer.Typer) -> None:
    @app.command("train")
    def train(
        target: str = typer.Option(
            None, "--target", help="Target: zoo name (dsv3-v1, dsv3-v1-tiny), dir or hub id."
        ),
        out_dir: str = typer.Option(..., "-o", "--out", help="Run directory RUN."),
        data: str = typer.Option(
            None,
            "--data",
            help="DATA dir from `data prepare` (online: the target runs on each batch).",
        ),
        features: str = typer.Option(
            None, "--features", help="Feature STORE from `data capture` (offline)."
        ),
        init_from: str = typer.Option(
            None, "--init-from", help="Warm start from this drafter (any layout, dir or hub id)."
        ),
        attention: str = typer.Option(
            "mha", "--attention", help="Fresh drafter's attention: mha or mla."
        ),
        vocab: str = typer.Option(None, "--vocab", help="VOCAB file (d2t/t2d) from `data vocab`."),
        draft_vocab_size: int = typer.Option(
            None, "--draft-vocab-size", help="Build the vocab from DATA's assistant-token counts."
        ),
        rebuild_vocab: bool = typer.Option(
            False,
            "--rebuild-vocab",
            help="Warm start: replace the checkpoint's d2t/t2d (lm_head rows follow their ids).",
        ),
        l2sp: float = typer.Option(
            0.0, "--l2sp", help="Warm start: L2-SP weight toward the starting weights."
        ),
        reference_target: str = typer.Option(
            None,
            "--reference-target",
            help="Old target: report accept length before/after on it too.",
        ),
        ttt_steps: int = typer.Option(
            7, "--ttt-steps", help="Unrolled draft steps (weights 0.8^i)."
        ),
        steps: int = typer.Option(None, "--steps", help="Exactly this many optimizer steps."),
        epochs: float = typer.Option(
            None, "--epochs", help="Or: passes over the training split (default 1)."
        ),
        batch_size: int = typer.Option(
            8, "--batch-size", help="Samples per optimizer step (global)."
        ),
        max_len: int = typer.Option(512, "--max-len", help="Truncate samples to this many tokens."),
        max_samples: int = typer.Option(
            None, "--max-samples", help="Train on the first N training samples only."
        ),
        lr: float = typer.Option(1e-3, "--lr", help="Peak learning rate (AdamW)."),
        warmup: int = typer.Option(None, "--warmup", help="Warm-up steps (default 5% of steps)."),
        weight_decay: float = typer.Option(0.0, "--weight-decay"),
        grad_clip: float = typer.Option(1.0, "--grad-clip"),
        heldout: float = typer.Option(
            0.05,
            "--heldout",
            help="Validation fraction or count (by sample id): chooses RUN/best.",
        ),
        best_includes_start: bool = typer.Option(
            False,
            "--best-includes-start",
            help="Let the starting weights (step 0) be RUN/best (default: trained steps only).",
        ),
        eval_every: int = typer.Option(
            None, "--eval-every", help="Evaluate every N steps (default steps/10)."
        ),
        eval_samples: int = typer.Option(
            64, "--eval-samples", help="Held-out samples scored per evaluation."
        ),
        eval_batch: int = typer.Option(8, "--eval-batch", help="Held-out samples per forward."),
        save_every: int = typer.Option(
            None, "--save-every", help="Write RUN/step-N every N steps."
        ),
        seed: int = typer.Option(0, "--seed"),
        device: str = typer.Option("cpu", "--device", help="cpu, cuda, cuda:1 ..."),
        target_dtype: str = typer.Option(
            "float32", "--target-dtype", help="float32, bfloat16, float16."
        ),
        topk: int = typer.Option(
            None, "--topk", help="Online: keep the teacher's top-K draft ids only."
        ),
        time_limit: float = typer.Option(
            None,
            "--time-limit",
            help="Stop after this many seconds of training (evaluate and save first).",
        ),
        resume: bool = typer.Option(
            False, "--resume", help="Continue RUN exactly (its saved settings)."
        ),
        threads: int = typer.Option(None, "--threads", help="torch CPU threads."),
        trust_remote_code: bool = typer.Option(False, "--trust-remote-code"),
        json_: bool = typer.Option(
            False, "--json", help="Print RUN/summary.json as one JSON document."
        ),
    ) -> None:
        """Train a drafter (training-time test); keeps RUN/best by simulated accept length."""
        _run(dict(locals()))


def _run(o: dict) -> None:
    """TrainConfig from the options of the same names, the run, and its summary (rank 0)."""
    import dataclasses
    import os

    import torch

    from eagle3kit.cli._checks import check_device
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json
    from eagle3kit.train.loop import TrainConfig
    from eagle3kit.train.loop import train as run_train

    check_device(o["device"])  # one line for cuda on a machine without it, before any work
    if o["threads"]:
        torch.set_num_threads(o["threads"])
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    cfg = TrainConfig(out=o["out_dir"], **{k: v for k, v in o.items() if k in names})
    main_rank = os.environ.get("RANK", "0") == "0"
    with bar(not o["json_"] and main_rank) as progress:
        summary = run_train(cfg, resume=o["resume"], progress=_warnings(progress, main_rank))
    if not main_rank:
        return
    if o["json_"]:
        emit_json(summary)
    else:
        _render(summary)
