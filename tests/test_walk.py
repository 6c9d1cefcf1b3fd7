"""The user's whole story for a target that only lives in the engine, walked with the CLI.

The user serves K2.5 (about 1T parameters, MoE + MLA) with SGLang or vLLM and owns a drafter
trained for K2. Here K2 and K2.5 are a zoo tiny pair (v1 -> v2), the K2 drafter is the test
helpers' accepting drafter of v1, and the "engines" are the test fakes, which run the whole
zoo members: tests/fake_engine.py (a live server's speculative metrics), tests/openai_server.py
(regeneration) and tests/fake_vllm_capture.py (vLLM's hidden-state capture). What the user
has of each target is a stand-in holding only what one downloads from a 1T model: config,
tokenizer, `model.safetensors.index.json` and the shard with the embedding, final norm and
lm_head (test_partial_target.make_partial), or the `target slim` directory made from it.

The walk, in order (docs/engine-capture.md copies these commands):
bench --url (before) -> plan --from -> compat per engine release -> data regenerate via the
server -> data prepare -> data capture (one per target, --probe-layers) -> probe from stores ->
train --features --init-from K2D --reference-features -> eval --features -> convert ->
bench --url (after) -> report.

Each step runs through the CLI in this process, counting the target tensors it reads (every
read goes through `Checkpoint.info`) and the target models it builds (`TargetModel.
from_pretrained`): no step builds one, and of a stand-in only the embedding, norm and lm_head
are ever read. The fakes load their full members before a step starts, outside the count.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_engine import FakeEngine
from fake_vllm_capture import FakeVllmCapture
from openai_server import FakeOpenAIServer
from test_partial_target import HEADS, make_partial

from eagle3kit.checkpoint.io.safetensors_io import Checkpoint

pytestmark = pytest.mark.slow
DOC = Path(__file__).resolve().parents[1] / "docs" / "engine-capture.md"
N_TRAIN, N_BENCH, MAX_LEN = 24, 3, 96
WALKS = [("dsv3", "partial"), ("dsv3", "slim"), ("llama", "partial")]


# ---------------------------------------------------------------- the world the user lives in


def _conversations(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _world(arch: str, tmp: Path) -> dict[str, Any]:
    """Full members (the engines' weights), stand-ins, the K2 drafter, conversations."""
    from decode_helpers import accepting_drafter_dir

    from eagle3kit import zoo
    from eagle3kit.model.loading import load_pair
    from eagle3kit.zoo import corpus

    old_full = Path(zoo.get(f"{arch}-v1", size="tiny"))
    new_full = Path(zoo.get(f"{arch}-v2", size="tiny"))
    k2d = accepting_drafter_dir(f"{arch}-v1")  # trained for v1: the user's K2 drafter
    make_partial(old_full, tmp / "K2")
    make_partial(new_full, tmp / "K2.5")
    convs = corpus.spaced(corpus.chat_samples(corpus.files("test", limit=12)), N_TRAIN + N_BENCH)
    new_tm, stale = load_pair(str(new_full), k2d)  # what the engine serves: K2.5 + K2 drafter
    return {
        "old_full": old_full,
        "new_full": new_full,
        "k2d": Path(k2d),
        "K2": tmp / "K2",
        "K2.5": tmp / "K2.5",
        "convs": _conversations(tmp / "conversations.jsonl", convs[:N_TRAIN]),
        "prompts": _conversations(tmp / "prompts.jsonl", convs[N_TRAIN:]),
        "new_tm": new_tm,
        "stale": stale,
    }


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    made: dict[str, dict] = {}

    def get(arch: str) -> dict[str, Any]:
        if arch not in made:
            made[arch] = _world(arch, tmp_path_factory.mktemp(f"walk-{arch}"))
        return made[arch]

    yield get
    torch.set_num_threads(n)


# ---------------------------------------------------------------- counting what a step reads


class Steps:
    """Run one CLI step; record the target tensors it read and the target models it built."""

    def __init__(self, cli, monkeypatch, stand_ins: list[Path], engines: list[Path]) -> None:
        """`stand_ins`: what the user has of the targets; `engines`: the full members only the
        fakes may read."""
        from eagle3kit.model.target import TargetModel

        self.cli, self.stand_ins = cli, {str(p) for p in stand_ins}
        self.engines = [p.resolve() for p in engines]
        self.reads: list[tuple[str, str]] = []
        self.builds: list[str] = []
        self.log: list[tuple[str, set[str]]] = []
        self.argvs: list[list[str]] = []
        info, build = Checkpoint.info, TargetModel.from_pretrained.__func__

        def counted_info(ck, name):
            self.reads.append((str(ck.source), name))
            return info(ck, name)

        def counted_build(cls, path, *a, **kw):
            self.builds.append(str(path))
            return build(cls, path, *a, **kw)

        monkeypatch.setattr(Checkpoint, "info", counted_info)
        monkeypatch.setattr(TargetModel, "from_pretrained", classmethod(counted_build))

    def _engines_own(self, source: str) -> bool:
        p = Path(source).resolve()
        return any(p == e or e in p.parents for e in self.engines)

    def __call__(self, name: str, *argv, out: Path | None = None, codes=(0,)) -> Any:
        self.reads.clear()
        self.builds.clear()
        self.argvs.append([str(a) for a in argv])
        t0 = time.perf_counter()
        r = self.cli(*argv)
        print(f"walk step {name}: {time.perf_counter() - t0:.1f} s")
        assert r.code in codes, f"{name}: exit {r.code}\n{r.err[-3000:]}"
        assert self.builds == [], f"{name} built a target model: {self.builds}"
        full = sorted({src for src, _ in self.reads if self._engines_own(src)})
        assert full == [], f"{name} read the engine's full weights: {full}"
        of_targets = {n for src, n in self.reads if src in self.stand_ins}
        assert of_targets <= set(HEADS), f"{name} read {sorted(of_targets - set(HEADS))}"
        self.log.append((name, of_targets))
        if out is not None:
            out.write_text(r.out)
        return json.loads(r.out) if "--json" in argv else r


def _launch(step: Steps, target: Path, drafter: Path, states: Path) -> tuple[dict, dict, dict]:
    """`data capture --launch-command`: the JSON, and the two configs the engine gets."""
    states.mkdir()
    doc = step(
        "capture --launch-command",
        "data",
        "capture",
        "--target",
        target,
        "--drafter",
        drafter,
        "--probe-layers",
        "--launch-command",
        "--states-dir",
        states,
        "--json",
    )
    argv = shlex.split(doc["launch_command"])
    assert argv[:3] == ["vllm", "serve", str(target)]
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    return doc, spec, kv


def _capture(step: Steps, w, full: Path, target: Path, data: Path, out: Path) -> None:
    """One capture through the (fake) vLLM serving `full` of the target `target` stands for."""
    states = out.parent / f"hs-{out.name}"
    _, spec, kv = _launch(step, target, w["k2d"], states)
    with FakeVllmCapture(str(full), spec, kv) as vllm:
        step(
            f"capture {out.name}",
            "data",
            "capture",
            data,
            "--target",
            target,
            "--drafter",
            w["k2d"],
            "--probe-layers",
            "--vocab",
            w["k2d"],
            "--engine",
            "vllm",
            "--url",
            vllm.url,
            "--states-dir",
            states,
            "-o",
            out,
            "--timeout",
            "30",
            "--lock-timeout",
            "10",
            "--json",
        )


def _bench(step: Steps, w, drafter, path: Path, out: Path) -> dict:
    """`bench --url` of K2.5 served with `drafter` (launched from `path`, which the server
    reports as its draft model) against K2.5 served plain."""
    spec = FakeEngine(w["new_tm"], drafter, engine="sglang", draft_path=str(path))
    with spec, FakeEngine(w["new_tm"], None, engine="sglang") as base:
        doc = step(
            out.stem,
            "bench",
            "--url",
            spec.url,
            "--baseline-url",
            base.url,
            "--data",
            w["prompts"],
            "--prompts",
            str(N_BENCH),
            "--repeats",
            "1",
            "--max-new-tokens",
            "16",
            "--endpoint",
            "generate",
            "--json",
            out=out,
        )
        assert doc["tau_online"] == pytest.approx(spec.tau())  # the engine's own count
    return doc


# ---------------------------------------------------------------- the walk


@pytest.mark.parametrize(("arch", "kind"), WALKS, ids=[f"{a}-{k}" for a, k in WALKS])
def test_the_whole_story(cli, monkeypatch, worlds, tmp_path, arch, kind):
    from eagle3kit.model.loading import load_drafter

    w = worlds(arch)
    out = tmp_path / "out"  # every JSON the report reads
    out.mkdir()
    k25, k2, k2d = w["K2.5"], w["K2"], w["k2d"]
    step = Steps(
        cli, monkeypatch, [k25, k2, tmp_path / "K2.5-slim"], [w["old_full"], w["new_full"]]
    )
    if kind == "slim":  # the user's other choice: one file with the three tensors
        step("target slim", "target", "slim", w["K2.5"], "-o", tmp_path / "K2.5-slim")
        k25 = tmp_path / "K2.5-slim"

    # 1. How fast is K2.5 served with the K2 drafter today?
    before = _bench(step, w, w["stale"], k2d, out / "bench-before.json")
    # 2. What does the measured cycle need to pay off?
    plan = step("plan", "plan", "--from", out / "bench-before.json", "--json", codes=(0, 1))
    (out / "plan.json").write_text(json.dumps(plan))
    assert plan["tau"] == pytest.approx(before["tau_online"])  # bench JSON read as such
    # 3. Does each engine release read the K2 drafter's layers right on K2.5?
    for engine in ("sglang@0.5.12", "sglang", "vllm@0.21", "vllm"):
        doc = step(
            f"compat {engine}", "compat", k2d, k25, "--engine", engine, "--json", codes=(0, 1)
        )
        assert doc["mode"] == "drafter-target"
    # 4. K2.5's own answers to the conversations, from the server
    with FakeOpenAIServer(str(w["new_full"])) as srv:
        step(
            "data regenerate",
            "data",
            "regenerate",
            w["convs"],
            "--server",
            srv.url,
            "-o",
            tmp_path / "regen.jsonl",
            "--max-tokens",
            "24",
            "--concurrency",
            "2",
            "--json",
        )
        assert srv.answered == N_TRAIN
    # 5. Tokenized with K2.5's tokenizer and chat template
    data = tmp_path / "data"
    step(
        "data prepare",
        "data",
        "prepare",
        tmp_path / "regen.jsonl",
        "--target",
        k25,
        "-o",
        data,
        "--max-length",
        str(MAX_LEN),
        "--json",
    )
    # 6. One capture per target, through the engine: K2.5 (probe, train, eval) and K2 (reference)
    _capture(step, w, w["new_full"], k25, data, tmp_path / "store")
    _capture(step, w, w["old_full"], k2, data, tmp_path / "store-k2")
    # 7. Can the K2 drafter serve K2.5 as it is (Phase 0)?
    probe = step(
        "probe",
        "probe",
        "--drafter",
        k2d,
        "--features-new",
        tmp_path / "store",
        "--reference-features",
        tmp_path / "store-k2",
        "--samples",
        "8",
        "--max-len",
        str(MAX_LEN),
        "--json",
        out=out / "probe.json",
    )
    assert probe["verdict"] in ("plug-in", "fine-tune", "from-scratch")
    assert probe["aux"]["not_in_store"] == []  # the one capture holds both readings
    if probe["data"]["sequences"] < 8:  # the store's 5% split of a small DATA
        assert any("fewer than 8" in x for x in probe["warnings"]), probe["warnings"]
    # 8. Fine-tune it on K2.5's features, before/after on both stores
    run = out / "run"
    summary = step(
        "train",
        "train",
        "--target",
        k25,
        "--features",
        tmp_path / "store",
        "--init-from",
        k2d,
        "--reference-features",
        tmp_path / "store-k2",
        "-o",
        run,
        "--steps",
        "4",
        "--ttt-steps",
        "3",
        "--batch-size",
        "4",
        "--max-len",
        str(MAX_LEN),
        "--heldout",
        "4",
        "--eval-samples",
        "4",
        "--eval-batch",
        "4",
        "--threads",
        "1",
        "--json",
    )
    assert (run / "best" / "model.safetensors").is_file(), summary
    # 9. Offline acceptance of the result on held-out samples of the same store
    ev = step(
        "eval",
        "eval",
        "--drafter",
        run / "best",
        "--features",
        tmp_path / "store",
        "--target",
        k25,
        "--heldout",
        "4",
        "--json",
        out=out / "eval.json",
    )
    assert ev["kind"] == "eagle3kit.eval" and ev["tau_walk"] >= 1
    assert ev["samples"] == summary["heldout_samples"] == 4  # the samples training left out
    # 10. Written for the serving engine, with K2.5's embedding
    served = tmp_path / "served"
    step(
        "convert",
        "convert",
        run / "best",
        "--to",
        "sglang",
        "--embed-from",
        k25,
        "-o",
        served,
        "--json",
        out=out / "convert.json",
    )
    # 11. How fast is K2.5 served with the fine-tuned drafter?
    tuned = load_drafter(str(served)).drafter  # the engine loads what we wrote
    after = _bench(step, w, tuned, served, out / "bench-after.json")
    # 12. The story in one report
    rep = tmp_path / "report"
    doc = step("report", "report", out, "-o", rep, "--json")
    md = (rep / "report.md").read_text()
    _check_report(doc, md, out, before, after)
    _check_reads(step.log)
    _check_docs(step.argvs)


def _check_report(doc: dict, md: str, out: Path, before: dict, after: dict) -> None:
    """Every JSON of the walk rendered or listed as skipped; before first, then after, and the
    line that says what changed."""
    found = doc["found"]
    given = {p.name for p in out.glob("*.json")} | {"run/summary.json"}  # the walk's outputs
    listed = {c for cites in found.values() for c in cites}
    listed |= {s.split(": ")[0] for s in doc["skipped"]}
    assert given <= listed, (sorted(given - listed), doc)
    assert sorted(found["bench_live"]) == ["bench-after.json", "bench-before.json"], found
    assert found["eval"] == ["eval.json"] and found["plan"] == ["plan.json"], found
    line = next((x for x in md.splitlines() if "Before → after: speedup" in x), None)
    assert line is not None, md
    sa, sb = before["comparison"][0]["decode_speedup"], after["comparison"][0]["decode_speedup"]
    assert f"speedup {sa:.2f}x → {sb:.2f}x" in line, line
    assert f"τ {before['tau_online']:.3f} → {after['tau_online']:.3f}" in line, line
    assert "[bench-before.json, bench-after.json]" in line, line


def _check_reads(log: list[tuple[str, set[str]]]) -> None:
    """What of a target each step read (of a stand-in; nothing else is a target here)."""
    by = dict(log)
    assert by["capture store"] == {"model.norm.weight", "lm_head.weight"}
    assert by["train"] <= {"model.embed_tokens.weight"}
    assert by["probe"] <= {"model.embed_tokens.weight"}
    assert by["convert"] == {"model.embed_tokens.weight"}
    for name in ("bench-before", "bench-after", "plan", "report"):
        assert by[name] == set(), (name, by[name])


# ---------------------------------------------------------------- docs/engine-capture.md

VALUES = ("--engine", "--endpoint", "--to")  # choices compared by value, not only by name


def doc_walk() -> list[list[str]]:
    """The walk's commands in docs/engine-capture.md, without `eagle3kit` and redirections."""
    text = DOC.read_text()
    m = re.search(r"<!-- the walk: tests/test_walk.py -->\s*```console\n(.*?)```", text, re.S)
    assert m, f"{DOC}: the walk's console block is missing"
    cmds = []
    for line in m.group(1).replace("\\\n", " ").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            argv = shlex.split(line)
            assert argv[0] == "eagle3kit", line
            cmds.append(argv[1 : argv.index(">") if ">" in argv else None])
    return cmds


def _verb(argv: list[str]) -> str:
    return " ".join(argv[:2]) if argv[0] in ("data", "target") else argv[0]


def _covers(step: list[str], cmd: list[str]) -> bool:
    """The step runs the doc's command: same verb, every option the doc gives (and its value,
    for VALUES)."""
    if _verb(step) != _verb(cmd):
        return False
    for i, a in enumerate(cmd):
        if a.startswith("-") and a not in step:
            return False
        if a in VALUES and step[step.index(a) + 1] != cmd[i + 1]:
            return False
    return True


def _check_docs(argvs: list[list[str]]) -> None:
    """Every command of the docs' walk is a step of this one, in order; every verb the walk
    runs is in the docs (`target slim` is told in its own section)."""
    i = 0
    for cmd in doc_walk():
        while i < len(argvs) and not _covers(argvs[i], cmd):
            i += 1
        assert i < len(argvs), f"{DOC.name}: `eagle3kit {shlex.join(cmd)}` is no step (in order)"
        i += 1
    assert {_verb(a) for a in argvs} - {"target slim"} == {_verb(c) for c in doc_walk()}
