"""Engine capture as a job: kill -9 and resume, and the memory bound (subprocesses; slow)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fake_vllm_capture import FakeVllmCapture
from kill_helpers import kill_at
from test_engine_capture import TOPK, compare_stores, launch
from test_store import check_store, make_data

pytestmark = pytest.mark.slow
RSS = (
    "import resource, runpy, sys\n"
    "sys.argv = ['eagle3kit', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('eagle3kit', run_name='__main__')\n"
    "finally:\n"
    "    print('MAXRSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("engine_jobs")
    model_dir = str(zoo.get("llama-v1", size="tiny"))
    tm = TargetModel.from_pretrained(model_dir)
    ids = make_data(tmp / "data", tm.vocab_size, n=24, seed=1)
    yield {"model": model_dir, "tmp": tmp, "ids": ids, "tm": tm}
    torch.set_num_threads(n)


def _argv(env, url, states, out, target=None) -> list[str]:
    return [
        "data",
        "capture",
        str(env["tmp"] / "data"),
        "--target",
        target or env["model"],
        "--engine",
        "vllm",
        "--url",
        url,
        "--states-dir",
        str(states),
        "-o",
        str(out),
        "--topk",
        str(TOPK),
        "--shard-tokens",
        "40",
        "--batch-tokens",
        "24",
        "--concurrency",
        "1",
        "--timeout",
        "10",
        "--lock-timeout",
        "10",
        "--json",
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _reference(env, out: Path) -> None:
    from eagle3kit.data.store import capture

    capture(env["tmp"] / "data", env["tm"], out, topk=TOPK, shard_tokens=40)


@pytest.mark.kill
def test_kill_9_mid_capture_then_resume(cli, env, tmp_path):
    states, store = tmp_path / "hs", tmp_path / "store"
    states.mkdir()
    spec, kv, _ = launch(cli, env, states)
    with FakeVllmCapture(env["model"], spec, kv, lifetime=120) as fake:
        cmd = [sys.executable, "-m", "eagle3kit", *_argv(env, fake.url, states, store)]
        # just after the first shard is listed (the manifest's second write; core/stops.py)
        kill_at(cmd, f"after:{store / 'manifest.json'}#2", tmp_path, _env())
        killed = json.loads((store / "manifest.json").read_text())
        assert killed["complete"] is False and 0 < killed["samples"] < len(env["ids"])
        sent = fake.requests
        r = cli(*_argv(env, fake.url, states, store))
        assert r.code == 0, r.err
        # the rerun asks only for the samples after the last listed shard
        assert fake.requests - sent == len(env["ids"]) - killed["samples"]
    from eagle3kit.data.prepared import load_prepared

    data_tokens = int(load_prepared(env["tmp"] / "data").lengths().sum())
    check_store(store, env["ids"], data_tokens)  # nothing duplicated, missing or corrupt
    _reference(env, tmp_path / "inproc")
    compare_stores(tmp_path / "inproc", store)


def _headless(env, folder: Path) -> Path:
    """The target as engine capture needs it: config, tokenizer, and a safetensors holding
    only model.norm.weight and lm_head.weight. Its config claims an intermediate size of
    2,000,000: transformers would allocate 3 x 32 x 2e6 x 8 layers x 4 bytes = 6.1 GB to
    load it; engine capture never builds the model."""
    from safetensors.torch import load_file, save_file

    src = Path(env["model"])
    folder.mkdir()
    for f in src.iterdir():
        if f.name.startswith("tokenizer") or f.name == "special_tokens_map.json":
            shutil.copy(f, folder / f.name)
    cfg = json.loads((src / "config.json").read_text())
    cfg["intermediate_size"] = 2_000_000
    (folder / "config.json").write_text(json.dumps(cfg))
    full = load_file(str(src / "model.safetensors"))
    keep = {k: full[k] for k in ("model.norm.weight", "lm_head.weight")}
    save_file(keep, str(folder / "model.safetensors"))
    return folder


def _maxrss_mb(argv: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    p = subprocess.run(
        [sys.executable, "-c", RSS, *argv],
        env=_env(),
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )
    kb = next(int(x.split()[1]) for x in p.stderr.splitlines() if x.startswith("MAXRSS_KB"))
    return kb / 1024, p


def test_memory_bound_only_norm_and_lm_head(cli, env, tmp_path):
    """Peak RSS of an engine capture on a target dir whose other weights are absent from disk
    stays within 100 MB of the same CLI process that only imports what capture imports
    (`data capture --help` after importing torch, safetensors and eagle3kit.live.capture)."""
    head = _headless(env, tmp_path / "headless")
    states = tmp_path / "hs"
    states.mkdir()
    spec, kv, _ = launch(cli, env, states)
    with FakeVllmCapture(env["model"], spec, kv) as fake:
        argv = _argv(env, fake.url, states, tmp_path / "store", target=str(head))
        used, p = _maxrss_mb(argv, tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    base_code = (
        "import torch, safetensors.torch, eagle3kit.live.capture, eagle3kit.data.store\n" + RSS
    )
    b = subprocess.run(
        [sys.executable, "-c", base_code, "data", "capture", "--help"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    base = next(int(x.split()[1]) for x in b.stderr.splitlines() if x.startswith("MAXRSS_KB"))
    print(f"peak RSS: capture {used:.0f} MB, imports alone {base / 1024:.0f} MB")
    assert used - base / 1024 < 100, (used, base / 1024)
    _reference(env, tmp_path / "inproc")
    compare_stores(tmp_path / "inproc", tmp_path / "store")


def test_train_from_engine_store_never_loads_the_target(cli, env, tmp_path):
    """`train --features` on an engine-captured store, with a target dir transformers cannot
    even build (an unknown model_type, no decoder weights): only its config and input
    embedding are read."""
    from safetensors.torch import load_file, save_file

    from eagle3kit.core.errors import Eagle3Error
    from eagle3kit.model.target import TargetModel

    states, store = tmp_path / "hs", tmp_path / "store"
    states.mkdir()
    spec, kv, _ = launch(cli, env, states)
    with FakeVllmCapture(env["model"], spec, kv) as fake:
        r = cli(*_argv(env, fake.url, states, store))
        assert r.code == 0, r.err
    src, head = Path(env["model"]), tmp_path / "target"
    head.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(model_type="kimi_k25_unknown", architectures=["KimiK25ForConditionalGeneration"])
    (head / "config.json").write_text(json.dumps(cfg))
    full = load_file(str(src / "model.safetensors"))
    names = ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight")
    save_file({k: full[k] for k in names}, str(head / "model.safetensors"))
    with pytest.raises((Eagle3Error, ValueError)):  # transformers: unknown model type
        TargetModel.from_pretrained(head)  # the in-process path cannot load it
    r = cli(
        "train",
        "--target",
        head,
        "--features",
        store,
        "-o",
        tmp_path / "run",
        "--steps",
        "2",
        "--ttt-steps",
        "2",
        "--batch-size",
        "4",
        "--max-len",
        "32",
        "--heldout",
        "0.125",
        "--eval-samples",
        "3",
        "--eval-batch",
        "3",
        "--threads",
        "1",
        "--json",
    )
    assert r.code == 0, r.err
    assert (tmp_path / "run" / "best" / "model.safetensors").is_file()
