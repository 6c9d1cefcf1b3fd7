"""Which pairings the real vLLM CPU build serves or refuses, beside what `compat` predicts
(issue 46).

    python benchmarks/real_engine_refusals.py [--only NAME]
        -> benchmarks/results/real-engine-refusals.json

Each case is started with `vllm serve` (benchmarks/real_engine.py --setup), as `convert --to
vllm` says to launch it; when it starts, two greedy requests are sent. The record says where
it stopped ("served", "start", "first request") with the engine's own error line, and the
`cpu-build-refuses` findings `compat --engine vllm` gives for the same pairing.
tests/test_engine_cpu.py checks every record against compat (no engine needed).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))

import _env  # noqa: E402,F401
from _results import RESULTS, write_result  # noqa: E402

from eagle3kit.live.engine_server import (  # noqa: E402
    EngineStartError,
    VllmServer,
    ready_state,
)
from eagle3kit.zoo import shipping  # noqa: E402

FIX = ROOT / "tests" / "fixtures"
SERVE = ["--enforce-eager", "--max-model-len", "1024", "--served-model-name", "m"]
# (name, target, drafter source or None): drafters are converted --to vllm first
CASES = (
    ("llama-v1-plain", "llama-v1", None),
    ("llama-v1-eagle3", "llama-v1", FIX / "real-engine-llama-v1-eagle3"),
    ("llama-v1-tiny-plain", "llama-v1-tiny", None),
    ("dsv3-v1-plain", "dsv3-v1", None),
    ("dsv3-v1-k2-drafter", "dsv3-v1", "k2-drafter"),
)


def drafter_dir(src, target: Path, work: Path) -> Path:
    if src is None:
        return None
    src = Path(src) if Path(str(src)).exists() else shipping.ROOT / str(src)
    out = work / f"{Path(src).name}-vllm"
    cmd = [sys.executable, "-m", "eagle3kit", "convert", str(src), "--to", "vllm"]
    cmd += ["-o", str(out), "--verifier", str(target)]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def compat_findings(drafter: Path | None, target: Path) -> list[str]:
    from eagle3kit.checkpoint.compat import compat
    from eagle3kit.checkpoint.engines import cpu as engine_cpu

    if drafter is None:
        return engine_cpu.target_refusals(json.loads((target / "config.json").read_text()))
    res = compat(str(drafter), str(target), engine="vllm")
    return [f.message for f in res.findings if f.code == "cpu-build-refuses"]


def ask(url: str) -> str | None:
    body = {"model": "m", "prompt": "def ", "max_tokens": 16, "temperature": 0}
    req = urllib.request.Request(
        url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        urllib.request.urlopen(req, timeout=300).read()
        return None
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"


def engine_line(srv: VllmServer, needles: tuple[str, ...]) -> str:
    """The engine's own error message naming the refusal (`XError: ...`), else the log's
    last error line."""
    for ln in srv.log_text().splitlines():
        m = re.search(r"\b\w*(Error|Exception): (.*)$", ln)
        if m and any(n in m.group(2) for n in needles):
            return m.group(0).strip()[-300:]
    return srv.log_error()


NEEDLES = ("No common block size", "Unsupported CPU attention", "is not supported by MLA")


def run_case(name: str, member: str, src, work: Path) -> dict:
    target = shipping.ROOT / member  # the shipped folder (a tiny member too)
    drafter = drafter_dir(src, target, work)
    args = list(SERVE)
    if drafter is not None:
        spec = {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 3}
        args += ["--speculative-config", json.dumps(spec)]
    rec = {"case": name, "target": member, "drafter": None if src is None else Path(src).name}
    rec["compat"] = compat_findings(drafter, target)
    srv = VllmServer(str(target), args, log_path=work / f"{name}.log")
    t0 = time.monotonic()
    try:
        srv.start()
    except EngineStartError:
        rec.update(outcome="refused", stage="start", error=engine_line(srv, NEEDLES))
        rec["seconds"] = round(time.monotonic() - t0, 1)
        return rec
    try:
        fails = [ask(srv.url) for _ in range(2)]
        if any(fails):
            rec.update(outcome="refused", stage="first request", error=engine_line(srv, NEEDLES))
        else:
            rec.update(outcome="served", stage=None, error=None)
    finally:
        srv.stop()
    rec["seconds"] = round(time.monotonic() - t0, 1)
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="run the cases whose name contains this")
    a = ap.parse_args()
    state = ready_state()
    if not state["ready"]:
        raise SystemExit(state["reason"])
    work = Path(tempfile.mkdtemp(prefix="real-engine-refusals-"))
    records = []
    for name, member, src in CASES:
        if a.only and a.only not in name:
            continue
        rec = run_case(name, member, src, work)
        print(f"{name}: {rec['outcome']} {rec.get('stage') or ''} {rec.get('error') or ''}")
        records.append(rec)
    out = RESULTS / ("real-engine-refusals" + ("-partial" if a.only else "") + ".json")
    write_result(
        out, "eagle3kit.real-engine-refusals", {"engine": state["versions"], "records": records}
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
