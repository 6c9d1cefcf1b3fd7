"""`--target` takes a zoo name, a local dir or a hub id (`model.loading.resolve_target`) for
`train` and `data capture`. Zoo names: `dsv3-v1` is the full member, `dsv3-v1-tiny` its tiny
size (the form tests use). The hub id is served from a local Hub cache folder
(`models--org--name/snapshots/<rev>/`, `refs/main`), the layout huggingface_hub reads offline:
the real Hub code path, no network."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_train_helpers import tiny_data, tiny_target, train_args

HUB_ID = "eagle3kit-test/dsv3-v1-tiny"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """The tiny target as Hub repo HUB_ID in a private cache; offline mode."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    rev = "0" * 40
    repo = cache / ("models--" + HUB_ID.replace("/", "--"))
    shutil.copytree(tiny_target(), repo / "snapshots" / rev)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def _target(form: str, request) -> str:
    if form == "zoo":
        tiny_target()  # built once in the test home; the name resolves to it
        return "dsv3-v1-tiny"
    if form == "dir":
        return str(tiny_target())
    request.getfixturevalue("hub_cache")
    return HUB_ID


@pytest.mark.parametrize("form", ["zoo", "dir", "hub"])
@pytest.mark.slow
def test_train_target_forms(form, request, tmp_path, cli):
    target = _target(form, request)
    assert not Path(target).exists() or form == "dir"
    out = tmp_path / "run"
    r = cli(*train_args(out, tiny_data(), target, "--steps", "1", "--eval-samples", "2"))
    assert r.code == 0, r.err[-3000:]
    assert (out / "best" / "model.safetensors").is_file()


@pytest.mark.parametrize("form", ["zoo", "dir", "hub"])
def test_data_capture_target_forms(form, request, tmp_path, cli):
    import json

    target = _target(form, request)
    out = tmp_path / "store"
    r = cli("data", "capture", tiny_data(), "--target", target, "-o", out, "--json")
    assert r.code == 0, r.err[-3000:]
    assert json.loads(r.out)["samples"] > 0


def test_zoo_names_resolve_to_the_zoo_cache():
    from eagle3kit import zoo
    from eagle3kit.model.loading import resolve_target

    tiny_target()
    assert resolve_target("dsv3-v1-tiny") == str(zoo.path("dsv3-v1", size="tiny"))
    assert resolve_target(HUB_ID) == HUB_ID  # not a zoo name, not a dir: a hub id
