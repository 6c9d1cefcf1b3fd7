"""`eagle3kit train` is built from one typed object (train/config.py TrainOptions, through
cli/_command.py): every field a user may set is its option, named as TrainConfig.validate()
names it in errors, with the field's own default and help text, and `--config` besides."""

from __future__ import annotations

import dataclasses

import click
import typer

from eagle3kit.cli import train as cli_train
from eagle3kit.train.config import TrainConfig

NOT_OPTIONS = {"min_lr_ratio"}  # set in code only


def _params() -> dict[str, click.Parameter]:
    app = typer.Typer()
    cli_train.register(app)
    cmd = typer.main.get_command(app)  # one command: the app is `train` itself
    return {p.name: p for p in cmd.params}


def test_the_options_are_the_fields_of_one_object():
    from eagle3kit.core.options import fields, meta
    from eagle3kit.train.config import TrainOptions

    params = _params()
    mine = {n for n in params if "completion" not in n}  # typer's own, of a test app
    assert mine == {f.name for f in fields(TrainOptions)} | {"config"}
    for f in fields(TrainOptions):
        assert params[f.name].help.startswith(meta(f)["help"]), f.name


def test_every_field_has_its_option_and_default():
    params = _params()
    for f in dataclasses.fields(TrainConfig):
        if f.name in NOT_OPTIONS:
            assert f.name not in params
            continue
        p = params[f.name]
        flag = "--" + f.name.replace("_", "-")
        assert flag in p.opts, (f.name, p.opts)  # validate()'s messages name this flag
        if f.default is dataclasses.MISSING:
            assert p.required, f.name
        elif f.name != "heldout":  # given as text, parsed by its callback
            assert p.default == f.default, (f.name, p.default, f.default)


def test_the_options_reach_the_config(monkeypatch, tmp_path):
    """The parsed options reach the run's settings (the run itself replaced); the run's
    provenance goes to -o (a folder under tmp_path, never the current directory)."""
    got = {}
    monkeypatch.setattr(cli_train, "_run", lambda cfg, **kw: got.update(cfg=cfg, **kw))
    app = typer.Typer()
    cli_train.register(app)
    app.command("x")(lambda: None)  # two commands: `train` is a subcommand
    from typer.testing import CliRunner

    run = str(tmp_path / "RUN")
    r = CliRunner().invoke(app, ["train", "-o", run, "--lr", "0.5", "--seed", "3", "--json"])
    assert r.exit_code == 0, r.output
    cfg = got["cfg"]
    assert (cfg.out, cfg.lr, cfg.seed, cfg.heldout, cfg.min_lr_ratio) == (run, 0.5, 3, 0.05, 0.1)
    assert got["json_"] is True and got["resume"] is False and got["threads"] is None
