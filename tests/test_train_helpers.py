"""Shared builders for the training tests: a tiny DATA dir on a tiny zoo target (cached)."""

from __future__ import annotations

import json
import os
from pathlib import Path

TINY = "dsv3-v1-tiny"


def tiny_target(name: str = "dsv3-v1") -> Path:
    from eagle3kit import zoo

    return zoo.get(name, size="tiny")


def headless_target(tmp: Path, name: str = "dsv3-v1") -> Path:
    """The tiny DeepSeek member as shipped before its MTP layer (main tensors only, no nextn
    layers declared), in ``tmp``: for tests that train or add a head from fresh weights."""
    import shutil

    from safetensors.torch import load_file, save_file

    src, dst = tiny_target(name), tmp / f"{name}-tiny-headless"
    shutil.copytree(src, dst)
    cfg = json.loads((src / "config.json").read_text())
    prefix = f"model.layers.{cfg['num_hidden_layers']}."
    t = load_file(str(src / "model.safetensors"))
    main = {k: v for k, v in t.items() if not k.startswith(prefix)}
    save_file(main, str(dst / "model.safetensors"), metadata={"format": "pt"})
    (dst / "config.json").write_text(json.dumps({**cfg, "num_nextn_predict_layers": 0}))
    doc = json.loads((dst / "zoo.json").read_text())
    doc.pop("mtp", None)
    doc.pop("shipped", None)
    (dst / "zoo.json").write_text(json.dumps(doc))
    return dst


def tiny_data(name: str = "dsv3-v1", n: int = 48, max_length: int = 96) -> Path:
    """A DATA dir of n zoo chat samples prepared for the tiny target (built once per home)."""
    from eagle3kit.data.prepare import prepare
    from eagle3kit.zoo import corpus as _corpus

    target = tiny_target(name)
    home = Path(os.environ["EAGLE3KIT_HOME"]) / "train-tests"
    out = home / f"data-{name}-{n}-{max_length}"
    if (out / "data.json").is_file():
        return out
    home.mkdir(parents=True, exist_ok=True)
    convs = _corpus.chat_samples(_corpus.files("lib", limit=12))[:n]
    src = home / f"convs-{n}.jsonl"
    src.write_text("".join(json.dumps(c) + "\n" for c in convs))
    prepare([src], target, out, max_length=max_length)
    return out


# the options of a fast `eagle3kit train` run on the tiny members (shapes, batch, held-out)
SMALL_RUN = (
    *("--ttt-steps", "3", "--batch-size", "4", "--max-len", "64", "--heldout", "0.125"),
    *("--eval-samples", "6", "--eval-batch", "6", "--threads", "1"),
)


def train_args(out: Path, data: Path, target: Path, *extra: str) -> list[str]:
    """A fast `eagle3kit train` command line (tiny shapes, few steps)."""
    data_opts = ("--data", str(data), "-o", str(out), "--draft-vocab-size", "96")
    return ["train", "--target", str(target), *data_opts, *SMALL_RUN, *extra]


def dflash_args(out: Path, batch: int, *extra: str) -> list[str]:
    """A fast `eagle3kit train --method dflash` command line on tiny llama-v1 (blocks of 4,
    4 anchors, 4 held-out samples)."""
    run = ("--target", str(tiny_target("llama-v1")), "--data", str(tiny_data("llama-v1")))
    shape = ("--batch-size", str(batch), "--block-size", "4", "--anchors", "4")
    held = ("--heldout", "4", "--eval-samples", "4", "--threads", "1")
    return ["train", "--method", "dflash", *run, "-o", str(out), *shape, *held, *extra]


def torchrun(n: int, *args: str, timeout: int = 900):
    """`torchrun --nproc-per-node n -m eagle3kit ARGS` on a free port (gloo ranks on the CPU,
    one thread each): the finished process."""
    import shutil
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a port nothing listens on: two runs never share one
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launcher = shutil.which("torchrun") or f"{sys.executable} -m torch.distributed.run"
    cmd = [*launcher.split(), "--nproc-per-node", str(n), "--master-port", str(port)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [*cmd, "-m", "eagle3kit", *args], env=env, capture_output=True, text=True, timeout=timeout
    )
