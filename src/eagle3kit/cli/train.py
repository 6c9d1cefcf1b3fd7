"""CLI verb: `eagle3kit train` — train an EAGLE-3 drafter with training-time test (eagle3kit.train).

Also runs under torchrun: `torchrun --nproc-per-node N -m eagle3kit train ...` (FSDP2).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Annotated

import typer

from eagle3kit.cli._checks import heldout_amount
from eagle3kit.cli._options import Seed, TrustRemoteCode


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
        help="eagle3, eagle3.1 (fc_norm + norm_output), peagle (parallel drafting), dflash (a "
        "block drafter, docs/dflash.md) or mtp (fine-tune the target's MTP head, FastMTP's "
        "recipe; --init-from: a head dir, default the target's own head, else fresh weights; "
        "docs/mtp.md); default: a warm start's own, else eagle3.",
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
Loss = Annotated[
    str,
    typer.Option(
        "--loss",
        help="Per-position loss to the target's law: kl (default), rkl, jsd, tv, ce (the "
        "target's argmax), lk or lk-hybrid (acceptance, LK); every method (docs/train.md).",
    ),
]
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
MtpTargets = Annotated[
    str,
    typer.Option(
        "--mtp-targets",
        help="mtp: data (FastMTP: CE on DATA's tokens, for DATA regenerated by the target) or "
        "target (distil the target's own next-token law).",
    ),
]
MtpSteps = Annotated[
    int, typer.Option("--mtp-steps", min=1, help="mtp: teacher-forced recursive steps (3).")
]

BlockSize = Annotated[int, typer.Option("--block-size", help="dflash: block size B (B-1 drafts).")]
DraftLayers = Annotated[int, typer.Option("--draft-layers", help="dflash: drafter layers.")]
Anchors = Annotated[int, typer.Option("--anchors", help="dflash: blocks per sample per step.")]
Gamma = Annotated[float, typer.Option("--gamma", help="dflash: position weights exp(-(k-1)/g).")]
PositionWeights = Annotated[
    str, typer.Option("--position-weights", help="dflash: exp or dpace (with ce).")
]
DflashLoss = Annotated[str, typer.Option("--dflash-loss", help="dflash: ce (data) or kl (target).")]


# The one mapping from TrainConfig's fields to their options, in `--help` order; a field's
# default is TrainConfig's own (min_lr_ratio has no option). Typer reads the signature that
# `_signature` builds from it (tests/test_train_cli.py checks it covers the fields).
CONFIG_OPTIONS = {
    "target": Target,
    "out": OutDir,
    "data": Data,
    "features": Features,
    "init_from": InitFrom,
    "attention": Attention,
    "method": Method,
    "fc_norm": FcNorm,
    "norm_before_fc": NormBeforeFc,
    "norm_output": NormOutput,
    "mask_token_id": MaskTokenId,
    "cod_ratio": CodRatio,
    "cod_min": CodMin,
    "loss": Loss,
    "vocab": Vocab,
    "draft_vocab_size": DraftVocabSize,
    "rebuild_vocab": RebuildVocab,
    "l2sp": L2sp,
    "reference_target": ReferenceTarget,
    "reference_features": ReferenceFeatures,
    "ttt_steps": TttSteps,
    "steps": Steps,
    "epochs": Epochs,
    "batch_size": BatchSize,
    "max_len": MaxLen,
    "max_samples": MaxSamples,
    "lr": Lr,
    "warmup": Warmup,
    "weight_decay": WeightDecay,
    "grad_clip": GradClip,
    "heldout": Heldout,
    "best_includes_start": BestIncludesStart,
    "eval_every": EvalEvery,
    "eval_samples": EvalSamples,
    "eval_batch": EvalBatch,
    "save_every": SaveEvery,
    "seed": Seed,
    "device": Device,
    "target_dtype": TargetDtype,
    "topk": Topk,
    "time_limit": TimeLimit,
    "trust_remote_code": TrustRemoteCode,
}
RUN_OPTIONS = {  # how to run, not saved with the run: (option, default)
    "resume": (Resume, False),
    "threads": (Threads, None),
    "json_": (Json, False),
    "block_size": (BlockSize, 8),
    "draft_layers": (DraftLayers, 1),
    "anchors": (Anchors, 16),
    "gamma": (Gamma, 4.0),
    "dflash_loss": (DflashLoss, "kl"),
    "position_weights": (PositionWeights, "exp"),
    "mtp_steps": (MtpSteps, 3),
    "mtp_targets": (MtpTargets, "data"),
}


def train(**options) -> None:
    """Train a drafter (training-time test); keeps RUN/best by the walked accept length.
    --method eagle3.1 / peagle train those EAGLE variants (docs/train.md), dflash a DFlash
    block drafter (docs/dflash.md), mtp fine-tunes the target's own MTP head (docs/mtp.md)."""
    from eagle3kit.core import registry

    method = options["method"]
    trained = registry.names(can="train")
    if method not in (None, *trained):
        raise typer.BadParameter(
            f"expected one of {', '.join(trained)}, found {method!r}", param_hint="--method"
        )
    part = registry.part(method or registry.DEFAULT, "train")
    run = {k: options[k] for k in ("resume", "threads", "json_")}
    _run(part.config(options), **run, part=part, options=options)


def _signature() -> inspect.Signature:
    """`train`'s parameters for typer: CONFIG_OPTIONS with TrainConfig's defaults (required
    when it has none), then RUN_OPTIONS."""
    from eagle3kit.train.config import TrainConfig

    defaults = {
        f.name: ... if f.default is dataclasses.MISSING else f.default
        for f in dataclasses.fields(TrainConfig)
    }
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter(n, kw, default=defaults[n], annotation=a)
              for n, a in CONFIG_OPTIONS.items()]  # fmt: skip
    params += [
        inspect.Parameter(n, kw, default=d, annotation=a) for n, (a, d) in RUN_OPTIONS.items()
    ]
    return inspect.Signature(params)


train.__signature__ = _signature()  # type: ignore[attr-defined]


def register(app: typer.Typer) -> None:
    app.command("train")(train)


def _run(cfg, *, resume: bool, threads: int | None, json_: bool, part, options: dict) -> None:
    """The run of `cfg` (the settings the method's train part made of the options) and its
    summary (rank 0)."""
    import os

    import torch

    from eagle3kit.cli._checks import check_device
    from eagle3kit.cli._progress import bar
    from eagle3kit.cli._render import emit_json, out

    check_device(cfg.device)  # one line for cuda on a machine without it, before any work
    if threads:
        torch.set_num_threads(threads)
    main_rank = os.environ.get("RANK", "0") == "0"
    with bar(not json_ and main_rank) as progress:
        summary = part.run(cfg, options, resume=resume, progress=_warnings(progress, main_rank))
    if not main_rank:
        return
    if json_:
        emit_json(summary)
        return
    for line in part.summary_lines(summary):
        out().print(line, markup=False, highlight=False)
