"""`data capture --engine vllm` against the real vLLM CPU build, compared with the in-process
capture of the same samples (issue 46).

    python benchmarks/real_engine_capture.py [--samples 8] [--dtype bfloat16]
        -> benchmarks/results/real-engine-capture.json
    python benchmarks/real_engine_capture.py --dtype float32
        -> benchmarks/results/real-engine-capture-float32.json

For llama-v1 (OLD) and llama-v2 (NEW), with the drafter of
tests/fixtures/real-engine-llama-v1-eagle3 (its aux layers, plus the probe's layers):
1. `data capture --target T --launch-command` gives the `vllm serve` line; it is started as
   printed, with the shim benchmarks/engine_shims/capture_cpu on the engine's PYTHONPATH:
   the connector's copy out of the KV cache uses CUDA streams and pinned memory, which the CPU
   build refuses (`pin_memory=True requires a CUDA or other accelerator backend`). Every record
   names the shim.
2. `data capture DATA --engine vllm --url URL` and the in-process `data capture DATA` of the
   same samples, both in --dtype (bf16, the checkpoint's own, by default; `--dtype float32`
   is passed to both verbs, so the launch line and the states checked are float32); per
   token, the cosine of every stored layer's state (fp8 aux, dequantised) between the two
   stores, and the teacher's argmax agreement.
3. `probe --features-new NEW_ENGINE --reference-features OLD_ENGINE` against the same probe
   from the in-process stores: the verdicts.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))

import _env  # noqa: E402,F401
from _results import RESULTS, write_result  # noqa: E402

from eagle3kit import zoo  # noqa: E402
from eagle3kit.live.engine_server import VllmServer, ready_state  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "real-engine-llama-v1-eagle3"
SHIM = HERE / "engine_shims" / "capture_cpu"
SHIM_NOTE = (
    "benchmarks/engine_shims/capture_cpu (sitecustomize on the engine's PYTHONPATH): the "
    "connector's CUDA stream/event and pinned-memory copy made plain host copies"
)


def cli(*args: str) -> str:
    cmd = [sys.executable, "-m", "eagle3kit", *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"eagle3kit {' '.join(map(str, args))[:200]}: {r.stderr[-600:]}")
    return r.stdout


def data_dir(work: Path, n: int) -> Path:
    from eagle3kit.zoo import corpus

    m = zoo.member("llama-v1")
    convs = corpus.chat_samples(corpus.files(m.slice, held_out=True))[:n]
    src = work / "convs.jsonl"
    src.write_text(
        "".join(json.dumps({"id": f"held-{i}", **c}) + "\n" for i, c in enumerate(convs))
    )
    out = work / "data"
    cli("data", "prepare", src, "--target", "llama-v1", "-o", out, "--max-length", "256")
    return out


def launch_args(member: str, states: Path, dtype: str = "bfloat16") -> list[str]:
    line = cli(
        "data",
        "capture",
        "--target",
        zoo.get(member),
        "--drafter",
        FIXTURE,
        "--probe-layers",
        "--launch-command",
        "--states-dir",
        states,
        "--dtype",
        dtype,
    )
    words = shlex.split(next(ln for ln in line.splitlines() if ln.startswith("vllm serve")))
    i = words.index("serve")
    return words[i + 2 :]  # after `vllm serve MODEL`


def engine_store(member: str, data: Path, work: Path, dtype: str) -> tuple[Path, dict]:
    states = work / f"states-{member}"
    states.mkdir()
    args = launch_args(member, states, dtype)
    args += ["--enforce-eager", "--max-model-len", "1024", "--served-model-name", member]
    srv = VllmServer(
        str(zoo.get(member)),
        args,
        log_path=work / f"{member}.log",
        env={"PYTHONPATH": str(SHIM)},
    )
    out = work / f"engine-{member}"
    info = {"launch_args": args}
    with srv:
        info["server_start_s"] = srv.started_s
        cli(
            "data",
            "capture",
            data,
            "--target",
            zoo.get(member),
            "--drafter",
            FIXTURE,
            "--probe-layers",
            "--vocab",
            FIXTURE,
            "--engine",
            "vllm",
            "--url",
            srv.url,
            "--states-dir",
            states,
            "-o",
            out,
            "--heldout-data",
            "--dtype",
            dtype,
        )
    return out, info


def local_store(member: str, data: Path, work: Path, dtype: str) -> Path:
    out = work / f"local-{member}"
    cli(
        "data",
        "capture",
        data,
        "--target",
        zoo.get(member),
        "--drafter",
        FIXTURE,
        "--probe-layers",
        "--vocab",
        FIXTURE,
        "--dtype",
        dtype,
        "-o",
        out,
        "--heldout-data",
    )
    return out


def compare(a: Path, b: Path) -> dict:
    import torch

    from eagle3kit.data.store import FeatureStore

    sa, sb = FeatureStore(a), FeatureStore(b)
    assert len(sa) == len(sb) and sa.layers == sb.layers
    cos, agree, tokens, ids_equal = [], 0, 0, True
    for i in range(len(sa)):
        fa, fb = sa.get([i]), sb.get([i])
        ids_equal &= bool(torch.equal(fa.input_ids, fb.input_ids))
        n = int(fa.attention_mask.sum())
        h = fa.aux.shape[-1] // len(sa.layers)
        xa = fa.aux[0, :n].reshape(n, -1, h)
        xb = fb.aux[0, :n].reshape(n, -1, h)
        cos.append(torch.nn.functional.cosine_similarity(xa, xb, dim=-1))  # [n, layers]
        agree += int((fa.target_argmax[0, :n] == fb.target_argmax[0, :n]).sum())
        tokens += n
    c = torch.cat(cos)
    return {
        "samples": len(sa),
        "tokens": tokens,
        "layers": sa.layers,
        "input_ids_equal": ids_equal,
        "cosine_min": float(c.min()),
        "cosine_mean": float(c.mean()),
        "cosine_min_per_layer": [float(x) for x in c.min(dim=0).values],
        "tokens_below_0.999": int((c.min(dim=1).values < 0.999).sum()),
        "teacher_argmax_agreement": agree / tokens,
    }


def probe(new: Path, old: Path) -> dict:
    doc = json.loads(
        cli(
            "probe",
            "--drafter",
            FIXTURE,
            "--features-new",
            new,
            "--reference-features",
            old,
            "--json",
        )
    )
    return {"verdict": doc.get("verdict"), "retention": doc.get("retention")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    tail = "" if a.dtype == "bfloat16" else f"-{a.dtype}"
    a.out = a.out or str(RESULTS / f"real-engine-capture{tail}.json")
    state = ready_state()
    if not state["ready"]:
        raise SystemExit(state["reason"])
    work = Path(tempfile.mkdtemp(prefix="real-engine-capture-"))
    data = data_dir(work, a.samples)
    out: dict = {"engine": state["versions"], "shim": SHIM_NOTE, "samples": a.samples}
    out["dtype"] = a.dtype
    stores = {}
    for member in ("llama-v1", "llama-v2"):
        eng, info = engine_store(member, data, work, a.dtype)
        loc = local_store(member, data, work, a.dtype)
        stores[member] = (eng, loc)
        out[member] = {**info, "engine_vs_in_process": compare(eng, loc)}
        print(member, out[member]["engine_vs_in_process"], flush=True)
    (e2, l2), (e1, l1) = stores["llama-v2"], stores["llama-v1"]
    out["probe"] = {"engine_stores": probe(e2, e1), "in_process_stores": probe(l2, l1)}
    print(out["probe"], flush=True)
    write_result(a.out, "eagle3kit.real-engine-capture", out)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
