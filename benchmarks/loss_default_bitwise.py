"""The default loss (`--loss kl`) trains bitwise what it trained before the loss choice.

    python benchmarks/loss_default_bitwise.py digests --out DIGESTS.json [--work DIR]
    python benchmarks/loss_default_bitwise.py compare BEFORE.json AFTER.json [--json RESULT]

`digests` runs a short `eagle3kit train` (CPU, seeded, 1 thread) for every method that trains a
distribution, on the tiny dsv3-v1 member, each teacher it can read: EAGLE-3 (the full draft
vocabulary and a top-K teacher), EAGLE 3.1, P-EAGLE, DFlash (the target's law; the data token
with D-PACE weights) and MTP (FastMTP's data token; the target's law), then writes the sha256
of every weight file each run wrote (`*.safetensors` under RUN, the optimizer's state
included), and the taus of `eagle3kit demo --quick --json` (its headline's online τ, its
X
the sources after; `compare` says, per run, whether every file's tensors and metadata are
bitwise the same (`_sha`), and writes the result file (both commits named: the one before is
given by `--before-commit`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _env import environment  # noqa: E402

COMMON = ["--steps", "6", "--batch-size", "4", "--max-len", "64", "--lr", "3e-3", "--seed", "1"]
TTT = [*COMMON, "--ttt-steps", "3", "--eval-every", "3", "--eval-samples", "8", "--heldout", "8"]
DFLASH = [*COMMON, "--eval-every", "3", "--eval-samples", "8", "--heldout", "8", "--anchors", "4"]
RUNS = {
    "eagle3": ["--method", "eagle3", *TTT],
    "eagle3-topk": ["--method", "eagle3", "--topk", "8", *TTT],
    "eagle3.1": ["--method", "eagle3.1", *TTT],
    "peagle": ["--method", "peagle", *TTT],
    "dflash-kl": ["--method", "dflash", "--block-size", "4", *DFLASH],
    "dflash-ce-dpace": [
        "--method",
        "dflash",
        "--block-size",
        "4",
        "--dflash-loss",
        "ce",
        "--position-weights",
        "dpace",
        *DFLASH,
    ],
    "mtp-data": ["--method", "mtp", *COMMON, "--eval-samples", "8"],
    "mtp-target": ["--method", "mtp", "--mtp-targets", "target", *COMMON, "--eval-samples", "8"],
}


def tiny_data(work: Path) -> Path:
    """A DATA dir of 32 zoo chat samples for the tiny dsv3-v1 (built once in `work`)."""
    from eagle3kit import zoo
    from eagle3kit.data.prepare import prepare
    from eagle3kit.zoo import corpus

    out = work / "data"
    if (out / "data.json").is_file():
        return out
    work.mkdir(parents=True, exist_ok=True)
    convs = corpus.chat_samples(corpus.files("lib", limit=12))[:32]
    src = work / "convs.jsonl"
    src.write_text("".join(json.dumps(c) + "\n" for c in convs))
    prepare([src], zoo.get("dsv3-v1", size="tiny"), out, max_length=64)
    return out


def digests(a: argparse.Namespace) -> dict:
    from eagle3kit import zoo

    work = Path(a.work)
    data, target = tiny_data(work), str(zoo.get("dsv3-v1", size="tiny"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out: dict = {}
    for name, args in RUNS.items():
        run = work / a.label / name
        cmd = [sys.executable, "-m", "eagle3kit", "train", "--target", target, "--data", str(data)]
        cmd += ["-o", str(run), *args, "--threads", "1", "--json"]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise SystemExit(f"{name}: exit {r.returncode}\n{r.stderr[-2000:]}")
        files = sorted(p for p in run.rglob("*.safetensors"))
        out[name] = {str(p.relative_to(run)): _sha(p) for p in files}
        print(f"{name}: {len(files)} weight files", file=sys.stderr, flush=True)
    return {"runs": out, "demo": demo_taus(work / a.label, env)}


def demo_taus(work: Path, env: dict) -> dict:
    """`eagle3kit demo --quick --json` in a fresh home: the headline's online τ per row and
    eval.json's offline τ (walked, every position) per drafter."""
    out = work / "demo"
    cmd = [sys.executable, "-m", "eagle3kit", "demo", "--quick", "--json", "-o", str(out)]
    env = {**env, "EAGLE3KIT_HOME": str(work / "home")}
    r = subprocess.run([*cmd, "--threads", "1"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"demo: exit {r.returncode}\n{r.stderr[-2000:]}")
    head = {x["name"]: x.get("tau_online") for x in json.loads(r.stdout)["headline"]}
    drafters = json.loads((out / "eval.json").read_text())["drafters"]
    keys = ("tau_walk", "tau_every_position")
    offline = {n: {k: d.get(k) for k in keys} for n, d in drafters.items()}
    return {"headline_tau_online": head, "eval": offline}


def _sha(p: Path) -> str:
    """sha256 of the file's metadata (sorted) and of every tensor (name, dtype, shape, bytes),
    by name. Not of the file's bytes: safetensors writes its metadata map in an order that
    changes from process to process."""
    import torch
    from safetensors import safe_open

    h = hashlib.sha256()
    with safe_open(str(p), "pt") as f:
        h.update(json.dumps(f.metadata() or {}, sort_keys=True).encode())
        for name in sorted(f.keys()):
            t = f.get_tensor(name).contiguous()
            h.update(f"{name} {t.dtype} {list(t.shape)}".encode())
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def compare(before: dict, after: dict) -> dict:
    """Per run: its files, and whether each is bitwise the same on both sides; the demo's
    figures, equal or not."""
    rows = _compare_runs(before["runs"], after["runs"])
    rows["demo --quick"] = {"before": before["demo"], "after": after["demo"]}
    rows["demo --quick"]["equal"] = before["demo"] == after["demo"]
    return rows


def _compare_runs(before: dict, after: dict) -> dict:
    rows = {}
    for name in sorted(set(before) | set(after)):
        b, a = before.get(name, {}), after.get(name, {})
        same = sorted(f for f in b if a.get(f) == b[f])
        rows[name] = {"files": len(b), "same": len(same), "bitwise": bool(b) and b == a}
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("digests", help="train every run, write the digests of its weights")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--work", default="/tmp/e3k_bench/loss_bitwise")
    d.add_argument("--label", default="run")
    c = sub.add_parser("compare", help="compare two digest files, write the result file")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--before-commit", required=True)
    c.add_argument("--json", type=Path)
    a = ap.parse_args()
    print("environment: " + environment(), file=sys.stderr)
    if a.cmd == "digests":
        a.out.write_text(json.dumps(digests(a), indent=1))
        return
    rows = compare(json.loads(a.before.read_text()), json.loads(a.after.read_text()))
    for name, r in rows.items():
        if "equal" in r:
            print(f"{name:>16}: headline and eval.json taus equal: {r['equal']}")
        else:
            print(f"{name:>16}: {r['same']}/{r['files']} files bitwise equal")
    if a.json:
        from _results import write_result

        every = all(r.get("bitwise", r.get("equal")) for r in rows.values())
        doc = {"before_commit": a.before_commit, "runs": rows, "all_bitwise": every}
        write_result(a.json, "eagle3kit.loss_default_bitwise", doc)


if __name__ == "__main__":
    main()
