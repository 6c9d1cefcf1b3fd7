"""`data prepare|regenerate|capture --config FILE`: the verbs' options objects
(cli/data_options.py) read from a file, positional arguments included; the command line
overrides the file; a bad key or value is one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CONVS = [
    {
        "id": "a",
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}],
    },
    {
        "id": "b",
        "messages": [{"role": "user", "content": "Sum?"}, {"role": "assistant", "content": "Two."}],
    },
]


@pytest.fixture(scope="module")
def target() -> str:
    from eagle3kit import zoo

    return str(zoo.get("llama-v1", size="tiny"))


def _convs(tmp: Path) -> Path:
    p = tmp / "convs.jsonl"
    p.write_text("".join(json.dumps(c) + "\n" for c in CONVS))
    return p


def _shards(d: Path) -> list[str]:
    doc = json.loads((d / "data.json").read_text())
    return [s["sha256"] for s in doc["shards"]] + [doc["samples"], doc["tokens"]]


def test_prepare_from_a_file_equals_the_flags(tmp_path, cli, target):
    src = _convs(tmp_path)
    r = cli("data", "prepare", src, "--target", target, "-o", tmp_path / "a", "--max-length", "64")
    assert r.code == 0, r.err
    f = tmp_path / "prepare.yaml"
    f.write_text(
        f"inputs: [{src}]\ntarget: {target}\noutput: {tmp_path / 'elsewhere'}\nmax-length: 64\n"
    )
    r = cli("data", "prepare", "--config", f, "-o", tmp_path / "b")
    assert r.code == 0, r.err
    assert _shards(tmp_path / "a") == _shards(tmp_path / "b")
    assert not (tmp_path / "elsewhere").exists()  # -o given on the command line wins
    doc = json.loads((tmp_path / "b" / "data.json").read_text())
    assert doc["max_length"] == 64 and doc["samples"] == 2


@pytest.mark.parametrize(
    ("verb", "line", "says"),
    [
        ("prepare", "max-length = 1\n", "key 'max-length': expected an integer >= 2, found 1"),
        ("prepare", "max_length = 9\n", "the closest is 'max-length'"),
        ("regenerate", 'truncated = "cut"\n', "key 'truncated': expected one of keep, drop"),
        ("regenerate", 'temperature = "hot"\n', "key 'temperature': expected a number"),
        ("capture", "topk = -1\n", "key 'topk': expected an integer >= 0, found -1"),
        ("capture", "aux-layers = [1, 2]\n", "key 'aux-layers': expected a list of 3 integers"),
    ],
)
def test_a_bad_data_config_is_one_line_exit_2(tmp_path, cli, target, verb, line, says):
    src, out = _convs(tmp_path), tmp_path / "out"
    first = {
        "prepare": f'inputs = ["{src}"]\ntarget = "{target}"\n',
        "regenerate": f'input = "{src}"\ntarget = "{target}"\n',
        "capture": f'data = "{src}"\ntarget = "{target}"\n',
    }[verb]
    f = tmp_path / "c.toml"
    f.write_text(first + f'output = "{out}"\n' + line)
    r = cli("data", verb, "--config", f)
    assert r.code == 2, (r.code, r.err)
    assert len(r.err.strip().splitlines()) == 1 and str(f) in r.err and says in r.err, r.err
    assert not out.exists()


def test_a_missing_argument_names_the_file_key(tmp_path, cli, target):
    f = tmp_path / "c.toml"
    f.write_text(f'target = "{target}"\noutput = "{tmp_path / "o"}"\n')
    r = cli("data", "prepare", "--config", f)
    assert r.code == 2, r.err
    assert f"INPUTS: expected a value (on the command line or the key 'inputs' in {f})" in r.err
