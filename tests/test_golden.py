"""The golden outputs of inspect, compat, plan and convert (tests/golden/make_golden.py).

tests/golden/outputs/ was generated from the code at 05f6036 (before the packages were
regrouped); a refactoring must leave what a user sees byte for byte unchanged. A deliberate
change of output regenerates the files (`python tests/golden/make_golden.py
tests/golden/outputs`) in the commit that makes it, which names the files it changed."""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "golden"
spec = importlib.util.spec_from_file_location("make_golden", HERE / "make_golden.py")
make_golden = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_golden)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden")
    return out, make_golden.make(out)


def test_the_same_commands_are_recorded(fresh):
    out, names = fresh
    assert sorted(names) == sorted(p.name for p in (HERE / "outputs").glob("*.txt"))


@pytest.mark.parametrize("name", sorted(p.name for p in (HERE / "outputs").glob("*.txt")))
def test_output_is_byte_identical(fresh, name):
    out, _ = fresh
    got, want = (out / name).read_bytes(), (HERE / "outputs" / name).read_bytes()
    if got != want:
        diff = difflib.unified_diff(
            want.decode().splitlines(), got.decode().splitlines(), "golden", "now", lineterm=""
        )
        pytest.fail(f"{name} differs:\n" + "\n".join(diff), pytrace=False)
