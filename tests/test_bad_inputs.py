"""The bad-input battery: one case per mistake a user makes, for every verb.

Each case runs the CLI in-process on a small world of files (a tiny zoo target, a drafter for
it, a prepared DATA dir, broken and foreign files) and asserts the project's convention
for bad input: exit code 2, exactly one line on stderr (``eagle3kit: error: ...``, no
traceback) that names the file or option at fault, and nothing written: every file of the
world and of the target dir hashes the same before and after, and no new file appears.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import run_cli

sys.path.insert(0, str(Path(__file__).parent))


# -- the world -------------------------------------------------------------------------------
@dataclass
class World:
    root: Path
    paths: dict[str, str]

    def fmt(self, args: tuple[str, ...], case: str) -> list[str]:
        vals = {**self.paths, "OUT": str(self.root / "outs" / case)}
        return [a.format(**vals) for a in args]


def _free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _write(p: Path, text: str | bytes) -> str:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(p)


def _conv(user: str, answer: str | None) -> str:
    msgs = [{"role": "user", "content": user}]
    if answer is not None:
        msgs.append({"role": "assistant", "content": answer})
    return json.dumps({"messages": msgs}) + "\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    import torch
    from ckpt_helpers import random_drafter, tiny_spec
    from decode_helpers import chat_jsonl, new_drafter, save_drafter_dir
    from safetensors.torch import save_file

    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("bad_inputs")
    (root / "outs").mkdir()
    t = zoo.get("llama-v1", size="tiny")
    tm = TargetModel.from_pretrained(t)
    p: dict[str, str] = {"T": str(t), "W": str(root), "NOPE": str(root / "no-such-thing")}
    p["D"] = save_drafter_dir(new_drafter(tm, seed=1), root / "drafter")
    p["DX"] = str(random_drafter(root / "drafter-h64", tiny_spec(), "sglang"))  # hidden 64
    p["CONV"] = chat_jsonl(root / "conv.jsonl", n=4, max_chars=200)
    p["EMPTY"] = _write(root / "empty.jsonl", "")
    p["BADJ"] = _write(root / "bad.jsonl", "{not json\n[1, 2\n")
    p["NOASST"] = _write(root / "prompts.jsonl", _conv("hi", None) + _conv("and?", None))
    p["TXT"] = _write(root / "notes.txt", "just some text\n")
    p["BADJSON"] = _write(root / "bad.json", "{")
    p["EMPTYST"] = _write(root / "empty.safetensors", b"")
    # pickles: refused, never loaded (a payload that would write a file if unpickled)
    pkl = root / "pickled"
    _write(pkl / "config.json", (Path(p["D"]) / "config.json").read_text())
    _write(pkl / "pytorch_model.bin", b"\x80\x04cos\nsystem\n(S'touch PWNED'\ntR.")
    p["PKL"], p["BIN"] = str(pkl), str(pkl / "pytorch_model.bin")
    _write(root / "model.pt", b"\x80\x04cos\nsystem\n(S'touch PWNED'\ntR.")
    p["PT"] = str(root / "model.pt")
    p["BADCFG"] = _write(root / "badcfg" / "config.json", "{")
    p["BADCFG"] = str(root / "badcfg")
    # a sibling target of another hidden size (config only: refused before any weight)
    wide = root / "wide"
    shutil.copytree(t, wide)
    cfg = json.loads((wide / "config.json").read_text())
    cfg["hidden_size"] = 2 * cfg["hidden_size"]
    (wide / "config.json").write_text(json.dumps(cfg))
    p["WIDE"] = str(wide)
    # a target of a model_type transformers does not know
    unk = root / "unknown-type"
    shutil.copytree(t, unk)
    cfg = json.loads((unk / "config.json").read_text())
    cfg["model_type"] = "no-such-architecture"
    (unk / "config.json").write_text(json.dumps(cfg))
    p["UNKTYPE"] = str(unk)
    # a DATA dir, a broken one and one recorded for another tokenizer
    r = run_cli("data", "prepare", p["CONV"], "--target", str(t), "-o", str(root / "DATA"))
    assert r.code == 0, r.err
    p["DATA"] = str(root / "DATA")
    # a drafter whose fc weight has the wrong shape, and one whose weights are int32
    for name, change in (("drafter-shape", "shape"), ("drafter-dtype", "dtype")):
        p["D" + change.upper()] = _broken_drafter(Path(p["D"]), root / name, change)
    bad = root / "DATA-broken"
    shutil.copytree(root / "DATA", bad)
    (bad / "data.json").write_text("{")
    p["BADDATA"] = str(bad)
    foreign = root / "DATA-foreign"
    shutil.copytree(root / "DATA", foreign)
    meta = json.loads((foreign / "data.json").read_text())
    meta["target"] = {**meta["target"], "vocab_size": 1024, "tokenizer_size": 1024}
    (foreign / "data.json").write_text(json.dumps(meta))
    p["FOREIGN"] = str(foreign)
    # a vocab file with the wrong dtype and shape
    save_file(
        {"d2t": torch.zeros(7, dtype=torch.float32), "t2d": torch.zeros(3, dtype=torch.float32)},
        str(root / "vocab-float.safetensors"),
    )
    p["BADVOCAB"] = str(root / "vocab-float.safetensors")
    # prior outputs the commands must leave alone
    p["PRIOR"] = str(root / "prior")
    _write(root / "prior" / "keep.txt", "an earlier result\n")
    p["PRIORJ"] = _write(root / "prior.jsonl", "this is not a finished sample\n")
    p["RUNEMPTY"] = str(root / "run-empty")
    (root / "run-empty").mkdir()
    p["RUNBAD"] = str(root / "run-bad")
    _write(root / "run-bad" / "bench.json", "{")
    r = run_cli(*PLAN, "--acceptance", "0.7", "--json")
    assert r.code == 0, r.err
    p["RUNOK"] = _write(root / "run-ok" / "plan.json", r.out)
    p["RUNOK"] = str(root / "run-ok")
    p["PORT"] = str(_free_port())
    tm.close()
    return World(root, p)


def _broken_drafter(src: Path, out: Path, change: str) -> str:
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, out)
    f = next(out.glob("*.safetensors"))
    t = load_file(str(f))
    name = next(n for n in t if n.endswith("fc.weight"))
    if change == "shape":
        t[name] = t[name][:, :-1].contiguous()
    else:
        t = {n: v.to(torch_int32()) if v.is_floating_point() else v for n, v in t.items()}
    save_file(t, str(f))
    return str(out)


def torch_int32():
    import torch

    return torch.int32


NO_CUDA = pytest.mark.skipif(
    "__import__('torch').cuda.is_available()", reason="CUDA present: --device cuda is valid"
)


def _digest(root: Path) -> dict[str, str]:
    """Every file and dir under root: relative path -> sha256 of its bytes ("dir" for dirs)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "dir"
        for f in filenames:
            full = os.path.join(dirpath, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


# -- the cases -------------------------------------------------------------------------------
def C(cid: str, must: str, *args: str, marks=()):
    """A case: its id, a text the error line must contain (the file or option), the args."""
    return pytest.param(cid, must, args, id=cid, marks=marks)


GEN = ("generate", "--target", "{T}", "--drafter", "{D}", "--max-new-tokens", "4")
EVAL = ("eval", "--target", "{T}", "--drafter", "{D}", "--data", "{DATA}")
BENCH = ("bench", "--target", "{T}", "--drafter", "{D}", "--max-new-tokens", "4")
PROBE = ("probe", "--drafter", "{D}", "--target", "{T}", "--samples", "2")
PROBE += ("--online-prompts", "0")
TRAIN = ("train", "--target", "{T}", "-o", "{OUT}", "--steps", "1", "--batch-size", "2")
PREP = ("data", "prepare", "--target", "{T}")
REGEN = ("data", "regenerate", "{CONV}", "--max-tokens", "2")
CAPTURE = ("data", "capture", "{DATA}", "--target", "{T}")
PLAN = ("plan", "--baseline-tps", "80", "--cycle-ms", "30")

CASES = [
    # inspect
    C("inspect-missing", "no-such-thing", "inspect", "{NOPE}"),
    C("inspect-empty-safetensors", "empty.safetensors", "inspect", "{EMPTYST}"),
    C("inspect-pickle-dir", "pytorch_model.bin", "inspect", "{PKL}"),
    C("inspect-pickle-file", "pytorch_model.bin", "inspect", "{BIN}"),
    C("inspect-pt-file", "model.pt", "inspect", "{PT}"),
    C("inspect-bad-config", "config.json", "inspect", "{BADCFG}"),
    C("inspect-text-file", "notes.txt", "inspect", "{TXT}"),
    # compat
    C("compat-missing-other", "no-such-thing", "compat", "{D}", "{NOPE}"),
    C("compat-pickle", "pytorch_model.bin", "compat", "{PKL}", "{T}"),
    C("compat-bad-config", "config.json", "compat", "{D}", "{BADCFG}"),
    C("compat-unknown-engine", "--engine", "compat", "{D}", "{T}", "--engine", "tgi"),
    C("compat-unknown-version", "--engine", "compat", "{D}", "{T}", "--engine", "sglang@abc"),
    # convert
    C("convert-missing", "no-such-thing", "convert", "{NOPE}", "--to", "vllm", "-o", "{OUT}"),
    C("convert-unknown-layout", "--to", "convert", "{D}", "--to", "tgi", "-o", "{OUT}"),
    C("convert-pickle", "pytorch_model.bin", "convert", "{PKL}", "--to", "vllm", "-o", "{OUT}"),
    C("convert-out-inside-input", "drafter", "convert", "{D}", "--to", "vllm", "-o", "{D}/sub"),
    C("convert-out-is-input", "drafter", "convert", "{D}", "--to", "vllm", "-o", "{D}"),
    C("convert-out-nonempty", "prior", "convert", "{D}", "--to", "vllm", "-o", "{PRIOR}"),
    C(
        "convert-embed-missing",
        "no-such-thing",
        "convert",
        "{D}",
        "--to",
        "vllm",
        "-o",
        "{OUT}",
        "--embed-from",
        "{NOPE}",
    ),
    C(
        "convert-verifier-missing",
        "no-such-thing",
        "convert",
        "{D}",
        "--to",
        "vllm",
        "-o",
        "{OUT}",
        "--verifier",
        "{NOPE}",
    ),
    # plan
    C("plan-acceptance-above-1", "--acceptance", *PLAN, "--acceptance", "1.5"),
    C(
        "plan-negative-tps",
        "--baseline-tps",
        "plan",
        "--baseline-tps",
        "-5",
        "--cycle-ms",
        "30",
        "--acceptance",
        "0.7",
    ),
    C(
        "plan-zero-cycle",
        "--cycle-ms",
        "plan",
        "--baseline-tps",
        "80",
        "--cycle-ms",
        "0",
        "--acceptance",
        "0.7",
    ),
    C("plan-depth-zero", "--depth", *PLAN, "--acceptance", "0.7", "--depth", "0"),
    C("plan-acceptance-file-missing", "no-such-thing", *PLAN, "--acceptance-file", "{NOPE}"),
    C("plan-acceptance-file-bad-json", "bad.json", *PLAN, "--acceptance-file", "{BADJSON}"),
    C("plan-from-missing", "no-such-thing", "plan", "--from", "{NOPE}"),
    C("plan-from-bad-json", "bad.json", "plan", "--from", "{BADJSON}"),
    # zoo
    C("zoo-build-unknown", "gpt-5", "zoo", "build", "gpt-5", "--size", "tiny", "-o", "{RUNEMPTY}"),
    C(
        "zoo-build-bad-size",
        "--size",
        "zoo",
        "build",
        "llama-v1",
        "--size",
        "huge",
        "-o",
        "{RUNEMPTY}",
    ),
    C(
        "zoo-build-into-files",
        "prior",
        "zoo",
        "build",
        "llama-v1",
        "--size",
        "tiny",
        "-o",
        "{PRIOR}",
    ),
    C("zoo-verify-not-a-build", "zoo.json", "zoo", "verify", "{PRIOR}"),
    C("zoo-list-bad-size", "--size", "zoo", "list", "--size", "huge"),
    # data prepare
    C("prepare-missing-input", "no-such-thing", *PREP, "{NOPE}", "-o", "{OUT}"),
    C("prepare-empty-input", "empty.jsonl", *PREP, "{EMPTY}", "-o", "{OUT}"),
    C("prepare-bad-json-only", "bad.jsonl", *PREP, "{BADJ}", "-o", "{OUT}"),
    C("prepare-no-assistant", "prompts.jsonl", *PREP, "{NOASST}", "-o", "{OUT}"),
    C(
        "prepare-target-missing",
        "no-such-thing",
        "data",
        "prepare",
        "{CONV}",
        "--target",
        "{NOPE}",
        "-o",
        "{OUT}",
    ),
    C(
        "prepare-target-is-file",
        "notes.txt",
        "data",
        "prepare",
        "{CONV}",
        "--target",
        "{TXT}",
        "-o",
        "{OUT}",
    ),
    C(
        "prepare-max-length-zero",
        "--max-length",
        *PREP,
        "{CONV}",
        "-o",
        "{OUT}",
        "--max-length",
        "0",
    ),
    C("prepare-out-is-input", "conv.jsonl", *PREP, "{CONV}", "-o", "{CONV}"),
    C("prepare-out-not-data", "prior", *PREP, "{CONV}", "-o", "{PRIOR}"),
    C(
        "prepare-template-kwargs",
        "--template-kwargs",
        *PREP,
        "{CONV}",
        "-o",
        "{OUT}",
        "--template-kwargs",
        "{{nope",
    ),
    C(
        "prepare-chat-template-missing",
        "no-such-thing",
        *PREP,
        "{CONV}",
        "-o",
        "{OUT}",
        "--chat-template",
        "{NOPE}",
    ),
    # data vocab
    C(
        "vocab-missing-data",
        "no-such-thing",
        "data",
        "vocab",
        "{NOPE}",
        "--draft-vocab-size",
        "8",
        "-o",
        "{OUT}.safetensors",
    ),
    C(
        "vocab-data-is-file",
        "notes.txt",
        "data",
        "vocab",
        "{TXT}",
        "--draft-vocab-size",
        "8",
        "-o",
        "{OUT}.safetensors",
    ),
    C(
        "vocab-broken-data",
        "data.json",
        "data",
        "vocab",
        "{BADDATA}",
        "--draft-vocab-size",
        "8",
        "-o",
        "{OUT}.safetensors",
    ),
    C(
        "vocab-size-zero",
        "--draft-vocab-size",
        "data",
        "vocab",
        "{DATA}",
        "--draft-vocab-size",
        "0",
        "-o",
        "{OUT}.safetensors",
    ),
    C(
        "vocab-size-too-big",
        "--draft-vocab-size",
        "data",
        "vocab",
        "{DATA}",
        "--draft-vocab-size",
        "99999",
        "-o",
        "{OUT}.safetensors",
    ),
    C(
        "vocab-out-is-dir",
        "prior",
        "data",
        "vocab",
        "{DATA}",
        "--draft-vocab-size",
        "8",
        "-o",
        "{PRIOR}",
    ),
    # data regenerate
    C(
        "regen-missing-input",
        "no-such-thing",
        "data",
        "regenerate",
        "{NOPE}",
        "--target",
        "{T}",
        "-o",
        "{OUT}.jsonl",
    ),
    C(
        "regen-input-is-dir",
        "prior",
        "data",
        "regenerate",
        "{PRIOR}",
        "--target",
        "{T}",
        "-o",
        "{OUT}.jsonl",
    ),
    C(
        "regen-empty-input",
        "empty.jsonl",
        "data",
        "regenerate",
        "{EMPTY}",
        "--target",
        "{T}",
        "-o",
        "{OUT}.jsonl",
    ),
    C("regen-neither", "--server", *REGEN, "-o", "{OUT}.jsonl"),
    C(
        "regen-both",
        "--server",
        *REGEN,
        "-o",
        "{OUT}.jsonl",
        "--target",
        "{T}",
        "--server",
        "http://127.0.0.1:{PORT}",
    ),
    C(
        "regen-server-down",
        "--server",
        *REGEN,
        "-o",
        "{OUT}.jsonl",
        "--server",
        "http://127.0.0.1:{PORT}",
        "--retries",
        "0",
    ),
    C("regen-server-not-http", "--server", *REGEN, "-o", "{OUT}.jsonl", "--server", "ftp://x"),
    C(
        "regen-max-tokens-zero",
        "--max-tokens",
        "data",
        "regenerate",
        "{CONV}",
        "--target",
        "{T}",
        "-o",
        "{OUT}.jsonl",
        "--max-tokens",
        "0",
    ),
    C(
        "regen-concurrency-zero",
        "--concurrency",
        *REGEN,
        "-o",
        "{OUT}.jsonl",
        "--server",
        "http://127.0.0.1:{PORT}",
        "--concurrency",
        "0",
    ),
    C(
        "regen-temperature-negative",
        "--temperature",
        *REGEN,
        "-o",
        "{OUT}.jsonl",
        "--target",
        "{T}",
        "--temperature",
        "-1",
    ),
    C("regen-out-is-input", "conv.jsonl", *REGEN, "-o", "{CONV}", "--target", "{T}"),
    C("regen-out-not-samples", "prior.jsonl", *REGEN, "-o", "{PRIORJ}", "--target", "{T}"),
    C("regen-target-pickle", "pytorch_model.bin", *REGEN, "-o", "{OUT}.jsonl", "--target", "{PKL}"),
    # data capture
    C(
        "capture-missing-data",
        "no-such-thing",
        "data",
        "capture",
        "{NOPE}",
        "--target",
        "{T}",
        "-o",
        "{OUT}",
    ),
    C(
        "capture-broken-data",
        "data.json",
        "data",
        "capture",
        "{BADDATA}",
        "--target",
        "{T}",
        "-o",
        "{OUT}",
    ),
    C(
        "capture-foreign-data",
        "vocab_size",
        "data",
        "capture",
        "{FOREIGN}",
        "--target",
        "{T}",
        "-o",
        "{OUT}",
    ),
    C("capture-vocab-missing", "no-such-thing", *CAPTURE, "-o", "{OUT}", "--vocab", "{NOPE}"),
    C("capture-vocab-wrong-dtype", "vocab-float", *CAPTURE, "-o", "{OUT}", "--vocab", "{BADVOCAB}"),
    C("capture-aux-out-of-range", "aux", *CAPTURE, "-o", "{OUT}", "--aux-layers", "1", "2", "99"),
    C("capture-topk-negative", "topk", *CAPTURE, "-o", "{OUT}", "--topk", "-1"),
    C("capture-shard-tokens-zero", "shard", *CAPTURE, "-o", "{OUT}", "--shard-tokens", "0"),
    C("capture-out-is-file", "notes.txt", *CAPTURE, "-o", "{TXT}"),
    C(
        "capture-target-pickle",
        "pytorch_model.bin",
        "data",
        "capture",
        "{DATA}",
        "--target",
        "{PKL}",
        "-o",
        "{OUT}",
    ),
    # train
    C("train-no-data", "--data", *TRAIN),
    C("train-data-missing", "no-such-thing", *TRAIN, "--data", "{NOPE}"),
    C("train-data-broken", "data.json", *TRAIN, "--data", "{BADDATA}"),
    C("train-init-pickle", "pytorch_model.bin", *TRAIN, "--data", "{DATA}", "--init-from", "{PKL}"),
    C("train-init-other-width", "hidden", *TRAIN, "--data", "{DATA}", "--init-from", "{DX}"),
    C("train-attention-unknown", "--attention", *TRAIN, "--data", "{DATA}", "--attention", "gqa"),
    C(
        "train-vocab-wrong-dtype",
        "vocab-float",
        *TRAIN,
        "--data",
        "{DATA}",
        "--vocab",
        "{BADVOCAB}",
    ),
    C(
        "train-out-is-file",
        "notes.txt",
        "train",
        "--target",
        "{T}",
        "--data",
        "{DATA}",
        "-o",
        "{TXT}",
        "--steps",
        "1",
    ),
    C("train-lr-negative", "--lr", *TRAIN, "--data", "{DATA}", "--lr", "-1"),
    C(
        "train-batch-zero",
        "--batch-size",
        "train",
        "--target",
        "{T}",
        "-o",
        "{OUT}",
        "--data",
        "{DATA}",
        "--steps",
        "1",
        "--batch-size",
        "0",
    ),
    C(
        "train-heldout-above-1",
        "--heldout",
        *TRAIN,
        "--data",
        "{DATA}",
        "--heldout",
        "1.5",
    ),
    C("train-foreign-data", "vocab", *TRAIN, "--data", "{FOREIGN}"),
    # eval
    C(
        "eval-data-missing",
        "no-such-thing",
        "eval",
        "--target",
        "{T}",
        "--drafter",
        "{D}",
        "--data",
        "{NOPE}",
    ),
    C(
        "eval-drafter-missing",
        "no-such-thing",
        "eval",
        "--target",
        "{T}",
        "--drafter",
        "{NOPE}",
        "--data",
        "{DATA}",
    ),
    C(
        "eval-drafter-pickle",
        "pytorch_model.bin",
        "eval",
        "--target",
        "{T}",
        "--drafter",
        "{PKL}",
        "--data",
        "{DATA}",
    ),
    C(
        "eval-drafter-other-width",
        "hidden",
        "eval",
        "--target",
        "{T}",
        "--drafter",
        "{DX}",
        "--data",
        "{DATA}",
    ),
    C(
        "eval-target-missing",
        "no-such-thing",
        "eval",
        "--target",
        "{NOPE}",
        "--drafter",
        "{D}",
        "--data",
        "{DATA}",
    ),
    C(
        "eval-data-broken",
        "data.json",
        "eval",
        "--target",
        "{T}",
        "--drafter",
        "{D}",
        "--data",
        "{BADDATA}",
    ),
    C("eval-depth-zero", "--depth", *EVAL, "--depth", "0"),
    C("eval-foreign-data", "vocab", *EVAL[:5], "--data", "{FOREIGN}"),
    # generate
    C(
        "generate-unknown-model-type",
        "config.json",
        *GEN[:2],
        "{UNKTYPE}",
        *GEN[3:],
        "--prompt",
        "x",
    ),
    C("generate-empty-prompt", "--prompt", *GEN, "--prompt", ""),
    C(
        "generate-max-new-zero",
        "--max-new-tokens",
        *GEN,
        "--prompt",
        "def ",
        "--max-new-tokens",
        "0",
    ),
    C(
        "generate-temperature-negative",
        "--temperature",
        *GEN,
        "--prompt",
        "def ",
        "--temperature",
        "-1",
    ),
    C("generate-top-p-zero", "--top-p", *GEN, "--prompt", "def ", "--top-p", "0"),
    C("generate-depth-zero", "--depth", *GEN, "--prompt", "def ", "--depth", "0"),
    C("generate-tree-topk-zero", "--topk", *GEN, "--prompt", "def ", "--tree", "--topk", "0"),
    C(
        "generate-drafter-missing",
        "no-such-thing",
        "generate",
        "--target",
        "{T}",
        "--drafter",
        "{NOPE}",
        "--prompt",
        "def ",
    ),
    C(
        "generate-drafter-other-width",
        "hidden",
        "generate",
        "--target",
        "{T}",
        "--drafter",
        "{DX}",
        "--prompt",
        "def ",
    ),
    C("generate-drafter-bad-shape", "fc", *GEN[:3], "--drafter", "{DSHAPE}", "--prompt", "d"),
    C("generate-drafter-int-weights", "int32", *GEN[:3], "--drafter", "{DDTYPE}", "--prompt", "d"),
    C("convert-drafter-bad-shape", "fc", "convert", "{DSHAPE}", "--to", "vllm", "-o", "{OUT}"),
    C("eval-drafter-bad-shape", "fc", *EVAL[:3], "--drafter", "{DSHAPE}", "--data", "{DATA}"),
    C("generate-cuda-absent", "--device", *GEN, "--prompt", "d", "--device", "cuda", marks=NO_CUDA),
    C(
        "regen-cuda-absent",
        "--device",
        *REGEN,
        "-o",
        "{OUT}.jsonl",
        "--target",
        "{T}",
        "--device",
        "cuda",
        marks=NO_CUDA,
    ),
    C(
        "capture-cuda-absent",
        "--device",
        *CAPTURE,
        "-o",
        "{OUT}",
        "--device",
        "cuda",
        marks=NO_CUDA,
    ),
    C(
        "train-cuda-absent",
        "--device",
        *TRAIN,
        "--data",
        "{DATA}",
        "--device",
        "cuda",
        marks=NO_CUDA,
    ),
    C("probe-cuda-absent", "--device", *PROBE, "--device", "cuda", marks=NO_CUDA),
    C("generate-threads-zero", "--threads", *GEN, "--prompt", "def ", "--threads", "0"),
    C("generate-device-unknown", "--device", *GEN, "--prompt", "def ", "--device", "gpu9"),
    # bench
    C("bench-prompts-zero", "--prompts", *BENCH, "--prompts", "0"),
    C("bench-repeats-zero", "--repeats", *BENCH, "--repeats", "0"),
    C("bench-data-missing", "no-such-thing", *BENCH, "--data", "{NOPE}"),
    C("bench-depth-zero", "--depth", *BENCH, "--depth", "0"),
    # probe
    C("probe-reference-other-width", "hidden size", *PROBE, "--reference-target", "{WIDE}"),
    C("probe-drafter-missing", "no-such-thing", "probe", "--drafter", "{NOPE}", "--target", "{T}"),
    C("probe-bench-missing", "no-such-thing", *PROBE, "--bench", "{NOPE}"),
    C("probe-bench-bad-json", "bad.json", *PROBE, "--bench", "{BADJSON}"),
    C("probe-samples-zero", "--samples", *PROBE, "--samples", "0"),
    C("probe-half-plan", "--cycle-ms", *PROBE, "--baseline-tps", "80"),
    C("probe-data-broken", "data.json", *PROBE, "--data", "{BADDATA}"),
    C("probe-foreign-data", "vocab", *PROBE, "--data", "{FOREIGN}"),
    # report
    C("report-missing-run", "no-such-thing", "report", "{NOPE}", "-o", "{OUT}"),
    C("report-empty-run", "run-empty", "report", "{RUNEMPTY}", "-o", "{OUT}"),
    C("report-bad-json", "bench.json", "report", "{RUNBAD}", "-o", "{OUT}"),
    C("report-out-is-file", "notes.txt", "report", "{RUNOK}", "-o", "{TXT}"),
    C("report-out-is-input", "run-ok", "report", "{RUNOK}", "-o", "{RUNOK}/html"),
    # demo (each refused before any work)
    C("demo-out-is-file", "notes.txt", "demo", "--quick", "-o", "{TXT}"),
    C("demo-threads-zero", "--threads", "demo", "--quick", "-o", "{OUT}", "--threads", "0"),
    C("demo-size-unknown", "--size", "demo", "-o", "{OUT}", "--size", "huge"),
]


@pytest.mark.parametrize(("cid", "must", "args"), CASES)
def test_bad_input(world, cid, must, args):
    before = (_digest(world.root), _digest(Path(world.paths["T"])))
    r = run_cli(*world.fmt(args, cid))
    lines = r.err.strip().splitlines()
    assert r.code == 2, (r.code, r.err[-2000:], r.out[-500:])
    assert "Traceback" not in r.err, r.err
    assert len(lines) == 1, r.err
    assert lines[0].startswith("eagle3kit: error: "), lines
    line = lines[0].replace(world.root.as_posix() + "/", "")
    assert must.lower() in line.lower(), f"the error line does not name {must!r}: {line}"
    after = (_digest(world.root), _digest(Path(world.paths["T"])))
    assert after == before, "a refused command changed its inputs or earlier outputs"
    assert not (Path.cwd() / "PWNED").exists(), "a pickle was loaded"


def test_the_battery_covers_every_verb():
    verbs = {
        a[0] if a[0] not in ("data", "zoo") else " ".join(a[:2])
        for _, _, a in (c.values for c in CASES)
    }
    want = {
        "inspect",
        "compat",
        "convert",
        "plan",
        "zoo list",
        "zoo build",
        "data prepare",
        "data regenerate",
        "data vocab",
        "data capture",
        "train",
        "eval",
        "generate",
        "bench",
        "probe",
        "report",
        "demo",
    }
    assert want <= verbs, want - verbs
    assert len(CASES) >= 60


# -- the fixed cases, beyond exit code and one line -----------------------------------------
def test_prepare_without_usable_samples_lists_why(world, tmp_path):
    inp = _write(tmp_path / "in.jsonl", _conv("a", None) + "{x\n" + _conv("b", None))
    r = run_cli("data", "prepare", inp, "--target", world.paths["T"], "-o", str(tmp_path / "D"))
    assert r.code == 2, r.err
    assert "3 skipped (2 no assistant turn, 1 bad JSON)" in r.err, r.err
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]  # no DATA dir, no temp dir left


def _prompt_only_input(path: Path) -> list[dict]:
    recs = [
        {"id": "ends-with-user", "conversations": [{"from": "human", "value": "def parse("}]},
        {
            "id": "empty-answer",
            "messages": [
                {"role": "user", "content": "import os"},
                {"role": "assistant", "content": ""},
            ],
        },
        {
            "id": "complete",
            "messages": [
                {"role": "user", "content": "class Node:"},
                {"role": "assistant", "content": "OLD"},
                {"role": "user", "content": "and then?"},
            ],
        },
        {"id": "whole", "messages": [{"role": "user", "content": "x ="}]},
    ]
    recs.append({"id": "done", **json.loads(_conv("for i in", "OLD"))})
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return recs


def test_regenerate_answers_prompt_only_conversations(world, tmp_path):
    """Prompts only (a final user turn, an empty answer) get the target's answer as their last
    assistant turn, locally and through an OpenAI-compatible server, with the same text."""
    from openai_server import FakeOpenAIServer

    inp = tmp_path / "prompts.jsonl"
    _prompt_only_input(inp)
    t = world.paths["T"]
    r = run_cli(
        "data",
        "regenerate",
        str(inp),
        "--target",
        t,
        "-o",
        str(tmp_path / "local.jsonl"),
        "--max-tokens",
        "6",
    )
    assert r.code == 0, r.err
    assert "4 of them ended with a user turn" in " ".join(r.out.split()), r.out
    with FakeOpenAIServer(t, lifetime=60) as srv:
        r2 = run_cli(
            "data",
            "regenerate",
            str(inp),
            "--server",
            srv.url,
            "-o",
            str(tmp_path / "srv.jsonl"),
            "--max-tokens",
            "6",
            "--json",
        )
    assert r2.code == 0, r2.err
    assert json.loads(r2.out)["answered"] == 4 and json.loads(r2.out)["done"] == 5
    local = [json.loads(x) for x in (tmp_path / "local.jsonl").read_text().splitlines()]
    served = [json.loads(x) for x in (tmp_path / "srv.jsonl").read_text().splitlines()]
    assert sorted(local, key=lambda d: d["id"]) == sorted(served, key=lambda d: d["id"])
    by_id = {d["id"]: d for d in local}
    # the answers are the target's (equal to the server's greedy text above); whether a tiny
    # target's first tokens are blank is the model's business, not regenerate's
    last = by_id["ends-with-user"]["conversations"][-1]
    assert last["from"] == "gpt" and isinstance(last["value"], str)
    assert by_id["empty-answer"]["messages"][-1]["role"] == "assistant"
    complete = by_id["complete"]["messages"]
    assert [m["role"] for m in complete] == ["user", "assistant", "user", "assistant"]
    assert complete[1]["content"] != "OLD"
    # the server saw exactly the history before each answer: never an empty assistant turn
    assert all(m["content"] for b in srv.bodies for m in b["messages"])


@pytest.mark.timeout
def test_regenerate_checks_the_server_once(world, tmp_path, monkeypatch):
    from eagle3kit.core.errors import Eagle3Error
    from eagle3kit.data.openai_servers import ServerPool
    from eagle3kit.data.regenerate import regenerate

    asked, request = [], ServerPool.request

    def counted(self, base, path, body):
        asked.append(path)
        return request(self, base, path, body)

    monkeypatch.setattr(ServerPool, "request", counted)

    inp = tmp_path / "in.jsonl"
    _prompt_only_input(inp)
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(Eagle3Error, match=r"--server: no server answers at http://127\.0\.0\.1"):
        regenerate(inp, tmp_path / "out.jsonl", servers=[url], retries=4)
    assert asked == ["/v1/models"]  # one request, not retries x samples with backoff
    assert not (tmp_path / "out.jsonl").exists()


def test_regenerate_stops_after_unreachable_samples_in_a_row(world, tmp_path):
    """The server dies mid-run: the run stops after MAX_UNREACHABLE samples in a row could not
    connect (not after trying all), and keeps the sample written before."""
    from openai_server import FakeOpenAIServer

    from eagle3kit.data import regenerate as rg

    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(_conv(f"x{i} =", "OLD") for i in range(rg.MAX_UNREACHABLE + 6)))
    out = tmp_path / "out.jsonl"
    with FakeOpenAIServer(world.paths["T"], mode="die", die_after=2, lifetime=60) as srv:
        r = run_cli(
            "data",
            "regenerate",
            str(inp),
            "--server",
            srv.url,
            "-o",
            str(out),
            "--retries",
            "0",
            "--concurrency",
            "1",
            "--max-tokens",
            "3",
        )
        assert srv.chat_requests == 2  # the answered one and the one it died on
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert f"stopped after {rg.MAX_UNREACHABLE} samples in a row could not connect" in r.err
    assert "1 samples written" in r.err and "rerun" in r.err
    assert len(out.read_text().splitlines()) == 1


def test_loading_a_target_draws_no_transformers_bar(world):
    import contextlib
    import io

    from eagle3kit.model.target import TargetModel

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        TargetModel.from_pretrained(world.paths["T"]).close()
    assert "Loading weights" not in err.getvalue() and "it/s" not in err.getvalue(), err.getvalue()
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()  # restored for whoever else uses transformers


def test_compat_of_an_unknown_writer_renders_no_python_repr(world, tmp_path):
    """A drafter whose config does not say who wrote it: compat's human output must still be
    prose (the candidate readings), never a raw dict like "trained on {'layer_output': ...}"."""
    d = tmp_path / "anon"
    shutil.copytree(world.paths["D"], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("eagle3kit", None)  # the writer's own record: without it the writer is unknown
    (d / "config.json").write_text(json.dumps(cfg))
    r = run_cli("compat", str(d), world.paths["T"])
    assert r.code in (0, 1), r.err
    assert "{'" not in r.out and "'}" not in r.out, r.out


# -- every JSON document says what it is ----------------------------------------------------
KINDS = [
    ("inspect", ("inspect", "{D}", "--json")),
    ("compat", ("compat", "{D}", "{T}", "--json")),
    ("convert", ("convert", "{D}", "--to", "vllm", "-o", "{NEW}", "--json")),
    ("plan", (*PLAN, "--acceptance", "0.7", "--json")),
    ("prepare", (*PREP, "{CONV}", "-o", "{NEW}", "--json")),
    ("vocab", ("data", "vocab", "{DATA}", "--draft-vocab-size", "32", "-o", "{NEWST}", "--json")),
    ("regenerate", (*REGEN, "--target", "{T}", "-o", "{NEWJ}", "--json")),
    ("generate", (*GEN, "--prompt", "def f(", "--json")),
    ("eval", (*EVAL, "--json")),
    ("bench", (*BENCH, "--prompts", "1", "--repeats", "1", "--json")),
    ("zoo", ("zoo", "list", "--size", "tiny", "--json")),
    ("train", (*TRAIN, "--data", "{DATA}", "--json")),
    ("probe", (*PROBE, "--data", "{DATA}", "--json")),
]


@pytest.mark.parametrize("kind,args", KINDS, ids=[k for k, _ in KINDS])
def test_every_json_output_says_what_it_is(world, tmp_path, kind, args):
    """`--json` prints one document that starts with its kind and schema (report dispatches
    on them); the values come from core/artifacts.py's convention, written out here."""
    extra = {
        "NEW": str(tmp_path / "new"),
        "NEWST": str(tmp_path / "v.safetensors"),
        "NEWJ": str(tmp_path / "regen.jsonl"),
        "OUT": str(tmp_path / "run"),
    }
    r = run_cli(*(a.format(**world.paths, **extra) for a in args))
    assert r.code in (0, 1), r.err
    doc = json.loads(r.out)
    assert list(doc)[:2] == ["kind", "schema"], list(doc)[:4]
    assert doc["kind"] == f"eagle3kit.{kind}" and doc["schema"] == 1


def test_report_dispatches_on_kind_and_names_what_it_skips(world, tmp_path):
    """A document that has a bench's keys but no kind is not read as a bench: it is named."""
    run = tmp_path / "run"
    shutil.copytree(world.paths["RUNOK"], run)  # a real `plan --json`
    keys_only = {"baseline_tps": 1.0, "spec_tps": 2.0, "tau_online": 2.0, "speedup": 2.0}
    (run / "bench-old.json").write_text(json.dumps(keys_only))
    r = run_cli("report", str(run), "-o", str(tmp_path / "out"), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["kind"] == "eagle3kit.report"
    assert doc["found"]["plan"] == ["plan.json"] and doc["found"]["bench"] == []
    assert doc["skipped"] == ["bench-old.json: no eagle3kit kind"]
