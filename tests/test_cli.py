import subprocess
import sys

import pytest
from conftest import run_cli


def test_help_lists_commands():
    r = run_cli("--help")
    assert r.code == 0
    assert "demo" in r.out


def test_unknown_command_is_usage_error():
    r = run_cli("no-such-verb")
    assert r.code == 2


def test_help_does_not_import_torch():
    code = (
        "import sys; from eagle3kit import cli; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_header_only_commands_do_not_import_torch():
    """inspect and compat read headers only: importing them must not pull in torch (~3 s)."""
    code = (
        "import sys; import eagle3kit.checkpoint.inspection, eagle3kit.checkpoint.compat, "
        "eagle3kit.core.vocab; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_usage_errors_are_one_line():
    for args in (
        ("no-such-verb",),
        ("inspect",),
        ("plan", "--acceptance", "abc", "--baseline-tps", "82", "--cycle-ms", "30"),
    ):
        r = run_cli(*args)
        assert r.code == 2, args
        assert len(r.err.strip().splitlines()) == 1 and r.err.startswith("eagle3kit: error:"), r.err


def test_help_lists_issue_2_verbs():
    r = run_cli("--help")
    for verb in ("inspect", "compat", "convert", "plan", "demo"):
        assert verb in r.out


def test_help_has_no_flag_type_tags_nor_braced_argument_names():
    import re

    for args in ((), ("inspect",), ("compat",), ("convert",), ("plan",), ("zoo", "build")):
        r = run_cli(*args, "--help")
        assert r.code == 0, args
        assert "<bool>" not in r.out, args
        assert not re.search(r"\{[A-Za-z_]+\}", r.out), (args, r.out)
    assert "compat [OPTIONS] DRAFTER OTHER" in run_cli("compat", "--help").out
    assert "zoo build [OPTIONS] NAME" in run_cli("zoo", "build", "--help").out
    root = run_cli("--help").out
    assert "--debug" in root and "traceback" in root


def test_debug_shows_the_traceback(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "eagle3kit", "--debug", "inspect", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "Traceback" in r.stderr and "Eagle3Error" in r.stderr


@pytest.mark.slow
def test_zoo_build_reports_progress_through_the_callback(tmp_path):
    from eagle3kit import zoo
    from eagle3kit.zoo.shipping import read_manifest

    events = []
    built = zoo.build("llama-v1", size="tiny", out=tmp_path / "v1", progress=events.append)
    stages = list(dict.fromkeys(e.stage for e in events))
    assert stages[0] == "building llama-v1-tiny: reading the standard library"
    train = [e for e in events if e.stage == "building llama-v1-tiny: training"]
    assert train[-1].done == train[-1].total > 1 and any("loss" in e.info for e in train)
    timed = read_manifest(built)["stage_seconds"]
    assert list(timed) == [s.split(": ", 1)[1] for s in stages]  # every reported stage is timed


def test_help_paragraphs_are_reflowed_so_the_terminal_wraps_them():
    """typer keeps a docstring's line breaks, which breaks a paragraph raggedly at 80 columns:
    each paragraph becomes one line; list items and indented lines keep their own."""
    from eagle3kit.cli import _reflow

    doc = """First line
    goes on.

    A second paragraph
    over two lines.
    - an item
    - another
        indented stays"""
    assert _reflow(doc) == (
        "First line goes on.\n\nA second paragraph over two lines.\n- an item\n- another\n"
        "    indented stays"
    )
    out = run_cli("plan", "--help").out  # at the runner's 80 columns, not ragged
    assert "1 when it is below break-even" in " ".join(out.split())
    assert not any(line.strip() == "when it" for line in out.splitlines())
