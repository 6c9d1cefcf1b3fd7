"""`train --method mtp`: fine-tune a target's MTP head, FastMTP's recipe (docs/mtp.md).

FastMTP (arXiv 2509.18362; speculators ``models/mtp/core.py``): one head, K teacher-forced
recursive steps (default 3), the target frozen. With h the target's final hidden states and x
the sample's tokens, over the positions t < T - K - 1::

    z_0 = h_t
    step k = 0..K-1:  z_{k+1}, logits_k = head(z_k, embed(x_{t+k+1}))      positions t
                      loss_k = CE(logits_k, x_{t+k+2}) over loss-masked targets
                               (`--loss`: another per-position loss, against the target's
                               law with --mtp-targets target; train/losses.py)
    loss = sum_k w_k loss_k,   w_k = beta^k / sum_j beta^j,  beta = 0.6  -> [0.51, 0.31, 0.18]

Offline acceptance (eval, and the numbers this loop reports): a drafted token i at anchor t is
accepted when every step j <= i predicted the target's own greedy token at t+j+1
(``acceptance``); tau = 1 + sum_i acc_i, as the chain decoder walks it.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.artifacts import stamp
from eagle3kit.core.atomic import atomic_dir, atomic_write_json
from eagle3kit.core.errors import bad
from eagle3kit.core.progress import Progress, emit
from eagle3kit.methods.mtp.checkpoint.layout import head_dir_config, mtp_count
from eagle3kit.methods.mtp.model import FinalNormTap, MTPHead, causal, load_mtp_head
from eagle3kit.train.loss_names import check_loss
from eagle3kit.train.losses import Teacher, position_losses, token_teacher

if TYPE_CHECKING:
    from eagle3kit.model.target import TargetModel

BETA = 0.6
STEPS_K = 3


def step_weights(k: int = STEPS_K, beta: float = BETA) -> list[float]:
    """FastMTP's normalised exponential decay: beta^i / sum_j beta^j, i = 0..k-1."""
    raw = [beta**i for i in range(k)]
    return [w / sum(raw) for w in raw]


@dataclass
class MTPTrainConfig:
    target: str
    data: str
    out: str
    init_from: str | None = None  # a head dir (ours); default: the target's own head, else fresh
    steps: int = 200
    batch_size: int = 8
    max_len: int = 256
    lr: float = 1e-3
    k: int = STEPS_K
    beta: float = BETA
    targets: str = "data"  # "data": FastMTP's CE on the sample's tokens; "target": distil
    loss: str = "kl"  # per position (train/losses.py); with "data" kl or ce: FastMTP's CE
    heldout: float = 0.05
    eval_samples: int = 32
    seed: int = 0
    device: str = "cpu"


def target_hidden(target: TargetModel, tap: FinalNormTap, ids: torch.Tensor, attn: torch.Tensor):
    """(final hidden [B, T, H], the target's next-token logits [B, T, V]) for a padded batch."""
    out = target.forward(ids, attn.long())
    return tap.take().detach(), out.logits.detach()


def unroll(head: MTPHead, h: torch.Tensor, ids: torch.Tensor, k: int) -> list[torch.Tensor]:
    """The K teacher-forced recursive steps over positions 0..n-1, n = T - k - 1; logits
    [B, n, V] per step (module docstring)."""
    b, t = ids.shape
    n = t - k - 1
    pos = torch.arange(n, device=ids.device).expand(b, n)
    mask = causal(n, 0, ids.device).expand(b, 1, n, n)
    z, out = h[:, :n], []
    for step in range(k):
        o = head(ids[:, step + 1 : step + 1 + n], z, None, position_ids=pos, attn_mask=mask)
        out.append(o.logits)
        z = o.hidden
    return out


def mtp_loss(logits, ids, loss_mask, weights: list[float], teacher=None, loss="kl"):
    """sum_k w_k L_k averaged over loss-masked targets, L_k the per-position `loss`
    (train/losses.py `position_losses`) against the data token x_{t+k+2} (a one-hot teacher:
    kl and ce are FastMTP's CE), or with ``teacher`` (the target's logits [B, T, V]) against
    the target's own law at t+k+1 (self-distillation, for DATA that is not the target's own
    answers; kl is the soft cross entropy)."""
    n = logits[0].shape[1]
    total = logits[0].new_zeros(())
    for step, (lg, w) in enumerate(zip(logits, weights, strict=True)):
        m = loss_mask[:, step + 2 : step + 2 + n]
        if teacher is None:
            law = token_teacher(ids[:, step + 2 : step + 2 + n])
        else:  # the whole vocabulary: every loss reads p as it is
            law = Teacher(torch.softmax(teacher[:, step + 1 : step + 1 + n].float(), -1))
        ell = position_losses(loss, lg, law).flatten()
        total = total + w * (ell * m.flatten()).sum() / m.sum().clamp(min=1)
    return total


def accepted(logits: list[torch.Tensor], greedy: torch.Tensor) -> torch.Tensor:
    """Drafts a cycle anchored at t would accept, [B, n] in 0..K: the leading steps whose
    argmax equals the target's greedy token at t+step+1."""
    n = logits[0].shape[1]
    alive = torch.ones_like(greedy[:, :n], dtype=torch.bool)  # [B, n]
    count = torch.zeros_like(greedy[:, :n])
    for step, lg in enumerate(logits):
        alive = alive & (lg.argmax(-1) == greedy[:, step + 1 : step + 1 + n])
        count += alive
    return count


def walk(count: torch.Tensor, anchors: torch.Tensor) -> list[int]:
    """The cycles chain decoding walks through one answer: from its first anchor, accept
    count[t] drafts, then the next cycle starts count[t] + 1 further on. [n] -> accepted."""
    idx = anchors.nonzero()
    out, t = [], int(idx[0]) if len(idx) else len(anchors)
    while t < len(anchors) and bool(anchors[t]):
        out.append(int(count[t]))
        t += int(count[t]) + 1
    return out


def acceptance(logits: list[torch.Tensor], greedy: torch.Tensor, loss_mask) -> dict[str, Any]:
    """Per-position acceptance [acc_1..acc_K] over every anchor t whose first drafted token
    t+2 is loss-masked (draft i accepted iff steps 1..i all equal the target's greedy
    tokens), and the cycles a chain decoder walks (``walk``) per sample."""
    n, k = logits[0].shape[1], len(logits)
    anchors = loss_mask[:, 2 : 2 + n]  # [B, n]
    count = accepted(logits, greedy)
    acc = [
        float((anchors & (count >= i)).sum()) / max(1, int(anchors.sum())) for i in range(1, k + 1)
    ]
    cycles = [a for c, m in zip(count, anchors, strict=True) for a in walk(c, m)]
    return {
        "per_position_acceptance": acc,
        "tau_every_position": 1.0 + sum(acc),
        "anchors": int(anchors.sum()),
        "cycles": cycles,
    }


def initial_head(target: TargetModel, init_from: str | None) -> tuple[MTPHead, str]:
    """(head, where it came from): a head dir, the target's own MTP layer, or fresh weights."""
    if init_from:
        return load_mtp_head(target, init_from).trainable(), init_from
    if mtp_count(target.config) > 0:
        return load_mtp_head(target).trainable(), "target"
    return MTPHead.for_target(target), "fresh"


def _batches(data: Any, idx: list[int], size: int, max_len: int):
    from eagle3kit.data.prepared import Sample, collate

    for i in range(0, len(idx), size):
        samples = [data[j] for j in idx[i : i + size]]
        yield collate([Sample(s.id, s.input_ids[:max_len], s.loss_mask[:max_len]) for s in samples])


def evaluate_head(target, head, data, idx, *, k: int, batch: int, max_len: int) -> dict:
    """Offline acceptance of ``head`` on samples ``idx``: per position over every anchor
    (``per_position_acceptance``, ``tau``) and over the walked cycles (``walk``)."""
    tap = FinalNormTap(target)
    hits, anchors, cycles = [0.0] * k, 0, []
    try:
        with torch.no_grad():
            for ids, attn, lm in _batches(data, idx, batch, max_len):
                if ids.shape[1] < k + 3:
                    continue
                ids, attn, lm = (x.to(target.device) for x in (ids, attn, lm))
                h, t_logits = target_hidden(target, tap, ids, attn)
                greedy = t_logits.argmax(-1)
                a = acceptance(unroll(head, h, ids, k), greedy, lm & attn)
                anchors += a["anchors"]
                cycles += a["cycles"]
                hits = [
                    x + y * a["anchors"]
                    for x, y in zip(hits, a["per_position_acceptance"], strict=True)
                ]
    finally:
        tap.close()
    acc = [x / max(1, anchors) for x in hits]
    walked = [sum(c >= i for c in cycles) / max(1, len(cycles)) for i in range(1, k + 1)]
    walk_doc = {
        "per_position_acceptance": walked,
        "tau_walk": 1.0 + sum(walked),
        "cycles": len(cycles),
    }
    return {
        "per_position_acceptance": acc,
        "tau_every_position": 1.0 + sum(acc),
        "anchors": anchors,
        "walk": walk_doc,
    }


def save_head(head: MTPHead, target: TargetModel, out: Path, extra: dict[str, Any]) -> None:
    """A standalone head dir, the layout convert's extract writes and its stitch reads back:
    model.safetensors (canonical names, the target checkpoint's dtype), config.json (the
    target's, with ``eagle3kit_mtp.names``: canonical -> the target's names) and mtp.json
    (how it was trained). Written whole or not at all."""
    from eagle3kit.core.atomic import save_safetensors
    from eagle3kit.methods.mtp.model import canonical_names
    from eagle3kit.model.target import parse_dtype

    cfg = target.config.to_dict()
    names = canonical_names(head)
    stored = head.checkpoint_tensors()
    dtype = parse_dtype(str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32"))
    tensors = {c: stored[s].to("cpu", dtype) for c, s in names.items()}
    layer = int(cfg["num_hidden_layers"]) if head.style == "deepseek" else None
    cfg["num_nextn_predict_layers"] = max(1, int(cfg.get("num_nextn_predict_layers") or 0))
    cfg = head_dir_config(
        cfg,
        {
            "style": head.style,
            "index": 0,
            "layer": layer,
            "prefix": head.prefix,
            "names": dict(sorted(names.items())),
            "target": str(target.name_or_path),
            "target_architectures": getattr(target.config, "architectures", None),
        },
    )
    with atomic_dir(out) as tmp:
        save_safetensors(tmp / "model.safetensors", tensors, {"format": "pt"})
        atomic_write_json(tmp / "config.json", cfg)
        doc = {"method": "mtp", "style": head.style, "prefix": head.prefix, **extra}
        atomic_write_json(tmp / "mtp.json", stamp(doc, "mtp_head"))


def train_mtp(
    cfg: MTPTrainConfig, progress: Progress | None = None, target: TargetModel | None = None
) -> dict:
    """Fine-tune (or train) the MTP head; writes OUT/head (servable by stitching) and
    OUT/summary.json; returns the summary. ``target``: an already loaded TargetModel."""
    from eagle3kit.data.prepared import load_prepared
    from eagle3kit.model.loading import load_target

    if cfg.targets not in ("data", "target"):
        raise bad("--mtp-targets", f"expected data or target, found {cfg.targets!r}")
    check_loss(cfg.loss, token="--mtp-targets data" if cfg.targets == "data" else None)
    if cfg.k < 1 or cfg.steps < 0:
        raise bad(
            "train --method mtp", f"expected k >= 1 and steps >= 0, found {cfg.k}, {cfg.steps}"
        )
    torch.manual_seed(cfg.seed)
    target = target or load_target(cfg.target, device=cfg.device)
    data = load_prepared(cfg.data)
    train_idx, held = data.split(cfg.heldout, cfg.seed)
    held = held[: cfg.eval_samples]
    head, init = initial_head(target, cfg.init_from)
    ev = dict(k=cfg.k, batch=cfg.batch_size, max_len=cfg.max_len)
    before = evaluate_head(target, head, data, held, **ev)
    losses = _fit(cfg, target, head, data, train_idx, progress)
    after = evaluate_head(target, head, data, held, **ev)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    save_head(head, target, out / "head", {"init": init, "steps": cfg.steps})
    summary = stamp(
        {
            "method": "mtp",
            "position_loss": cfg.loss,  # --loss (train/losses.py)
            "init": init,
            "config": asdict(cfg),
            "step_weights": step_weights(cfg.k, cfg.beta),
            "loss": losses,
            "before": before,
            "after": after,
            "head": str(out / "head"),
        },
        "train",
    )
    atomic_write_json(out / "summary.json", summary)
    return summary


def lr_at(step: int, steps: int, peak: float) -> float:
    """Linear warm-up over the first 5% of steps (at least one), then cosine decay to 0."""
    warm = max(1, steps // 20)
    if step < warm:
        return peak * (step + 1) / warm
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def _fit(cfg, target, head, data, train_idx, progress) -> dict[str, float]:
    """``cfg.steps`` AdamW steps (``lr_at``) on the head's own weights."""
    weights = step_weights(cfg.k, cfg.beta)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.seed)
    tap = FinalNormTap(target)
    head.train()
    first = last = float("nan")
    t0 = time.perf_counter()
    try:
        for step in range(cfg.steps):
            pick = torch.randint(len(train_idx), (cfg.batch_size,), generator=gen).tolist()
            ids, attn, lm = next(
                _batches(data, [train_idx[i] for i in pick], cfg.batch_size, cfg.max_len)
            )
            if ids.shape[1] < cfg.k + 3:
                continue
            ids, attn, lm = (x.to(target.device) for x in (ids, attn, lm))
            h, t_logits = target_hidden(target, tap, ids, attn)
            teacher = t_logits if cfg.targets == "target" else None
            lgs = unroll(head, h, ids, cfg.k)
            loss = mtp_loss(lgs, ids, lm & attn, weights, teacher, loss=cfg.loss)
            for g in opt.param_groups:
                g["lr"] = lr_at(step, cfg.steps, cfg.lr)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            last = float(loss.detach())
            first = last if step == 0 else first
            emit(progress, "train mtp", step + 1, cfg.steps, "steps", loss=last)
    finally:
        tap.close()
        head.eval()
    return {"first": first, "last": last, "seconds": time.perf_counter() - t0}


def read_summary(run: str | Path) -> dict:
    return json.loads((Path(run) / "summary.json").read_text())
