"""CLI verb: `eagle3kit train` — train an EAGLE-3 drafter with training-time test (eagle3kit.train).

Also runs under torchrun: `torchrun --nproc-per-node N -m eagle3kit train ...` (FSDP2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from eagle3kit.cli._checks import heldout_amount
from eagle3kit.cli._options import Seed, TrustRemoteCode

if TYPE_CHECKING:
    from eagle3kit.train.loop import TrainConfig


def _render(s: dict) -> None:
    from eagle3kit.cli._render import out

    o = out()
    depth = s.get("sim_accept_len_by_depth") or []
    o.print(
        f"trained {s['steps']} steps ({s['source']}, {s.get('method', 'eagle3')} "
        f"{s['attention']} drafter, "
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
            f"accept length on the old target {ref['target']}"
            + (f" (store {ref['features']})" if ref.get("features") else "")
            + f": {ref['before']['old']:.3f} -> "
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


Target = Annotated[
    str,
    typer.Option("--target", help="Target: zoo name (dsv3-v1, dsv3-v1-tiny), dir or hub id."),
]
OutDir = Annotated[str, typer.Option("-o", "--out", help="Run directory RUN.")]
Data = Annotated[
    str,
    typer.Option(
        "--data", help="DATA dir from `data prepare` (online: the target runs on each batch)."
    ),
]
Features = Annotated[
    str, typer.Option("--features", help="Feature STORE from `data capture` (offline).")
]
InitFrom = Annotated[
    str,
    typer.Option("--init-from", help="Warm start from this drafter (any layout, dir or hub id)."),
]
Attention = Annotated[
    str, typer.Option("--attention", help="Fresh drafter's attention: mha or mla.")
]
Method = Annotated[
    str,
    typer.Option(
        "--method",
        help="eagle3, eagle3.1 (fc_norm + norm_output) or peagle (parallel drafting); "
        "default: a warm start's own, else eagle3.",
    ),
]
FcNorm = Annotated[
    bool,
    typer.Option("--fc-norm/--no-fc-norm", help="EAGLE 3.1: one RMSNorm per aux state before fc."),
]
NormBeforeFc = Annotated[
    bool,
    typer.Option("--norm-before-fc/--no-norm-before-fc", help="One RMSNorm over cat(aux)."),
]
NormOutput = Annotated[
    bool,
    typer.Option(
        "--norm-output/--no-norm-output",
        help="EAGLE 3.1: feed norm(h) to the next step and the head (speculators, vLLM).",
    ),
]
MaskTokenId = Annotated[
    int,
    typer.Option("--mask-token-id", help="peagle: the parallel slots' token (default: pad)."),
]
CodRatio = Annotated[
    float, typer.Option("--cod-ratio", help="peagle: COD keeps n*max(r^d, min) at depth d.")
]
CodMin = Annotated[float, typer.Option("--cod-min", help="peagle: COD's floor r_min.")]
Vocab = Annotated[
    str,
    typer.Option(
        "--vocab", help="VOCAB file (d2t/t2d) from `data vocab`, or a drafter checkpoint's own."
    ),
]
DraftVocabSize = Annotated[
    int,
    typer.Option("--draft-vocab-size", help="Build the vocab from DATA's assistant-token counts."),
]
RebuildVocab = Annotated[
    bool,
    typer.Option(
        "--rebuild-vocab",
        help="Warm start: replace the checkpoint's d2t/t2d (lm_head rows follow their ids).",
    ),
]
L2sp = Annotated[
    float, typer.Option("--l2sp", help="Warm start: L2-SP weight toward the starting weights.")
]
ReferenceTarget = Annotated[
    str,
    typer.Option(
        "--reference-target",
        help="Old target (with --data): report accept length before/after on it too.",
    ),
]
ReferenceFeatures = Annotated[
    str,
    typer.Option(
        "--reference-features",
        help="Old target's feature STORE of the same DATA (with --features): the same "
        "before/after, no target loaded.",
    ),
]
TttSteps = Annotated[
    int,
    typer.Option("--ttt-steps", help="Unrolled draft steps (weights 0.8^i); peagle: depths K."),
]
Steps = Annotated[int, typer.Option("--steps", help="Exactly this many optimizer steps.")]
Epochs = Annotated[
    float, typer.Option("--epochs", help="Or: passes over the training split (default 1).")
]
BatchSize = Annotated[
    int, typer.Option("--batch-size", help="Samples per optimizer step (global).")
]
MaxLen = Annotated[int, typer.Option("--max-len", help="Truncate samples to this many tokens.")]
MaxSamples = Annotated[
    int, typer.Option("--max-samples", help="Train on the first N training samples only.")
]
Lr = Annotated[float, typer.Option("--lr", help="Peak learning rate (AdamW).")]
Warmup = Annotated[int, typer.Option("--warmup", help="Warm-up steps (default 5% of steps).")]
WeightDecay = Annotated[float, typer.Option("--weight-decay")]
GradClip = Annotated[float, typer.Option("--grad-clip")]
Heldout = Annotated[
    str,
    typer.Option(
        "--heldout",
        callback=heldout_amount,
        help="Validation fraction (0.05) or count (8) of samples, by sample id: chooses RUN/best.",
    ),
]
BestIncludesStart = Annotated[
    bool,
    typer.Option(
        "--best-includes-start",
        help="Let the starting weights (step 0) be RUN/best (default: trained steps only).",
    ),
]
EvalEvery = Annotated[
    int, typer.Option("--eval-every", help="Evaluate every N steps (default steps/10).")
]
EvalSamples = Annotated[
    int, typer.Option("--eval-samples", help="Held-out samples scored per evaluation.")
]
EvalBatch = Annotated[int, typer.Option("--eval-batch", help="Held-out samples per forward.")]
SaveEvery = Annotated[int, typer.Option("--save-every", help="Write RUN/step-N every N steps.")]
Device = Annotated[str, typer.Option("--device", help="cpu, cuda, cuda:1 ...")]
TargetDtype = Annotated[str, typer.Option("--target-dtype", help="float32, bfloat16, float16.")]
Topk = Annotated[
    int, typer.Option("--topk", help="Online: keep the teacher's top-K draft ids only.")
]
TimeLimit = Annotated[
    float,
    typer.Option(
        "--time-limit",
        help="Stop after this many seconds of training (evaluate and save first).",
    ),
]
Resume = Annotated[
    bool, typer.Option("--resume", help="Continue RUN exactly (its saved settings).")
]
Threads = Annotated[int, typer.Option("--threads", help="torch CPU threads.")]
Json = Annotated[bool, typer.Option("--json", help="Print RUN/summary.json as one JSON document.")]


def train(
    target: Target = None,
    out_dir: OutDir = ...,
    data: Data = None,
    features: Features = None,
    init_from: InitFrom = None,
    attention: Attention = "mha",
    method: Method = None,
    fc_norm: FcNorm = None,
    norm_before_fc: NormBeforeFc = None,
    norm_output: NormOutput = None,
    mask_token_id: MaskTokenId = None,
    cod_ratio: CodRatio = 0.7,
    cod_min: CodMin = 0.2,
    vocab: Vocab = None,
    draft_vocab_size: DraftVocabSize = None,
    rebuild_vocab: RebuildVocab = False,
    l2sp: L2sp = 0.0,
    reference_target: ReferenceTarget = None,
    reference_features: ReferenceFeatures = None,
    ttt_steps: TttSteps = 7,
    steps: Steps = None,
    epochs: Epochs = None,
    batch_size: BatchSize = 8,
    max_len: MaxLen = 512,
    max_samples: MaxSamples = None,
    lr: Lr = 1e-3,
    warmup: Warmup = None,
    weight_decay: WeightDecay = 0.0,
    grad_clip: GradClip = 1.0,
    heldout: Heldout = "0.05",
    best_includes_start: BestIncludesStart = False,
    eval_every: EvalEvery = None,
    eval_samples: EvalSamples = 64,
    eval_batch: EvalBatch = 8,
    save_every: SaveEvery = None,
    seed: Seed = 0,
    device: Device = "cpu",
    target_dtype: TargetDtype = "float32",
    topk: Topk = None,
    time_limit: TimeLimit = None,
    resume: Resume = False,
    threads: Threads = None,
    trust_remote_code: TrustRemoteCode = False,
    json_: Json = False,
) -> None:
    """Train a drafter (training-time test); keeps RUN/best by simulated accept length."""
    from eagle3kit.train.loop import TrainConfig

    cfg = TrainConfig(
        out=out_dir,
        target=target,
        data=data,
        features=features,
        init_from=init_from,
        attention=attention,
        method=method,
        fc_norm=fc_norm,
        norm_before_fc=norm_before_fc,
        norm_output=norm_output,
        mask_token_id=mask_token_id,
        cod_ratio=cod_ratio,
        cod_min=cod_min,
        vocab=vocab,
        draft_vocab_size=draft_vocab_size,
        rebuild_vocab=rebuild_vocab,
        l2sp=l2sp,
        reference_target=reference_target,
        reference_features=reference_features,
        ttt_steps=ttt_steps,
        steps=steps,
        epochs=epochs,
        batch_size=batch_size,
        max_len=max_len,
        max_samples=max_samples,
        lr=lr,
        warmup=warmup,
        weight_decay=weight_decay,
        grad_clip=grad_clip,
        heldout=heldout,
        best_includes_start=best_includes_start,
        eval_every=eval_every,
        eval_samples=eval_samples,
        eval_batch=eval_batch,
        save_every=save_every,
        seed=seed,
        device=device,
        target_dtype=target_dtype,
        topk=topk,
        time_limit=time_limit,
        trust_remote_code=trust_remote_code,
    )
    _run(cfg, resume=resume, threads=threads, json_=json_)


def register(app: typer.Typer) -> None:
    app.command("train")(train)


def _run(cfg: TrainConfig, *, resume: bool, threads: int | None, json_: bool) -> None:
    """The run of `cfg` and its summary (rank 0)."""
    import os

    import torch

    from eagle3kit.cli._checks import check_device
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json
    from eagle3kit.train.loop import train as run_train

    check_device(cfg.device)  # one line for cuda on a machine without it, before any work
    if threads:
        torch.set_num_threads(threads)
    main_rank = os.environ.get("RANK", "0") == "0"
    with bar(not json_ and main_rank) as progress:
        summary = run_train(cfg, resume=resume, progress=_warnings(progress, main_rank))
    if not main_rank:
        return
    if json_:
        emit_json(summary)
    else:
        _render(summary)
