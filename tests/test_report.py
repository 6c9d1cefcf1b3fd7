"""report: written from JSON artefacts only; self-contained HTML that headless Chromium renders."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from conftest import run_cli

PROBE = {
    "kind": "eagle3kit.probe",
    "schema": 1,
    "drafter": "D",
    "target": "NEW",
    "reference": "OLD",
    "depth": 3,
    "verdict": "fine-tune",
    "reasons": ["offline accept length 1.869 on the new target vs 2.786 on the reference"],
    "compat": {"verdict": "sglang: serves it correctly"},
    "aux": {
        "candidates": [
            {"reading": "h[X]", "layers": [1, 3, 4], "declared": False, "writers": "w"},
            {"reading": "h[X+1]", "layers": [2, 4, 5], "declared": True, "writers": "w"},
        ],
        "acceptance": {
            "h[X]": {"acc": [0.45, 0.43, 0.44], "tau_every_position": 1.725},
            "h[X+1]": {"acc": [0.5, 0.49, 0.46], "tau_every_position": 1.869},
        },
        "chosen": {
            "reading": "h[X+1]",
            "layers": [2, 4, 5],
            "margin_tau_every_position": 0.144,
            "clear": True,
        },
        "engines": {"sglang": {"captures": [2, 4, 5], "ok": True, "fix": None}},
    },
    "similarity": [
        {"layer": 2, "cosine_mean": 0.9062, "cosine_p10": 0.843, "cka": 0.8938, "norm_ratio": 1.118}
    ],
    "fc_similarity": {
        "cosine_mean": 0.9847,
        "cosine_p10": 0.9765,
        "cka": 0.606,
        "norm_ratio": 0.975,
    },
    "acceptance": {"target": {"acc": [0.5, 0.49, 0.46]}, "reference": {"acc": [0.77, 0.76, 0.75]}},
    "tau_every_position": {"target": 1.869, "reference": 2.786},
}
BENCH = {
    "kind": "eagle3kit.bench",
    "schema": 1,
    "label": "stale",
    "role": "stale",
    "run": None,
    "depth": 3,
    "baseline_tps": 100.0,
    "spec_tps": 123.4,
    "speedup": 1.234,
    "tau_online": 2.5,
    "cycle_ms": 20.0,
    "per_position_acceptance": [0.7, 0.5, 0.3],
}


def _run_dir(root, name, init, taus, batch=4, scalar_loss=False):
    """A train run; ``scalar_loss``: one loss per row as a DFlash run writes (no TTT steps)."""
    d = root / "runs" / name
    (d / "state").mkdir(parents=True)
    rows = [
        {
            "step": 10 * i,
            "loss": 3.0 - 0.1 * i if scalar_loss else [3.0 - 0.1 * i],
            "tau_every_position": t,
        }
        for i, t in enumerate(taus)
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"torn')
    best = max(range(len(taus)), key=lambda i: taus[i])
    (d / "summary.json").write_text(
        json.dumps(
            {
                "kind": "eagle3kit.train",
                "schema": 1,
                "steps": 10 * (len(taus) - 1),
                "best_step": 10 * best,
                "tau_every_position": taus[best],
                "init_from": init,
                "tokens_per_s": 400.0,
                "train_samples": 100,
            }
        )
    )
    data = root / "data"
    data.mkdir(exist_ok=True)
    (data / "data.json").write_text(
        json.dumps({"kind": "eagle3kit.data", "schema": 1, "samples": 10, "tokens": 1000})
    )
    cfg = {"batch_size": batch, "data": str(data), "max_len": 512}
    (d / "state" / "state.json").write_text(json.dumps({"config": cfg}))


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "demo"
    root.mkdir()
    (root / "probe.json").write_text(json.dumps(PROBE))
    (root / "bench-stale.json").write_text(json.dumps(BENCH))
    _run_dir(root, "finetune", "K2", [1.8, 2.2, 2.6, 2.9])
    _run_dir(root, "scratch", None, [1.0, 1.5, 2.1, 2.2])
    return root


def test_report_numbers_trace_to_artefacts(runs, tmp_path):
    r = run_cli("report", runs, "-o", tmp_path / "out", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "123.4" in md and "[bench-stale.json]" in md.replace(
        "| bench-stale.json |", "[bench-stale.json]"
    )
    assert "0.9062" in md and "probe.json" in md
    # scratch's best tau 2.2 is first reached by the warm start at step 10 (x batch 4 = 40
    # samples) and by scratch at step 30 (120 samples): 1 - 40/120 = 67% fewer
    assert "after 40 samples instead of 120 (67% fewer)" in md
    # fine-tune still improving at its last evaluation: (2.9 - 2.6) / ((30 - 20) * 4) per sample
    assert "+7.500 τ per 1000 samples" in md
    # time: 120 samples x (1000 tokens / 10 samples) / 400 tokens/s = 30 s
    assert "best held-out τ 2.900 after 120 samples seen" in md and "≈ 30 s of training" in md
    assert sorted(doc["figures"]) == sorted(
        [
            "per_position.png",
            "training_curves.png",
            "throughput.png",
            "similarity.png",
            "warm_vs_scratch.png",
        ]
    )
    html = (tmp_path / "out" / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 5
    assert "<script" not in html
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", html)  # nothing external


def test_report_bad_input(tmp_path):
    r = run_cli("report", tmp_path / "missing", "-o", tmp_path / "out")
    assert r.code == 2 and "no such directory" in r.err
    (tmp_path / "empty").mkdir()
    r = run_cli("report", tmp_path / "empty", "-o", tmp_path / "out")
    assert r.code == 2 and "no probe, bench, train or plan JSON" in r.err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_report_renders_in_chromium(runs, tmp_path):
    out = tmp_path / "out"
    assert run_cli("report", runs, "-o", out).code == 0
    shot = tmp_path / "report.png"
    base = [
        "chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--user-data-dir=" + str(tmp_path / "profile"),
    ]
    p = subprocess.run(
        base
        + [
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1100,2600",
            f"--screenshot={shot}",
            (out / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.is_file() and shot.stat().st_size > 20_000, p.stderr[-2000:]
    console = [ln for ln in p.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert console == [], console
    # the DOM Chromium built holds the five figures and the game plan
    dom = subprocess.run(
        base + ["--dump-dom", (out / "report.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.stdout.count("<img") == 5 and "Game plan" in dom.stdout


def test_report_with_a_dflash_run_beside_the_eagle3_runs(runs, tmp_path):
    """The demo's DFlash run (runs/scratch-dflash: scalar losses) is drawn in the training
    curves, and the warm start is still compared with the EAGLE-3 scratch run."""
    _run_dir(runs, "scratch-dflash", None, [1.0, 1.1, 1.2, 1.3], scalar_loss=True)
    r = run_cli("report", runs, "-o", tmp_path / "out", "--json")
    assert r.code == 0, r.err
    assert "training_curves.png" in json.loads(r.out)["figures"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "after 40 samples instead of 120 (67% fewer)" in md and "scratch-dflash" in md


def _bench(root, role: str, label: str, tps: float, lookup: bool = False, method: str = "eagle3"):
    """A demo bench file (bench-ROLE.json): its methods rows and the demo's summary keys."""
    import os
    import time

    rows = [{"name": "greedy", "tokens_per_s": {"median": 100.0}}]
    if lookup:
        look = {"name": "lookup", "tokens_per_s": {"median": 153.0}, "speedup": 1.53}
        rows.append({**look, "tau_online": 2.1})
    doc = {**BENCH, "label": label, "role": role, "spec_tps": tps, "speedup": tps / 100.0}
    doc.update(method=method, methods=rows)
    path = root / f"bench-{role}.json"
    path.write_text(json.dumps(doc))
    t = time.time() + len(list(root.glob("bench-*.json")))  # written in the demo's order
    os.utime(path, (t, t))
    return doc


def test_report_headline_is_the_terminals_and_every_start_is_named(runs, tmp_path):
    """report.md's headline has the rows the demo's terminal headline prints (prompt lookup
    included), in its order; the training table and game plan say how each run started: the
    DFlash fine-tune is a warm start from the K2 DFlash drafter, the scratch run fresh."""
    from eagle3kit.demo.steps import headline_row, lookup_row
    from eagle3kit.demo.story import baseline_row

    stale = _bench(runs, "stale", "stale K2 drafter", 120.0, lookup=True)
    terminal = [baseline_row(stale), lookup_row(stale, "bench-stale.json")]
    terminal.append(headline_row("stale K2 drafter", stale, "bench-stale.json"))
    for role, label, method in (
        ("finetuned", "fine-tuned", "eagle3"),
        ("scratch", "from scratch", "eagle3"),
        ("stale-dflash", "stale K2 DFlash", "dflash"),
        ("dflash", "DFlash fine-tuned", "dflash"),
        ("mtp", "MTP (shipped head)", "mtp"),
    ):
        b = _bench(runs, role, label, 110.0, method=method)
        terminal.append({"name": label, "source": f"bench-{role}.json", "tps": b["spec_tps"]})
    _run_dir(runs, "tuned-dflash", "/x/zoo/shipped/k2-dflash-tiny", [1.5, 1.6, 1.7, 1.8])
    r = run_cli("report", runs, "-o", tmp_path / "out", "--json")
    assert r.code == 0, r.err
    md = (tmp_path / "out" / "report.md").read_text()
    head = md.split("## Headline", 1)[1].split("\n\n", 2)[1]
    rows = [ln.split("|")[1].strip() for ln in head.splitlines()[2:]]
    assert (
        rows
        == [h["name"] for h in terminal]
        == [
            "baseline (plain)",
            "prompt lookup",
            "stale K2 drafter",
            "fine-tuned",
            "from scratch",
            "stale K2 DFlash",
            "DFlash fine-tuned",
            "MTP (shipped head)",
        ]
    )
    assert "| prompt lookup | 153.0 | 100.0 | 1.53x | 2.10 | bench-stale.json |" in md
    train = md.split("## Training", 1)[1]
    assert "| tuned-dflash | warm start from k2-dflash-tiny |" in train
    assert "| finetune | warm start from K2 |" in train
    assert "| scratch | fresh (from scratch) |" in train
    plan = md.split("## Game plan", 1)[1]
    assert "warm start from k2-dflash-tiny (tuned-dflash)" in plan
    assert "from scratch" not in train.split("| scratch |")[0]  # only the scratch run is fresh


def test_every_methods_start_is_named():
    """The start of a run from its own summary, for every method's summary: `init_from`
    (EAGLE-3, P-EAGLE, DFlash; None fresh) and an MTP fine-tune's `init`."""
    from eagle3kit.report.render import start_of

    assert start_of({"init_from": "/h/drafters/k2/best"}) == (True, "warm start from k2/best")
    assert start_of({"init_from": "/z/shipped/k2-dflash-tiny"}) == (
        True,
        "warm start from k2-dflash-tiny",
    )
    assert start_of({"init_from": None, "method": "dflash"}) == (False, "fresh (from scratch)")
    assert start_of({"init": "target"}) == (True, "warm start from the target's own MTP head")
    assert start_of({"init": "fresh"}) == (False, "fresh (from scratch)")
    assert start_of({"init": "/r/mtp/head"}) == (True, "warm start from mtp/head")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_chromium_shows_the_headline_rows_and_the_starts(runs, tmp_path):
    """The same in report.html as Chromium builds it: the headline table's first column is
    the terminal's rows, and the DFlash run's start is named."""
    import html as html_mod

    _bench(runs, "stale", "stale K2 drafter", 120.0, lookup=True)
    _bench(runs, "dflash", "DFlash fine-tuned", 110.0, method="dflash")
    _run_dir(runs, "tuned-dflash", "/x/zoo/shipped/k2-dflash-tiny", [1.5, 1.6, 1.7, 1.8])
    out = tmp_path / "out"
    assert run_cli("report", runs, "-o", out).code == 0
    cmd = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
    cmd += ["--user-data-dir=" + str(tmp_path / "profile")]
    cmd += ["--dump-dom", (out / "report.html").as_uri()]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    table = dom.split("Headline", 1)[1].split("</table>", 1)[0]
    cells = [html_mod.unescape(c) for c in re.findall(r"<tr>\s*<td>(.*?)</td>", table)]
    assert cells == ["baseline (plain)", "prompt lookup", "stale K2 drafter", "DFlash fine-tuned"]
    assert "warm start from k2-dflash-tiny" in html_mod.unescape(dom)
