import subprocess
import sys

from conftest import run_cli


def test_help_lists_commands():
    r = run_cli("--help")
    assert r.code == 0
    assert "demo" in r.out


def test_unknown_command_is_usage_error():
    r = run_cli("no-such-verb")
    assert r.code == 2


def test_help_does_not_import_torch():
    code = "import sys; from eagle3kit import cli; assert 'torch' not in sys.modules, 'torch imported'; assert 'transformers' not in sys.modules"
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
