"""`train --config FILE`: one options object (train/config.py TrainOptions) read by the command
line and by a file alike; a file holding every option gives the run the flags give (bitwise,
on CPU, with a seed); a bad file is one line, exit 2, nothing written; flags given override
the file. A run directory's RUN/config.toml and RUN/provenance.json say what made it, and
`train --config RUN/config.toml -o NEW` runs it again (bitwise)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import typer
from test_train_helpers import tiny_data, tiny_target
from typer.testing import CliRunner

from eagle3kit.cli import train as cli_train
from eagle3kit.core.digest import sha256_file
from eagle3kit.core.options import cli_name, fields, meta
from eagle3kit.train.config import TrainConfig, TrainOptions


def _every(out: Path) -> dict:
    """A value for every option of `train` (None: an option left unset, null in YAML), chosen
    for a fast seeded CPU run; a new option fails `test_the_file_names_every_option` until it
    is given here."""
    return {
        "out": str(out),
        "target": str(tiny_target()),
        "data": str(tiny_data()),
        "features": None,
        "init_from": None,
        "attention": "mha",
        "method": "eagle3",
        "fc_norm": False,
        "norm_before_fc": False,
        "norm_output": False,
        "mask_token_id": None,
        "cod_ratio": 0.6,
        "cod_min": 0.25,
        "loss": "jsd",
        "vocab": None,
        "draft_vocab_size": 96,
        "rebuild_vocab": False,
        "l2sp": 0.0,
        "reference_target": None,
        "reference_features": None,
        "ttt_steps": 3,
        "steps": 3,
        "epochs": 1.0,
        "batch_size": 4,
        "max_len": 64,
        "sliding_window": 16,
        "max_samples": 40,
        "lr": 0.002,
        "warmup": 1,
        "weight_decay": 0.01,
        "grad_clip": 0.5,
        "heldout": 0.125,
        "best_includes_start": False,
        "eval_every": 3,
        "eval_samples": 6,
        "eval_batch": 6,
        "save_every": 2,
        "seed": 5,
        "device": "cpu",
        "target_dtype": "float32",
        "topk": 32,
        "trust_remote_code": False,
        "time_limit": None,
        "block_size": 8,
        "draft_layers": 1,
        "anchors": 16,
        "gamma": 4.0,
        "position_weights": "exp",
        "dflash_loss": "kl",
        "mtp_steps": 3,
        "mtp_targets": "data",
        "threads": 1,
        "resume": False,
        "dry_run": False,
        "json_": True,
    }


def _flags(values: dict) -> list[str]:
    """The command line giving `values` (every one that a flag can say)."""
    by_name = {f.name: f for f in fields(TrainOptions)}
    out = []
    for name, v in values.items():
        if v is None:
            continue
        decl = meta(by_name[name]).get("flags", "--" + cli_name(name))
        if isinstance(v, bool):
            yes, _, no = decl.partition("/")
            out += [yes] if v else ([no] if no else [])
        else:
            out += ["--" + cli_name(name), str(v)]
    return out


def _yaml(path: Path, values: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({cli_name(k): v for k, v in values.items()}))
    return path


def test_the_file_names_every_option(tmp_path):
    every = _every(tmp_path / "x")
    assert set(every) == {f.name for f in fields(TrainOptions)}
    assert {f.name for f in dataclasses.fields(TrainConfig)} - set(every) == {"min_lr_ratio"}


def _weights(run: Path) -> dict:
    from safetensors.torch import load_file

    return {d: load_file(str(run / d / "model.safetensors")) for d in ("state", "best", "step-2")}


def _same(a: dict, b: dict) -> bool:
    import torch

    return a.keys() == b.keys() and all(
        a[d].keys() == b[d].keys() and all(torch.equal(a[d][n], b[d][n]) for n in a[d]) for d in a
    )


@pytest.mark.slow
def test_config_file_flags_and_run_dir_config_give_one_run(tmp_path, cli):
    """The flags, a YAML file of every option, and the first run's RUN/config.toml: the same
    weights bitwise (RUN/state, RUN/best, RUN/step-2) and the same metrics."""
    a, b, c = tmp_path / "flags", tmp_path / "file", tmp_path / "again"
    r = cli("train", *_flags(_every(a)))
    assert r.code == 0, r.err[-2000:]
    f = _yaml(tmp_path / "every.yaml", _every(tmp_path / "elsewhere"))
    r = cli("train", "--config", f, "-o", b)
    assert r.code == 0, r.err[-2000:]
    r = cli("train", "--config", a / "config.toml", "-o", c)
    assert r.code == 0, r.err[-2000:]
    assert not (tmp_path / "elsewhere").exists()  # -o on the command line won
    wa = _weights(a)
    assert _same(wa, _weights(b)) and _same(wa, _weights(c))
    rows = [(x / "metrics.jsonl").read_text() for x in (a, b, c)]
    assert rows[0] == rows[1] == rows[2]
    _check_provenance(a, tmp_path)


def _check_provenance(run: Path, tmp_path: Path) -> None:
    prov = json.loads((run / "provenance.json").read_text())
    assert prov["kind"] == "eagle3kit.provenance" and prov["schema"] == 1
    assert prov["command"][:2] == ["eagle3kit", "train"] and str(run) in prov["command"]
    data = tiny_data()
    assert prov["inputs"]["data"]["sha256"] == sha256_file(data / "data.json")
    assert set(prov["inputs"]) == {"data"}  # the inputs this run had
    assert prov["versions"]["torch"] and prov["versions"]["python"]
    assert prov["device"]["name"] == "cpu"
    assert len(prov["code"]["commit"] or "") == 40  # the tests run from a git checkout
    from eagle3kit.core.config_file import read_config

    back = read_config(run / "config.toml", TrainOptions)
    assert back["seed"] == 5 and back["topk"] == 32 and back["out"] == str(run)
    assert "json_" not in back and "dry_run" not in back  # how to run, not what runs
    from eagle3kit.report.render import report

    report([run], tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "how it was made" in md and "seed = 5" in md
    assert " ".join(prov["command"]) in md and prov["inputs"]["data"]["sha256"] in md


BAD_FILES = [
    ("bad value", "batch-size = 0\n", "key 'batch-size': expected an integer >= 1, found 0"),
    ("wrong type", 'batch-size = "eight"\n', "key 'batch-size': expected an integer, found"),
    ("unknown key", "batch_size = 8\n", "key 'batch_size': expected an option of this verb; "),
    ("bad choice", 'attention = "gqa"\n', "key 'attention': expected one of mha, mla"),
    ("bad number", "lr = -1.0\n", "key 'lr': expected a number > 0, found -1"),
]


@pytest.mark.parametrize(("what", "line", "says"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_bad_config_file_is_one_line_exit_2_nothing_written(tmp_path, cli, what, line, says):
    out = tmp_path / "run"
    f = tmp_path / "train.toml"
    f.write_text(
        f'out = "{out}"\ntarget = "{tiny_target()}"\ndata = "{tiny_data()}"\nsteps = 2\n' + line
    )
    r = cli("train", "--config", f)
    assert r.code == 2, (r.code, r.err[-2000:])
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err, r.err
    assert str(f) in r.err and says in r.err, r.err
    assert not out.exists()


def test_a_missing_required_option_names_both_places(tmp_path, cli):
    f = tmp_path / "train.toml"
    f.write_text("steps = 2\n")
    r = cli("train", "--config", f)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert f"--out: expected a value (on the command line or the key 'out' in {f})" in r.err


def _resolved(monkeypatch, *args: str) -> TrainOptions:
    got = {}
    monkeypatch.setattr(cli_train, "_run", lambda cfg, **kw: got.update(cfg=cfg, **kw))
    monkeypatch.setattr(cli_train, "_provenance", lambda o: got.update(options=o))
    app = typer.Typer()
    cli_train.register(app)
    app.command("x")(lambda: None)  # two commands: `train` is a subcommand
    r = CliRunner().invoke(app, ["train", *args])
    assert r.exit_code == 0, r.output
    return got["options"]


def test_flags_given_override_the_file_defaults_do_not(monkeypatch, tmp_path):
    f = tmp_path / "t.yaml"
    f.write_text("out: from-file\nsteps: 5\nlr: 0.5\nheldout: 8\nfc-norm: true\nseed: 3\n")
    o = _resolved(monkeypatch, "--config", str(f), "--steps", "2", "--lr", "0.001", "--no-fc-norm")
    assert (o.out, o.steps, o.lr, o.fc_norm) == ("from-file", 2, 0.001, False)  # given: win
    assert o.seed == 3 and o.heldout == 8 and isinstance(o.heldout, int)  # the file's
    assert o.batch_size == 8  # neither: the default
    o = _resolved(monkeypatch, "-o", "R", "--heldout", "0.25")
    assert o.heldout == 0.25 and o.out == "R"
