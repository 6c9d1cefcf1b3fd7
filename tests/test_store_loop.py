"""One capture serves the loop: a store holding a superset of layers (the drafter's, --extra-layers,
the probe's candidates) feeds `train --features`, `eval --features` and `probe` from stores, each
picking its layers by h-index; held-out sizing from stores; `--reference-features`; stores of the
previous version stay readable. On the zoo's llama-v1 tiny (8 layers, default aux h[2, 4, 5])."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_store import make_data

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.data.store import FeatureStore

N = 12  # samples in DATA


@pytest.fixture(scope="module")
def cli_mod():
    from conftest import run_cli

    return run_cli


@pytest.fixture(scope="module")
def env(tmp_path_factory, cli_mod):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("loop")
    model = zoo.get("llama-v1", size="tiny")
    tm = TargetModel.from_pretrained(str(model))
    ids = make_data(tmp / "data", tm.vocab_size, n=N, seed=3)
    del tm
    e = {"model": Path(model), "tmp": tmp, "ids": ids}
    r = _capture(cli_mod, e, "plain")  # the drafter's layers only, not held-out data
    assert r.code == 0, r.err
    r = _capture(cli_mod, e, "low", "--aux-layers", "1", "2", "3")
    assert r.code == 0, r.err
    yield e
    torch.set_num_threads(n)


def _capture(cli, env, name: str, *extra: str):
    return cli(
        "data",
        "capture",
        env["tmp"] / "data",
        "--target",
        env["model"],
        "-o",
        env["tmp"] / name,
        "--topk",
        "8",
        "--json",
        *extra,
    )


def _train(cli, env, out: Path, *extra: str):
    return cli(
        "train",
        "--target",
        env["model"],
        "-o",
        out,
        "--steps",
        "1",
        "--ttt-steps",
        "2",
        "--batch-size",
        "2",
        "--max-len",
        "24",
        "--eval-batch",
        "4",
        "--threads",
        "1",
        "--json",
        *extra,
    )


@pytest.fixture(scope="module")
def drafter(cli_mod, env):
    """A drafter trained (one step) from the plain store, saved in SGLang's layout: it reads
    h[2, 4, 5] and writes the ids 1, 3, 4 (SGLang's id x = h[x + 1])."""
    run = env["tmp"] / "run"
    r = _train(cli_mod, env, run, "--features", env["tmp"] / "plain", "--heldout", "2")
    assert r.code == 0, r.err
    return run


@pytest.fixture(scope="module")
def superset(cli_mod, env, drafter):
    """One capture for the loop: the drafter's h[2, 4, 5], --extra-layers 7, and the probe's
    candidates of its written ids (1, 3, 4): h[X] = h[1, 3, 4] and h[X+1] = h[2, 4, 5] (held):
    so 7, then 1 and 3."""
    r = _capture(
        cli_mod,
        env,
        "super",
        "--drafter",
        drafter / "best",
        "--extra-layers",
        "7",
        "--probe-layers",
        "--heldout-data",
    )
    assert r.code == 0, r.err
    return env["tmp"] / "super"


def test_superset_manifest(env, superset):
    man = json.loads((superset / "manifest.json").read_text())
    assert man["aux_layers"] == [2, 4, 5, 7, 1, 3]
    assert man["drafter_layers"] == [2, 4, 5]
    assert man["heldout_data"] is True
    plain = json.loads((env["tmp"] / "plain" / "manifest.json").read_text())
    assert plain["aux_layers"] == plain["drafter_layers"] == [2, 4, 5]
    assert plain["heldout_data"] is False
    # the target is recorded as an absolute path
    assert man["target"]["name_or_path"] == str(env["model"].resolve())


def test_relative_target_recorded_absolute(cli, env, tmp_path, monkeypatch):
    monkeypatch.chdir(env["model"].parent)
    r = cli(
        "data",
        "capture",
        env["tmp"] / "data",
        "--target",
        env["model"].name,  # relative to the working directory
        "-o",
        tmp_path / "s",
        "--topk",
        "4",
    )
    assert r.code == 0, r.err
    man = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert man["target"]["name_or_path"] == str(env["model"].resolve())


def test_layers_picked_from_the_superset_equal_a_plain_capture(env, superset):
    """Each layer is quantised with its own per-token scale, so the drafter's columns of the
    superset are bit for bit those of a store captured with the drafter's layers alone."""
    sup, plain, low = (FeatureStore(env["tmp"] / n) for n in ("super", "plain", "low"))
    rows = list(range(N))
    a, b = sup.get(rows, [2, 4, 5]), plain.get(rows)
    for name in ("input_ids", "loss_mask", "target_argmax", "teacher_ids", "teacher_logp", "aux"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    H = a.aux.shape[-1] // 3
    # another order and another store: h[3] and h[2] of the superset == the low store's
    c, d = sup.get(rows, [3, 2]), low.get(rows, [3, 2])
    assert c.aux.shape[-1] == 2 * H and torch.equal(c.aux, d.aux)
    assert torch.equal(sup.get(rows).aux[..., : 3 * H], a.aux)  # the default: every layer
    with pytest.raises(Eagle3Error) as e:
        plain.get(rows, [2, 3])
    msg = str(e.value)
    assert str(env["tmp"] / "plain" / "manifest.json") in msg and "missing h[3]" in msg


def test_train_picks_the_drafter_layers_and_takes_heldout_counts(cli, env, drafter, superset):
    from eagle3kit.checkpoint.eagle3.reader import drafter_header

    summary = json.loads((drafter / "summary.json").read_text())
    assert summary["heldout_samples"] == 2  # `--heldout 2`: a count, as the help says
    assert summary["warnings"] and "rests on 2 sequences" in summary["warnings"][0]
    # a fresh drafter from the superset reads the layers captured as the drafter's
    r = _train(cli, env, env["tmp"] / "run-super", "--features", superset, "--heldout", "8")
    assert r.code == 0, r.err
    (w,) = json.loads(r.out)["warnings"]  # 8 held out: no few-sequences warning; but
    assert "captured from held-out data" in w  # the store was declared held-out data
    spec = drafter_header(str(env["tmp"] / "run-super" / "best")).spec
    assert list(spec.aux_layers) == [2, 4, 5]


def test_missing_layer_is_one_line_naming_the_store(cli, env, drafter):
    low = env["tmp"] / "low"  # h[1, 2, 3]; the drafter reads h[2, 4, 5]
    r = cli("eval", "--drafter", drafter / "best", "--features", low, "--json")
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert str(low / "manifest.json") in r.err and "missing h[4, 5]" in r.err
    r = _train(cli, env, env["tmp"] / "run-low", "--features", low, "--init-from", drafter / "best")
    assert r.code == 2 and str(low / "manifest.json") in r.err and "missing h[4, 5]" in r.err


def test_eval_heldout_sizing(cli, env, drafter, superset):
    def run(store: str, *extra: str) -> dict:
        r = cli("eval", "--drafter", drafter / "best", "--features", env["tmp"] / store, *extra)
        assert r.code == 0, r.err
        return r

    doc = json.loads(run("super", "--json").out)  # captured from held-out data: all of it
    assert doc["samples"] == N and doc["heldout"]["store_samples"] == N
    assert "captured from held-out data" in doc["heldout"]["rule"] and doc["warnings"] == []
    assert doc["aux_layers"] == [2, 4, 5]
    doc = json.loads(run("plain", "--json").out)  # otherwise DATA's 5% split: round(0.6) -> 1
    assert doc["samples"] == 1 and "0.05 of the store" in doc["heldout"]["rule"]
    assert "rests on 1 sequence " in doc["warnings"][0]
    doc = json.loads(run("plain", "--heldout", "0.5", "--json").out)
    assert doc["samples"] == 6 and doc["warnings"]
    doc = json.loads(run("plain", "--heldout", "9", "--json").out)
    assert doc["samples"] == 9 and doc["warnings"] == []
    assert json.loads(run("plain", "--heldout", "1.0", "--json").out)["samples"] == N
    text = run("plain", "--heldout", "3").out  # stated in the text output too
    assert "held-out split by sample id, 3 samples" in text and "warning" in text
    for bad in ("0", "1.5", "x"):
        r = cli(
            "eval",
            "--drafter",
            drafter / "best",
            "--features",
            env["tmp"] / "plain",
            "--heldout",
            bad,
        )
        assert r.code == 2 and "--heldout" in r.err, (bad, r.err)
    r = cli(
        "eval",
        "--drafter",
        drafter / "best",
        "--features",
        env["tmp"] / "plain",
        "--heldout",
        str(N + 1),
    )
    assert r.code == 2 and f"at most the store's {N} samples" in r.err


def test_eval_heldout_counts_on_data(cli, env, drafter):
    """`eval --data` takes the same counts; a count of 3 scores 3 held-out samples."""
    for amount, n in (("3", 3), ("1", 1), ("1.0", N), (str(N), N)):  # 3; a count of 1; all; all
        r = cli(
            "eval",
            "--target",
            env["model"],
            "--drafter",
            drafter / "best",
            "--data",
            env["tmp"] / "data",
            "--heldout",
            amount,
            "--json",
        )
        assert r.code == 0, (amount, r.err)
        doc = json.loads(r.out)
        assert doc["samples"] == n, amount
        if amount == "3":
            assert "rests on 3 sequences" in doc["warnings"][0]


def test_probe_from_one_store_with_reference_features(cli, env, drafter, superset):
    """The superset store serves the probe (both readings held); given as its own reference
    (`--reference-features`), similarity is 1 and the two taus are equal."""
    r = cli(
        "probe",
        "--drafter",
        drafter / "best",
        "--features-new",
        env["tmp"] / "super",
        "--reference-features",
        env["tmp"] / "super",
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert {c["reading"] for c in doc["aux"]["candidates"]} == {"h[X]", "h[X+1]"}
    assert doc["aux"]["not_in_store"] == []
    assert doc["data"]["sequences"] == N and doc["warnings"] == []
    assert "captured from held-out data" in doc["data"]["heldout"]["rule"]
    assert doc["tau_every_position"]["target"] == doc["tau_every_position"]["reference"]
    assert all(abs(s["cosine_mean"] - 1.0) < 1e-6 for s in doc["similarity"])
    # the plain store holds one reading and its 5% split: 1 sequence, said
    r = cli(
        "probe", "--drafter", drafter / "best", "--features-new", env["tmp"] / "plain", "--json"
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["aux"]["not_in_store"] == ["h[X]"]  # h[1, 3, 4]: not captured there
    assert doc["data"]["sequences"] == 1 and "rests on 1 sequence" in doc["warnings"][0]
    r = cli("probe", "--drafter", drafter / "best", "--features-new", env["tmp"] / "plain")
    assert r.code == 0 and "warning" in r.out and "rests on 1 sequence" in r.out


@pytest.mark.slow  # trains or decodes: a second or more (fast-subset budget)
def test_train_reference_features_and_early_refusal(cli, env, drafter, superset, monkeypatch):
    from eagle3kit.model.target import TargetModel

    def no_load(*a, **k):
        raise AssertionError("a target was loaded")

    monkeypatch.setattr(TargetModel, "from_pretrained", no_load)
    r = _train(
        cli,
        env,
        env["tmp"] / "run-ref-t",
        "--features",
        env["tmp"] / "super",
        "--reference-target",
        env["model"],
    )
    assert r.code == 2 and "--reference-features" in r.err and "a target was loaded" not in r.err
    assert not (env["tmp"] / "run-ref-t").exists()
    r = _train(
        cli,
        env,
        env["tmp"] / "run-ref",
        "--features",
        env["tmp"] / "super",
        "--init-from",
        drafter / "best",
        "--reference-features",
        env["tmp"] / "plain",
        "--heldout",
        "8",
    )
    assert r.code == 0, r.err
    ref = json.loads(r.out)["reference"]
    # the same target's two stores: the same held-out features, the same accept lengths
    assert ref["features"] == str(env["tmp"] / "plain")
    assert ref["target"] == str(env["model"].resolve())
    assert ref["before"]["old"] == ref["before"]["new"]
    assert ref["after"]["old"] == ref["after"]["new"]
    r = _train(
        cli,
        env,
        env["tmp"] / "run-ref2",
        "--data",
        env["tmp"] / "data",
        "--reference-features",
        env["tmp"] / "plain",
    )
    assert r.code == 2 and "--reference-features goes with --features" in r.err


def test_previous_version_store_stays_readable(cli, env, drafter, tmp_path):
    """A store as the previous version wrote it (no drafter_layers, no heldout_data, a
    relative target path): read, evaluated and resumed as before."""
    import shutil

    old = tmp_path / "old"
    shutil.copytree(env["tmp"] / "plain", old)
    man = json.loads((old / "manifest.json").read_text())
    del man["drafter_layers"], man["heldout_data"]
    man["target"]["name_or_path"] = "relative/llama-v1-tiny"
    (old / "manifest.json").write_text(json.dumps(man))
    fs = FeatureStore(old)
    assert fs.layers == [2, 4, 5] and fs.heldout_data is False
    r = cli("eval", "--drafter", drafter / "best", "--features", old, "--json")
    # the drafter has no embedding: the recorded relative target is not found from here; one
    # line, and --target says where it is
    assert r.code == 2 and "relative/llama-v1-tiny" in r.err and len(r.err.splitlines()) == 1
    r = cli(
        "eval", "--drafter", drafter / "best", "--features", old, "--target", env["model"], "--json"
    )
    assert r.code == 0, r.err
    assert json.loads(r.out)["samples"] == 1
    r = cli(
        "data",
        "capture",
        env["tmp"] / "data",
        "--target",
        env["model"],
        "-o",
        old,
        "--topk",
        "8",
        "--json",
    )
    assert r.code == 0, r.err  # the same command resumes the old store: nothing left to do
    assert json.loads(r.out)["resumed_from"] == N
