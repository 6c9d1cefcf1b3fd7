"""Context length end to end on the full zoo members: every verb that measures or plans by
length, run as a user runs it (`python -m eagle3kit ...`), its exit code and figures kept.

    python benchmarks/by_length_e2e.py [--members dsv3-v1,llama-v1] [--lengths 128,1984]
        [--json benchmarks/results/by_length-e2e-full.json]

Per member and its EAGLE-3 drafter (dsv3-v1: the shipped K2 drafter; llama-v1: the drafter of
tests/fixtures/real-engine-llama-v1-eagle3, trained by `eagle3kit train` on the real vLLM's
answers), small on purpose (one prompt per length, 16 new tokens, one repeat, one torch thread:
this checks that the verbs work, not how fast; benchmarks/bench_by_length.py measures):

1. `eval --by-length 0,128,512 --data` on the member's held-out chat samples (offline);
2. `eval --online --by-length LENGTHS` (prompts built to each length, data/long_prompts.py);
3. `bench --context-lengths LENGTHS` in process, then `plan --from` on its file;
4. `bench --url --context-lengths LENGTHS` against a served pair, then `plan --from`: llama-v1
   behind the real vLLM (CPU build, `benchmarks/real_engine.py --setup`; 2048 positions, the
   drafter with 3 speculative tokens), dsv3-v1 behind the tests' fake vLLM
   (tests/fake_engine.py; the CPU build refuses the member's MLA latent of 128, as
   benchmarks/real_engine_ab.py records). No engine installed: the fake for both, said so.

A step passes when its exit code is the verb's (0; `plan` 0 or 1, pays or not) and its
document has one bucket per length asked (`plan`: per length of the file it read).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))
from _env import environment  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "real-engine-llama-v1-eagle3"
SMALL = ["--max-new-tokens", "16", "--repeats", "1"]


def drafter_of(member: str) -> str:
    from eagle3kit.zoo.shipping import shipped

    return {"dsv3-v1": str(shipped("k2-drafter")), "llama-v1": str(FIXTURE)}[member]


def cli(*args: str) -> tuple[int, str, str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "eagle3kit", *args], capture_output=True, text=True, env=env
    )
    return p.returncode, p.stdout, p.stderr, time.perf_counter() - t0


def step(name: str, args: list[str], lengths: list[int], ok_codes=(0,), out: Path | None = None):
    """Run one verb; its row (exit code, seconds, figures, passed) and its document."""
    code, stdout, err, s = cli(*args)
    row = {"step": name, "args": args, "exit_code": code, "seconds": round(s, 1)}
    doc = None
    try:
        doc = json.loads(stdout)
    except ValueError:
        row["error"] = (err.strip().splitlines() or ["no JSON on stdout"])[-1]
    if doc is not None:
        got = [e["context_length"] for e in doc.get("by_length") or []]
        row["lengths"] = got
        row |= figures(doc)
        if out is not None:
            out.write_text(stdout)
    row["passed"] = code in ok_codes and doc is not None and row.get("lengths") == lengths
    print(f"  {name}: exit {code}, {s:.0f} s, passed {row['passed']}", flush=True)
    return row, doc


def figures(doc: dict) -> dict:
    """What each document says per bucket (tau; plan: tok/s and the answer)."""
    if "pays_up_to" in doc:
        return {
            "tau": [e["tau"] for e in doc["by_length"]],
            "tokens_per_s": [e["tokens_per_s"] for e in doc["by_length"]],
            "answer": doc["pays_up_to"]["answer"],
        }
    taus = []
    for e in doc["by_length"]:
        rows = {m["name"]: m for m in e.get("methods") or []}
        row = rows.get("chain") or e
        taus.append(row.get("tau_online", row.get("tau_walk")))
    out = {"tau": taus}
    if doc.get("kind") == "eagle3kit.bench":
        out["lossless"] = all(
            m.get("same_tokens_as_greedy", True) for e in doc["by_length"] for m in e["methods"]
        )
    return out


def held_out_chat(member: str, path: Path, n: int = 16) -> Path:
    from eagle3kit import zoo
    from eagle3kit.zoo import corpus

    m = zoo.member(member)
    convs = corpus.chat_samples(corpus.files(m.slice, held_out=True))[:n]
    path.write_text("".join(json.dumps(c) + "\n" for c in convs))
    return path


def served(member: str, drafter: str, work: Path, use_real: bool):
    """(engine name, spec url, base url, context manager stopping both)."""
    from contextlib import ExitStack

    stack = ExitStack()
    if use_real:
        from eagle3kit import zoo
        from eagle3kit.live.engine_server import VllmServer

        cfg = {"method": "eagle3", "model": drafter, "num_speculative_tokens": 3}
        common = ["--enforce-eager", "--max-model-len", "2048", "--served-model-name", member]
        spec_args = [*common, "--speculative-config", json.dumps(cfg)]
        model = str(zoo.get(member))
        base = stack.enter_context(VllmServer(model, common, log_path=work / "plain.log"))
        spec = stack.enter_context(VllmServer(model, spec_args, log_path=work / "spec.log"))
        return "vllm (real, CPU build)", spec.url, base.url, stack
    from fake_engine import FakeEngine

    from eagle3kit.model.loading import load_pair

    tm, d = load_pair(member, drafter)
    kw = {"engine": "vllm", "lifetime": 3600, "name": member}
    spec = stack.enter_context(FakeEngine(tm, d, depth=3, **kw))
    base = stack.enter_context(FakeEngine(tm, None, **kw))
    return "vllm protocol (tests/fake_engine.py)", spec.url, base.url, stack


def member_steps(member: str, a, work: Path) -> dict:
    from eagle3kit.live.engine_server import ready_state

    d = drafter_of(member)
    ls = [int(x) for x in a.lengths.split(",")]
    base = ["--target", member, "--drafter", d]
    rows = []
    data = held_out_chat(member, work / f"{member}-chat.jsonl")
    off = ["eval", *base, "--data", str(data), "--by-length", "0,128,512", "--json"]
    rows.append(step("eval --by-length (offline)", off, [0, 128, 512])[0])
    on = ["eval", *base, "--online", "--by-length", a.lengths, "--limit", "1", *SMALL, "--json"]
    rows.append(step("eval --online --by-length", on, ls)[0])
    bfile = work / f"{member}-bench.json"
    b = ["bench", *base, "--context-lengths", a.lengths, "--prompts", "1", *SMALL, "--json"]
    rows.append(step("bench --context-lengths", b, ls, out=bfile)[0])
    plan = ["plan", "--from", str(bfile), "--json"]
    rows.append(step("plan --from (bench)", plan, ls, ok_codes=(0, 1))[0])
    real = member == "llama-v1" and ready_state()["ready"]
    engine, spec, plain, stack = served(member, d, work, real)
    with stack:
        lfile = work / f"{member}-live.json"
        live = ["bench", "--url", spec, "--baseline-url", plain, "--target", member]
        live += ["--context-lengths", a.lengths, "--prompts", "1", *SMALL, "--json"]
        rows.append(step("bench --url --context-lengths", live, ls, out=lfile)[0])
    rows[-1]["engine"] = engine
    plan = ["plan", "--from", str(lfile), "--json"]
    rows.append(step("plan --from (bench --url)", plan, ls, ok_codes=(0, 1))[0])
    return {"member": member, "drafter": d, "engine": engine, "steps": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", default="dsv3-v1,llama-v1")
    ap.add_argument("--lengths", default="128,1984")
    ap.add_argument("--json", type=Path, help="write the result file here")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)  # the fake engine's; the verbs get OMP_NUM_THREADS=1 (`cli`)
    print("environment: " + environment())
    with tempfile.TemporaryDirectory() as tmp:
        members = []
        for m in a.members.split(","):
            print(m, flush=True)
            members.append(member_steps(m, a, Path(tmp)))
    for m in members:  # the temporary paths are no result
        for r in m["steps"]:
            r["args"] = [Path(x).name if x.startswith(tmp) else x for x in r["args"]]
    ok = all(r["passed"] for m in members for r in m["steps"])
    doc = {"lengths": a.lengths, "members": members, "all_passed": ok}
    doc["load_avg_end"] = os.getloadavg()
    print(f"all passed: {ok}")
    if a.json:
        from _results import write_result

        write_result(a.json, "eagle3kit.by_length_e2e", doc)


if __name__ == "__main__":
    main()
