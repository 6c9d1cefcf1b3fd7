"""core/config_file.py: options from TOML and YAML by their CLI names, typed, one line per bad
field (file, key, expected, found), the closest name for an unknown key, and a written file
that reads back to the same values."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from eagle3kit.core.config_file import read_config, write_config
from eagle3kit.core.errors import Eagle3Error


@dataclass
class Opts:
    out: str
    target: str | None = None
    batch_size: int = 8
    lr: float = 1e-3
    fc_norm: bool | None = None
    max_samples: int | None = None
    lengths: list[int] = field(default_factory=list)


def _file(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_toml_and_yaml_give_the_same_typed_values(tmp_path):
    toml = _file(
        tmp_path,
        "a.toml",
        'out = "runs/x"\nbatch-size = 4\nlr = 3\nfc-norm = true\nlengths = [128, 512]\n',
    )
    yaml = _file(
        tmp_path,
        "a.yaml",
        "out: runs/x\nbatch-size: 4\nlr: 3\nfc-norm: true\nlengths: [128, 512]\n",
    )
    want = {"out": "runs/x", "batch_size": 4, "lr": 3.0, "fc_norm": True, "lengths": [128, 512]}
    assert read_config(toml, Opts) == want == read_config(yaml, Opts)
    assert isinstance(read_config(toml, Opts)["lr"], float)


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        (
            "w.toml",
            'batch-size = "eight"\n',
            "key 'batch-size': expected an integer, found a string \"eight\"",
        ),
        (
            "w.toml",
            "batch-size = 8.5\n",
            "key 'batch-size': expected an integer, found a number 8.5",
        ),
        (
            "w.toml",
            "fc-norm = 1\n",
            "key 'fc-norm': expected true or false (or nothing), found an integer 1",
        ),
        ("w.toml", "lr = true\n", "key 'lr': expected a number, found a boolean true"),
        ("w.toml", 'lengths = [128, "x"]\n', "key 'lengths': expected a list of integers"),
        ("w.yaml", "out: null\n", "key 'out': expected a string, found nothing (null)"),
        (
            "w.toml",
            "batch_size = 8\n",
            "key 'batch_size': expected an option of this verb; the closest is 'batch-size'",
        ),
        ("w.toml", "learning-rat = 1\n", "key 'learning-rat': expected an option of this verb"),
        ("w.toml", "lr = \n", "expected TOML"),
        ("w.yaml", "lr: [1,\n", "expected YAML, cannot parse it at line"),
        ("w.yaml", "- 1\n- 2\n", "expected a table of options, found list"),
        ("w.json", "{}", "expected a .toml or .yaml or .yml file, found '.json'"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_file_and_key(tmp_path, name, text, says):
    p = _file(tmp_path, name, text)
    with pytest.raises(Eagle3Error) as e:
        read_config(p, Opts)
    msg = str(e.value)
    assert msg.startswith(str(p)) and "\n" not in msg
    assert says in msg, msg


def test_a_written_config_reads_back_to_the_same_values(tmp_path):
    values = {
        "out": 'runs/"odd" name \u00e9',
        "target": None,
        "batch_size": 16,
        "lr": 0.000123,
        "fc_norm": False,
        "lengths": [1, 2],
    }
    text = write_config(tmp_path / "config.toml", values, header="eagle3kit train\nrun 1")
    assert text.startswith("# eagle3kit train\n# run 1\n")
    back = read_config(tmp_path / "config.toml", Opts)
    assert back == {k: v for k, v in values.items() if v is not None}
