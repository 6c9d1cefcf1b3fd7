"""model/loading.py: the one pair loader; `--target` takes a zoo name, a local dir, a hub id."""

from __future__ import annotations

import pytest
import torch
from decode_helpers import new_drafter, save_drafter_dir

from eagle3kit import zoo
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.model.loading import load_pair, parse_dtype, resolve_target


@pytest.fixture(scope="module")
def tiny():
    return str(zoo.get("llama-v1", size="tiny"))


def test_resolve_target_zoo_local_hub(tiny, tmp_path):
    assert resolve_target("llama-v1-tiny") == tiny  # a zoo member, tiny size
    assert resolve_target(tiny) == tiny  # a local dir, as given
    assert resolve_target(str(tmp_path)) == str(tmp_path)
    assert resolve_target("some-org/some-model") == "some-org/some-model"  # for the hub


def test_parse_dtype():
    assert parse_dtype("bf16") is torch.bfloat16 and parse_dtype("float32") is torch.float32
    assert parse_dtype("auto") == "auto" and parse_dtype(torch.float16) is torch.float16
    with pytest.raises(Eagle3Error, match="dtype"):
        parse_dtype("float8")


def test_load_pair_by_zoo_name_and_dir(tiny, tmp_path):
    from eagle3kit.model.target import TargetModel

    tm = TargetModel.from_pretrained(tiny)
    d_dir = save_drafter_dir(new_drafter(tm, seed=2), tmp_path / "d")
    for name in ("llama-v1-tiny", tiny):
        t, d = load_pair(name, d_dir)
        assert t.name_or_path == tiny and d.embed_loaded
        assert torch.equal(d.embed_tokens.weight, t.embed_tokens.weight)
        assert tuple(t.aux_layers) == tuple(d.spec.aux_layers)


def test_probe_loads_a_zoo_name(tiny, tmp_path):
    """probe's loading goes through the pair loader, so a zoo name reaches the target dir."""
    from eagle3kit.measure import probe as P
    from eagle3kit.model.target import TargetModel

    d_dir = save_drafter_dir(new_drafter(TargetModel.from_pretrained(tiny)), tmp_path / "d")
    ld = P._load(d_dir, "llama-v1-tiny", None, "cpu", "float32")
    new, spec = ld.target, ld.spec
    assert new.name_or_path == tiny and ld.reference is None and ld.layout == "sglang"
    assert spec.vocab_size == new.vocab_size and not ld.drafter.embed_loaded
