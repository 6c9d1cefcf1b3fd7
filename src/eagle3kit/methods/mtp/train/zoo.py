"""One MTP layer for a zoo DeepSeek-architecture member, so ``--method mtp`` runs offline.

``add_mtp_layer(member_dir, out_dir, steps)`` trains a fresh DeepSeek-V3-style MTP layer on
the member (its weights frozen) with FastMTP's recipe (methods/mtp/train/finetune.py: 3 recursive
steps,
weights 0.6^k) on chat samples of the member's own stdlib slice, distilling the member's own
next-token law by default (``targets="target"``: the samples are the stdlib's source, not the
member's answers; docs/mtp.md measures both losses), and writes ``out_dir``: the member
with the layer at index L = num_hidden_layers (``model.layers.{L}.*``, as DeepSeek-V3 ships
it) and
``num_nextn_predict_layers: 1`` in config.json. Every main tensor is written unchanged;
zoo.json records the layer (steps, data, offline tau before and after).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from eagle3kit.core.atomic import atomic_dir, atomic_write_json, atomic_write_text
from eagle3kit.core.errors import bad
from eagle3kit.core.progress import Progress
from eagle3kit.methods.mtp.train.finetune import MTPTrainConfig, train_mtp

WEIGHTS = "model.safetensors"


def _slice(member_dir: Path) -> tuple[str, bool]:
    """(the member's stdlib slice, whether its requests carry the signature) from zoo.json."""
    try:
        doc = json.loads((member_dir / "zoo.json").read_text())
    except (OSError, ValueError):
        return "lib", False
    sliced = doc.get("data", {}).get("slice", "lib")
    return sliced, bool(doc.get("recipe", {}).get("chat_signature"))


def _files_limit(samples: int) -> int:
    """How many of the slice's training files (sorted) the samples are drawn from."""
    return max(8, samples // 10)


def _prepare(member_dir: Path, work: Path, samples: int, max_len: int) -> Path:
    """A DATA dir of ``samples`` chat samples of the member's slice, for the member."""
    from eagle3kit.data.prepare import prepare
    from eagle3kit.zoo import corpus

    sliced, signed = _slice(member_dir)
    files = corpus.files(sliced, limit=_files_limit(samples))
    convs = corpus.spaced(corpus.chat_samples(files, signed=signed), samples)
    src = work / "conversations.jsonl"
    atomic_write_text(src, "".join(json.dumps(c) + "\n" for c in convs))
    prepare([src], member_dir, work / "data", max_length=max_len)
    return work / "data"


def add_mtp_layer(
    member_dir: str | Path,
    out_dir: str | Path,
    steps: int = 300,
    *,
    samples: int = 400,
    batch_size: int = 8,
    max_len: int = 256,
    lr: float = 1e-3,
    targets: str = "target",
    device: str = "cpu",
    seed: int = 0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Train one MTP layer for the member in ``member_dir``; write the member plus the layer
    to ``out_dir`` (whole or not at all). Returns the training summary."""
    from safetensors.torch import load_file

    from eagle3kit.methods.mtp.checkpoint.layout import mtp_count, mtp_style
    from eagle3kit.methods.mtp.model import read_head_tensors
    from eagle3kit.model.loading import load_target

    member_dir, out_dir = Path(member_dir), Path(out_dir)
    if not (member_dir / WEIGHTS).is_file():
        raise bad(str(member_dir), f"expected a zoo member with {WEIGHTS}, found none")
    target = load_target(str(member_dir), device=device)
    if mtp_style(target.config) != "deepseek" or mtp_count(target.config):
        raise bad(
            f"{member_dir}/config.json",
            "expected a DeepSeek-architecture member without an MTP layer, found "
            f"model_type {target.config.model_type!r} with {mtp_count(target.config)}",
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".mtp-", dir=out_dir.parent) as tmp:
        work = Path(tmp)
        data = _prepare(member_dir, work, samples, max_len)
        cfg = MTPTrainConfig(
            target=str(member_dir),
            data=str(data),
            out=str(work / "run"),
            steps=steps,
            batch_size=batch_size,
            max_len=max_len,
            lr=lr,
            seed=seed,
            device=device,
            targets=targets,
        )
        summary = train_mtp(cfg, progress, target=target)
        head = read_head_tensors(work / "run" / "head", "")  # the target's names
        main = load_file(member_dir / WEIGHTS)
        _write(member_dir, out_dir, main, head, summary, samples)
    return summary


def _data_note(member_dir: Path, samples: int) -> dict[str, Any]:
    """zoo.json's account of the head's training data (what `_prepare` drew)."""
    sliced, signed = _slice(member_dir)
    return {
        "source": "python stdlib chat samples (zoo/corpus.py chat_samples, spaced)",
        "slice": sliced,
        "files": f"the first {_files_limit(samples)} training files of the slice (sorted)",
        "samples": samples,
        "signed_requests": signed,
    }


def _write(member_dir: Path, out_dir: Path, main, head, summary: dict, samples: int) -> None:
    import torch

    from eagle3kit.core.atomic import save_safetensors
    from eagle3kit.zoo.shipping import git_commit

    config = json.loads((member_dir / "config.json").read_text())
    config["num_nextn_predict_layers"] = 1
    with atomic_dir(out_dir) as tmp:
        for f in member_dir.iterdir():
            if f.is_file() and f.name not in (WEIGHTS, "config.json", "zoo.json"):
                shutil.copy2(f, tmp / f.name)
        save_safetensors(tmp / WEIGHTS, {**main, **head}, {"format": "pt"})
        atomic_write_json(tmp / "config.json", config)
        zoo_doc = _zoo_json(member_dir)
        zoo_doc.pop("shipped", None)  # `zoo ship` of OUT writes its own
        c = summary["config"]
        zoo_doc["mtp"] = {
            "layers": 1,
            "prefix": f"model.layers.{config['num_hidden_layers']}.",
            "recipe": "FastMTP (methods/mtp/train/finetune.py)",
            "targets": c["targets"],
            "steps": c["steps"],
            "samples": samples,
            **{k: c[k] for k in ("seed", "batch_size", "max_len", "lr", "k", "beta", "heldout")},
            "data": _data_note(member_dir, samples),
            "heldout_anchors": summary["after"].get("anchors"),
            "tau_walk_before": summary["before"].get("walk", {}).get("tau_walk"),
            "tau_walk_after": summary["after"].get("walk", {}).get("tau_walk"),
            "tau_before": summary["before"]["tau_every_position"],
            "tau_after": summary["after"]["tau_every_position"],
            "per_position_acceptance": summary["after"]["per_position_acceptance"],
            "commit": git_commit(),
            "threads": torch.get_num_threads(),
        }
        atomic_write_json(tmp / "zoo.json", zoo_doc)


def _zoo_json(member_dir: Path) -> dict[str, Any]:
    try:
        doc = json.loads((member_dir / "zoo.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}
