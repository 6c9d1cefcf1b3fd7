"""`eval --features` and `probe --features-new/--features-old` against their in-process forms,
on the zoo pair (dsv3-v1 -> dsv3-v2 tiny) and the demo's K2 drafter; the NEW store comes
through the fake vLLM (tests/fake_vllm_capture.py), the OLD one in-process. Slow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from fake_vllm_capture import FakeVllmCapture

pytestmark = pytest.mark.slow
N_CONV, MAX_LEN, SAMPLES = 120, 96, 6


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from eagle3kit import zoo
    from eagle3kit.core.atomic import atomic_write_text
    from eagle3kit.core.vocab import save_vocab
    from eagle3kit.data.prepare import prepare
    from eagle3kit.demo import k2_drafter
    from eagle3kit.model.drafter import Eagle3Drafter
    from eagle3kit.zoo import corpus

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("probe_features")
    d, v1, v2 = k2_drafter("tiny"), zoo.get("dsv3-v1", size="tiny"), zoo.get("dsv3-v2", size="tiny")
    convs = corpus.spaced(corpus.chat_samples(corpus.files("test", limit=12)), N_CONV)
    atomic_write_text(tmp / "conv.jsonl", "".join(json.dumps(c) + "\n" for c in convs))
    prepare([tmp / "conv.jsonl"], v2, tmp / "data", max_length=128)
    dr = Eagle3Drafter.from_pretrained(d)
    save_vocab(tmp / "vocab.safetensors", dr.d2t, dr.t2d)  # the store's teacher = D's vocab
    yield {"drafter": str(d), "v1": str(v1), "v2": str(v2), "tmp": tmp}
    torch.set_num_threads(before)


def _engine_store(cli, p, target: str, out: Path) -> None:
    """NEW's store through the fake engine: D's h[2, 4, 5] plus h[1, 3] (the other reading)."""
    states = p["tmp"] / f"hs-{out.name}"
    states.mkdir()
    common = ["--target", target, "--drafter", p["drafter"], "--extra-layers", "1,3"]
    r = cli("data", "capture", *common, "--launch-command", "--states-dir", states, "--json")
    assert r.code == 0, r.err
    launch = json.loads(r.out)
    assert launch["layer_ids"] == [1, 2, 3, 4, 5, 8] and launch["h_indices"] == [2, 4, 5, 1, 3]
    argv = launch["launch_command"]
    spec = json.loads(argv.split("--speculative-config ")[1].split(" ")[0].strip("'"))
    kv = json.loads(argv.split("--kv-transfer-config ")[1].split(" ")[0].strip("'"))
    with FakeVllmCapture(target, spec, kv) as fake:
        r = cli(
            "data",
            "capture",
            p["tmp"] / "data",
            *common,
            "--engine",
            "vllm",
            "--url",
            fake.url,
            "--states-dir",
            states,
            "-o",
            out,
            "--vocab",
            p["tmp"] / "vocab.safetensors",
            "--topk",
            "0",
        )
    assert r.code == 0, r.err


def _inprocess_store(p, target: str, out: Path) -> None:
    from eagle3kit.data.store import capture
    from eagle3kit.model.target import TargetModel

    tm = TargetModel.from_pretrained(target, aux_layers=(2, 4, 5, 1, 3))
    capture(p["tmp"] / "data", tm, out, vocab=p["tmp"] / "vocab.safetensors", topk=None)


@pytest.fixture(scope="module")
def stores(cli_mod, pair):
    new, old = pair["tmp"] / "new", pair["tmp"] / "old"
    _engine_store(cli_mod, pair, pair["v2"], new)
    _inprocess_store(pair, pair["v1"], old)
    return new, old


@pytest.fixture(scope="module")
def cli_mod():
    from conftest import run_cli

    return run_cli


def _close(a, b, tol):
    if isinstance(a, list):
        assert len(a) == len(b) and all(_close(x, y, tol) for x, y in zip(a, b, strict=True))
        return True
    assert abs(a - b) <= tol, (a, b)
    return True


def test_probe_from_stores_matches_inprocess(cli_mod, pair, stores):
    """Tolerances (the stores round aux to fp8 and the teacher to fp16): accept lengths and
    per-position acceptance within 0.03, cosine/CKA/norm ratio within 0.01, the same verdict,
    and the same chosen reading and layers unless the margin lies within the tolerance of the
    rule's CLEAR_MARGIN (then either choice is right, and its own figures are compared)."""
    from eagle3kit.measure.probe import CLEAR_MARGIN, probe

    new, old = stores
    ref = probe(
        pair["drafter"],
        pair["v2"],
        pair["v1"],
        data=str(pair["tmp"] / "data"),
        samples=SAMPLES,
        max_len=MAX_LEN,
        online_prompts=0,
    )
    r = cli_mod(
        "probe",
        "--drafter",
        pair["drafter"],
        "--features-new",
        new,
        "--features-old",
        old,
        "--samples",
        str(SAMPLES),
        "--max-len",
        str(MAX_LEN),
        "--json",
    )
    assert r.code == 0, r.err
    got = json.loads(r.out)
    assert got["verdict"] == ref["verdict"]
    assert got["data"]["sequences"] == ref["data"]["sequences"] == SAMPLES
    assert got["data"]["tokens"] == ref["data"]["tokens"]
    # which reading wins on six samples of the drifted tiny v2 is not this test's question
    # (test_probe checks detection on the drafter's own target): only that both forms agree
    # where the accept lengths' tolerance (0.03 each) cannot move the choice across the rule
    margin = ref["aux"]["chosen"]["margin_tau_every_position"]
    decided = margin is None or abs(margin - CLEAR_MARGIN) > 0.06
    if margin is None or margin > 0.06:
        assert got["aux"]["chosen"]["best_by_data"] == ref["aux"]["chosen"]["best_by_data"]
    if decided:
        for k in ("reading", "layers"):
            assert got["aux"]["chosen"][k] == ref["aux"]["chosen"][k]
    assert got["aux"]["not_in_store"] == []
    for reading, a in ref["aux"]["acceptance"].items():
        b = got["aux"]["acceptance"][reading]
        _close(b["acc"], a["acc"], 0.03)
        _close(b["tau_every_position"], a["tau_every_position"], 0.03)
    _close(got["tau_every_position"]["reference"], ref["tau_every_position"]["reference"], 0.03)
    # on the new target: the in-process figure under the reading the stores chose
    reading = got["aux"]["chosen"]["reading"]
    in_process = ref["aux"]["acceptance"][reading]["tau_every_position"]
    _close(got["tau_every_position"]["target"], in_process, 0.03)
    # similarity of the chosen layers: compared layer by layer where both measured the layer
    assert [b["layer"] for b in got["similarity"]] == got["aux"]["chosen"]["layers"]
    theirs = {a["layer"]: a for a in ref["similarity"]}
    common = [b for b in got["similarity"] if b["layer"] in theirs]
    assert common, "the two choices share no layer"
    for b in common:
        for key in ("cosine_mean", "cosine_p10", "cka", "norm_ratio"):
            _close(b[key], theirs[b["layer"]][key], 0.01)
    if reading == ref["aux"]["chosen"]["reading"]:
        for key in ("cosine_mean", "cka", "norm_ratio"):
            _close(got["fc_similarity"][key], ref["fc_similarity"][key], 0.01)
    if decided:
        assert got["aux"]["engines"]["vllm"]["ok"] == ref["aux"]["engines"]["vllm"]["ok"]
    print("probe in-process vs stores:", ref["tau_every_position"], got["tau_every_position"])


def test_eval_from_store_matches_inprocess(cli_mod, pair, stores):
    """Same held-out samples; accept length and per-position acceptance within 0.03."""
    new, _ = stores
    a = cli_mod(
        "eval",
        "--target",
        pair["v2"],
        "--drafter",
        pair["drafter"],
        "--data",
        pair["tmp"] / "data",
        "--json",
    )
    b = cli_mod("eval", "--drafter", pair["drafter"], "--features", new, "--json")
    assert a.code == 0 and b.code == 0, a.err + b.err
    ra, rb = json.loads(a.out), json.loads(b.out)
    assert ra["samples"] == rb["samples"]
    _close(rb["tau_walk"], ra["tau_walk"], 0.03)
    _close(rb["per_position_acceptance"], ra["per_position_acceptance"], 0.03)
    print("eval in-process vs store:", ra["tau_walk"], rb["tau_walk"], rb["cycles"])
