"""Does eagle3kit run right on a GPU? One line per check; about a minute on one GPU with the zoo.

    python benchmarks/gpu_check.py [--device cuda:0] [--members llama-v1,dsv3-v1]
        [--tokens 48] [--no-tests] [--json results.json]

CI runs on CPUs only, so device bugs (a generator on the wrong device, a CPU tensor fed to a
CUDA model, float64 where the backend lacks it) stay invisible there. This script runs, on
the zoo's tiny members (shipped with the package):

1. greedy decoding, chain and tree, on the GPU: the tokens must equal the target's own greedy
   output computed on the CPU (speculative greedy decoding is lossless, so any difference is
   a device bug or float drift; the first differing position is printed);
2. sampled decoding, chain and tree (temperature 0.8, top-p 0.95) on the GPU: it runs, and the
   same seed gives the same tokens twice;
3. `data regenerate` with the local target on the GPU, greedy (same text as on the CPU) and
   sampled (runs, reproducible);
4. a training step with the target in bfloat16 on the GPU (`train --target-dtype bfloat16`):
   finite loss;
5. a 2-rank FSDP2 step over NCCL (`torchrun --nproc-per-node 2 -m eagle3kit train`), when the
   machine has two GPUs (NCCL refuses two ranks on one device; the check then says so);
6. the tests marked `gpu` (`pytest -m gpu tests/`).

Without CUDA it says so and exits 0. Exit 1 when a check fails. ``--json`` writes every
check's name, status, detail and seconds, plus the environment (benchmarks/_env.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _env import environment, environment_info  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ["def parse(text):", "import os\n", "class Node:", "for i in range(10):"]
RESULTS: list[dict] = []


def check(name: str, fn: Callable[[], str]) -> bool:
    """Run one check; print `PASS|FAIL|SKIP name: detail (s)`; record it."""
    t0 = time.perf_counter()
    try:
        detail = fn()
        status = "SKIP" if detail.startswith("skipped") else "PASS"
    except Exception as e:  # a check that crashes is a failed check, with its last frame
        tb = traceback.extract_tb(e.__traceback__)[-1]
        detail = f"{type(e).__name__}: {e} ({Path(tb.filename).name}:{tb.lineno})"
        status = "FAIL"
    dt = time.perf_counter() - t0
    print(f"{status} {name}: {' '.join(detail.split())} ({dt:.1f} s)", flush=True)
    RESULTS.append({"check": name, "status": status, "detail": detail, "seconds": round(dt, 2)})
    return status != "FAIL"


# -- the models ------------------------------------------------------------------------------
def random_drafter(target, seed: int = 1):
    """A random drafter shaped for `target` (lossless decoding does not need a good one)."""
    from eagle3kit.core.spec import DraftSpec
    from eagle3kit.model.drafter import Eagle3Drafter

    h = target.hidden_size
    spec = DraftSpec(
        hidden_size=h,
        intermediate_size=2 * h,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=h // 2,
        vocab_size=target.vocab_size,
        draft_vocab_size=target.vocab_size,
        target_hidden_size=h,
        aux_layers=target.aux_layers,
        dtype="float32",
    )
    torch.manual_seed(seed)
    return Eagle3Drafter(spec).eval()


def pair(path: str, device: str):
    """(target, drafter) on `device`, float32; the same drafter weights on every device."""
    from eagle3kit.model.target import TargetModel

    tm = TargetModel.from_pretrained(path, device=device)
    d = random_drafter(tm).to(device)
    d.set_embedding(tm.embed_tokens.weight)
    return tm, d


def first_diff(a: list[int], b: list[int]) -> int | None:
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    return n if n is not None or len(a) == len(b) else min(len(a), len(b))


# -- the checks ------------------------------------------------------------------------------
def decode_checks(member: str, path: str, dev: str, tokens: int) -> bool:
    from eagle3kit.decode import Sampling, TreeShape, greedy_generate, speculative_generate

    cpu_t, _ = pair(path, "cpu")
    gpu_t, gpu_d = pair(path, dev)
    prompts = [cpu_t.tokenizer(p)["input_ids"] for p in PROMPTS]
    ref = [greedy_generate(cpu_t, p, max_new_tokens=tokens).tokens for p in prompts]
    ok = True
    for name, tree in (("chain", None), ("tree", TreeShape(4, 16))):

        def greedy(tree=tree) -> str:
            for p, want in zip(prompts, ref, strict=True):
                got = speculative_generate(gpu_t, gpu_d, p, max_new_tokens=tokens, tree=tree)
                n = first_diff(got.tokens, want)
                if n is not None:
                    raise AssertionError(f"differs from the CPU's greedy at token {n} of {p}")
            return f"{len(prompts)} prompts x {tokens} tokens identical to the CPU's greedy"

        def sampled(tree=tree) -> str:
            s = Sampling(temperature=0.8, top_p=0.95)
            runs = [
                speculative_generate(
                    gpu_t, gpu_d, prompts[0], max_new_tokens=tokens, tree=tree, sampling=s, seed=3
                ).tokens
                for _ in range(2)
            ]
            if runs[0] != runs[1]:
                raise AssertionError("the same seed gave different tokens")
            return f"{len(runs[0])} tokens, reproducible with the same seed"

        ok &= check(f"{member} greedy {name} on {dev} vs cpu", greedy)
        ok &= check(f"{member} sampled {name} on {dev}", sampled)
    gpu_t.close()
    return ok


def regenerate_checks(member: str, path: str, dev: str, work: Path) -> bool:
    from eagle3kit.data.regenerate import regenerate
    from eagle3kit.model.target import TargetModel

    inp = work / f"{member}-prompts.jsonl"
    inp.write_text(
        "".join(json.dumps({"messages": [{"role": "user", "content": p}]}) + "\n" for p in PROMPTS)
    )

    def run(device: str, temperature: float, name: str) -> list[str]:
        tm = TargetModel.from_pretrained(path, device=device)
        out = work / f"{member}-{name}.jsonl"
        res = regenerate(inp, out, target=tm, max_tokens=16, temperature=temperature)
        if res.failed or res.done != len(PROMPTS):
            raise AssertionError(f"{res.done} done, failed: {res.errors}")
        lines = [json.loads(x) for x in out.read_text().splitlines()]
        return [r["messages"][-1]["content"] for r in sorted(lines, key=lambda r: r["id"])]

    def greedy() -> str:
        if run(dev, 0.0, "greedy-gpu") != run("cpu", 0.0, "greedy-cpu"):
            raise AssertionError("greedy answers differ between the GPU and the CPU")
        return f"{len(PROMPTS)} answers identical to the CPU's"

    def sampled() -> str:
        if run(dev, 0.8, "sampled-a") != run(dev, 0.8, "sampled-b"):
            raise AssertionError("a rerun with the same seed gave different answers")
        return f"{len(PROMPTS)} sampled answers, reproducible"

    ok = check(f"{member} regenerate greedy on {dev} vs cpu", greedy)
    return check(f"{member} regenerate sampled on {dev}", sampled) and ok


def prepared_data(path: str, work: Path) -> str:
    from eagle3kit.data.prepare import prepare
    from eagle3kit.zoo.corpus import chat_samples, files, spaced

    convs = spaced(chat_samples(files("lib", held_out=True), max_chars=300), 16)
    src = work / "train.jsonl"
    src.write_text("".join(json.dumps(c) + "\n" for c in convs))
    out = work / "DATA"
    if not out.exists():
        prepare([str(src)], path, out, max_length=256)
    return str(out)


def train_args(path: str, data: str, out: Path, dev: str, dtype: str) -> list[str]:
    return [
        "train",
        "--target",
        path,
        "--data",
        data,
        "-o",
        str(out),
        "--steps",
        "2",
        "--batch-size",
        "4",
        "--max-len",
        "128",
        "--ttt-steps",
        "2",
        "--eval-every",
        "2",
        "--eval-samples",
        "4",
        "--device",
        dev,
        "--target-dtype",
        dtype,
        "--json",
    ]


def train_checks(path: str, dev: str, work: Path) -> bool:
    data = prepared_data(path, work)

    def bf16() -> str:
        cmd = [
            sys.executable,
            "-m",
            "eagle3kit",
            *train_args(path, data, work / "bf16", dev, "bfloat16"),
        ]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=_env())
        if p.returncode != 0:
            raise AssertionError(p.stderr.strip().splitlines()[-1] if p.stderr else p.returncode)
        rows = [json.loads(x) for x in (work / "bf16" / "metrics.jsonl").read_text().splitlines()]
        loss = rows[-1]["loss"]
        if not all(map(_finite, loss)):
            raise AssertionError(f"loss not finite: {loss}")
        return f"2 steps, target in bfloat16, loss {[round(x, 3) for x in loss]}"

    def fsdp2() -> str:
        if not dev.startswith("cuda"):
            return f"skipped: --device {dev} (this check is for NCCL)"
        if torch.cuda.device_count() < 2:
            return "skipped: 1 GPU (NCCL refuses two ranks on one device; needs 2 GPUs)"
        torchrun = shutil.which("torchrun") or f"{sys.executable} -m torch.distributed.run"
        cmd = [
            *torchrun.split(),
            "--nproc-per-node",
            "2",
            "-m",
            "eagle3kit",
            *train_args(path, data, work / "fsdp2", "cuda", "bfloat16"),
        ]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=_env())
        if p.returncode != 0:
            raise AssertionError(p.stderr.strip().splitlines()[-1] if p.stderr else p.returncode)
        summary = json.loads(p.stdout)
        if summary.get("world_size") != 2:
            raise AssertionError(f"world_size {summary.get('world_size')}, expected 2")
        return "2 ranks over nccl, 2 steps"

    ok = check(f"train step bf16 on {dev}", bf16)
    return check("train FSDP2 2 ranks nccl", fsdp2) and ok


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


def _env() -> dict[str, str]:
    src = str(ROOT / "src")
    pp = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{pp}" if pp else src}


def gpu_tests() -> str:
    if not (ROOT / "tests").is_dir():
        return "skipped: no tests/ beside benchmarks/"
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT, env=_env())
    last = (p.stdout.strip().splitlines() or ["no output"])[-1]
    if p.returncode not in (0, 5):  # 5: nothing collected
        raise AssertionError(last)
    return last


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", help="cpu runs the checks on the CPU (a dry run)")
    ap.add_argument("--members", default="llama-v1,dsv3-v1", help="zoo members (tiny size)")
    ap.add_argument("--tokens", type=int, default=48, help="new tokens per decoded prompt")
    ap.add_argument("--no-tests", action="store_true", help="skip `pytest -m gpu`")
    ap.add_argument("--json", help="write the checks and the environment here")
    a = ap.parse_args()
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            f"gpu_check: no CUDA device (torch {torch.__version__}, built for CUDA "
            f"{torch.version.cuda}); nothing to check here, run it on a GPU machine"
        )
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False  # compare float32 with float32
    torch.backends.cudnn.allow_tf32 = False
    name = torch.cuda.get_device_name(a.device) if a.device.startswith("cuda") else a.device
    print(f"gpu_check on {name} | {environment()}", flush=True)
    from eagle3kit import zoo

    ok = True
    with tempfile.TemporaryDirectory(prefix="gpu_check.") as tmp:
        work = Path(tmp)
        for m in a.members.split(","):
            path = str(zoo.get(m, size="tiny"))
            ok &= decode_checks(m, path, a.device, a.tokens)
            ok &= regenerate_checks(m, path, a.device, work)
        first = str(zoo.get(a.members.split(",")[0], size="tiny"))
        ok &= train_checks(first, a.device, work)
        if not a.no_tests:
            ok &= check("pytest -m gpu", gpu_tests)
    if a.json:
        doc = {
            "kind": "eagle3kit.gpu_check",
            "schema": 1,
            "environment": environment_info(),
            "ok": bool(ok),
            "checks": RESULTS,
        }
        Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"gpu_check: {'all checks passed' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
