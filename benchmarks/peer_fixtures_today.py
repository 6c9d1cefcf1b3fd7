"""What today's eagle3kit makes of drafters the peers' own code wrote (tests/fixtures/peers/).

    python benchmarks/peer_fixtures_today.py [--out benchmarks/results/peer_fixtures_today.json]

For every fixture folder (benchmarks/peers/make_peer_fixtures.py wrote them, each with a JSON
beside it naming the peer and its verifier), the CLI as a user runs it:

- `eagle3kit inspect DIR` (and `--json`): exit code, its `error`/`warning` lines, the method,
  layout, missing and unexpected tensors it reports;
- `eagle3kit compat DIR VERIFIER` and `--engine vllm@0.33` (`--json`): exit code, verdict,
  every error and warning finding;
- `eagle3kit generate --target T --drafter DIR --prompt P --max-new-tokens 16 --json` with
  default options on both tiny members: exit code and the error line, or whether the tokens
  equal plain greedy decoding's (eagle3kit's `greedy_generate` on the same prompt ids).

- the logits: where `load_pair` (what generate loads) accepts the file, our drafter's logits
  on the inputs saved beside the fixture against the peer's own forward outputs (max |diff|;
  the rows compared: tests/peer_fixture_helpers.py `our_rows`), and a control: the same with
  one o_proj of ours scaled by 1.01 (not k_proj: Qwen3's k_norm cancels its scale), which
  must differ by more than the tolerance.

Nothing here judges; the findings report (the issue's) reads this record.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _results import write_result  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from peer_fixture_helpers import our_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ZOO = Path("src/eagle3kit/zoo/shipped")  # relative to ROOT, where the CLI runs
PEERS = ROOT / "tests" / "fixtures" / "peers"
TARGETS = ("llama-v1-tiny", "dsv3-v1-tiny")
PROMPT = "def read_config(path):"
MAX_NEW = 16


def cli(*args: str) -> tuple[int, str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), COLUMNS="200")
    cmd = [sys.executable, "-m", "eagle3kit", *args]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    return r.returncode, r.stdout, r.stderr


def last_line(text: str) -> str | None:
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    return lines[-1] if lines else None


def flagged(text: str) -> list[str]:
    """The human output's `error ...` / `warning ...` lines."""
    lines = (x.strip() for x in text.splitlines())
    return [x for x in lines if x.startswith(("error", "warning"))]


def inspect(d: str) -> dict:
    rc, out, err = cli("inspect", d)
    jrc, jout, jerr = cli("inspect", d, "--json")
    row = {"exit": rc, "flagged": flagged(out), "stderr": last_line(err)}
    if jrc in (0, 1) and jout.strip():
        doc = json.loads(jout)
        keys = ("method", "variant", "format", "missing", "unexpected", "shape_mismatches")
        row |= {k: doc.get(k) for k in keys}
        row["notes"] = doc.get("notes")
    return row


def compat(d: str, target: str, engine: str | None) -> dict:
    args = ["compat", d, target, "--json"] + (["--engine", engine] if engine else [])
    rc, out, err = cli(*args)
    row: dict = {"engine": engine or "both (default)", "exit": rc, "stderr": last_line(err)}
    if rc in (0, 1) and out.strip():
        doc = json.loads(out)
        keep = ("error", "warning")
        row["verdict"] = doc.get("verdict")
        row["findings"] = [
            {k: f.get(k) for k in ("severity", "code", "engine", "message")}
            for f in doc.get("findings", [])
            if f.get("severity") in keep
        ]
    return row


def greedy_tokens(target: str, prompt_ids: list[int]) -> list[int]:
    sys.path.insert(0, str(ROOT / "src"))
    from eagle3kit.decode import greedy_generate
    from eagle3kit.model.loading import load_target

    tm = load_target(target)
    eos = tm.tokenizer.eos_token_id if tm.tokenizer is not None else None
    return greedy_generate(tm, prompt_ids, max_new_tokens=MAX_NEW, eos_token_id=eos).tokens


def generate(d: str, target: str, plain: dict) -> dict:
    args = ["generate", "--target", target, "--drafter", d, "--prompt", PROMPT]
    rc, out, err = cli(*args, "--max-new-tokens", str(MAX_NEW), "--json")
    row: dict = {"target": target, "exit": rc, "stderr": last_line(err)}
    if rc == 0:
        doc = json.loads(out)
        key = (target, tuple(doc["prompt_ids"]))
        if key not in plain:
            plain[key] = greedy_tokens(target, doc["prompt_ids"])
        row |= {"tokens": doc["tokens"], "tau_online": doc.get("tau_online")}
        row["equals_plain_greedy"] = doc["tokens"] == plain[key]
    return row


def logits(meta: dict, d: str) -> dict:
    """max |ours - peer| on the inputs saved beside the fixture, or why ours cannot run."""
    sys.path.insert(0, str(ROOT / "src"))
    import torch
    from safetensors.torch import load_file

    from eagle3kit.core.errors import Eagle3Error
    from eagle3kit.model.loading import load_pair

    try:
        _tm, ours = load_pair(meta["verifier"]["zoo"], str(ROOT / d))
    except Eagle3Error as e:
        return {"runs": False, "error": str(e).replace(str(ROOT) + "/", "")}
    x = load_file(str(ROOT / d) + ".forward.safetensors")
    ours.eval()
    with torch.no_grad():
        same = _max_diff(our_rows(meta["method"], ours, x))
        w = next(p for n, p in ours.named_parameters() if "o_proj" in n)
        w.mul_(1.01)  # the control: a 1% change of one o_proj must show
        control = _max_diff(our_rows(meta["method"], ours, x))
    doc = {"runs": True, "rows": len(our_rows(meta["method"], ours, x)), "max_abs_diff": same}
    return doc | {"control_max_abs_diff": control, "tolerance": 1e-4}


def _max_diff(rows: list) -> float:
    return max(float((a - b).abs().max()) for a, b in rows)


def one(meta_path: Path, plain: dict) -> dict:
    meta = json.loads(meta_path.read_text())
    d = str((meta_path.parent / meta["variant"]).relative_to(ROOT))
    verifier = meta["verifier"]["zoo"]
    folder = str(ZOO / verifier)  # compat does not resolve zoo names (see "compat_by_name")
    print(f"{d}", file=sys.stderr)
    return {
        "fixture": d,
        "peer": f"{meta['peer']} {meta['version']}",
        "method": meta["method"],
        "what": meta["what"],
        "verifier": verifier,
        "inspect": inspect(d),
        "compat": [compat(d, folder, None), compat(d, folder, "vllm@0.33")],
        "generate": [generate(d, t, plain) for t in TARGETS],
        "logits": logits(meta, d),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/peer_fixtures_today.json"))
    ap.add_argument("--only", nargs="*", default=None, help="variant names")
    a = ap.parse_args()
    plain: dict = {}
    metas = sorted(PEERS.glob("*/*.json"))
    rows = [one(m, plain) for m in metas if not a.only or m.stem in a.only]
    doc = {"prompt": PROMPT, "max_new_tokens": MAX_NEW, "targets": list(TARGETS)}
    first = str((metas[0].parent / metas[0].stem).relative_to(ROOT))
    doc["compat_by_name"] = compat(first, TARGETS[0], None) | {"drafter": first}
    path = write_result(a.out, "eagle3kit.bench.peer_fixtures_today", doc | {"fixtures": rows})
    print(path)


if __name__ == "__main__":
    main()
