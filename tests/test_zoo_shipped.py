"""The zoo shipped in the package: resolved with no training, checked by sha256, included in
the wheel, never written to; `zoo ship` makes a shipped folder from a build."""

from __future__ import annotations

import fnmatch
import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest

from eagle3kit import zoo
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.zoo import shipping

REPO = Path(__file__).resolve().parents[1]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: (size, mtime in ns)."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def no_building(monkeypatch):
    """Any attempt to build a member or train a drafter fails the test."""
    from eagle3kit.train import loop
    from eagle3kit.zoo import builder

    def refuse(*a, **k):
        raise AssertionError("built or trained something")

    monkeypatch.setattr(builder, "build_into", refuse)
    monkeypatch.setattr(loop, "train", refuse)


@pytest.fixture
def own_root(monkeypatch, tmp_path):
    """A private copy of the shipped dsv3-v1-tiny as the package's only member."""
    root = tmp_path / "shipped"
    shutil.copytree(zoo.get("dsv3-v1", size="tiny"), root / "dsv3-v1-tiny")
    monkeypatch.setattr(shipping, "ROOT", root)
    monkeypatch.setattr(shipping, "_CHECKED", set())
    return root


def test_a_tiny_member_resolves_to_the_package_with_no_training(no_building):
    from transformers import AutoTokenizer

    from eagle3kit.demo import k2_drafter
    from eagle3kit.model.loading import load_target, resolve_target

    before = _tree(shipping.ROOT)
    p = resolve_target("dsv3-v2-tiny")
    assert Path(p) == shipping.ROOT / "dsv3-v2-tiny"
    t = load_target("dsv3-v2-tiny")
    assert t.num_layers == 8
    AutoTokenizer.from_pretrained(p)
    assert k2_drafter("tiny") == shipping.ROOT / "k2-drafter-tiny"  # shipped, not trained
    assert _tree(shipping.ROOT) == before  # nothing written next to a member
    assert not (zoo.home() / "zoo").exists() and not (zoo.home() / "drafters").exists()


def test_a_member_the_package_lacks_says_how_to_build_it(cli, own_root, no_building, tmp_path):
    from eagle3kit.model.loading import resolve_target

    with pytest.raises(Eagle3Error, match=r"zoo build dsv3-v2 -o DIR"):
        resolve_target("dsv3-v2")
    conv = tmp_path / "c.jsonl"
    conv.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    r = cli("data", "prepare", conv, "--target", "llama-v1-tiny", "-o", tmp_path / "p")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert "llama-v1-tiny" in r.err and "zoo build llama-v1 --size tiny -o DIR" in r.err
    assert resolve_target("someone/llama-v1") == "someone/llama-v1"  # a hub id passes


def test_a_changed_shipped_file_fails_its_sha256_check(cli, own_root):
    d = own_root / "dsv3-v1-tiny"
    good = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(Eagle3Error) as e:
        zoo.get("dsv3-v1", size="tiny")
    msg = str(e.value)
    assert "model.safetensors" in msg and "sha256 expected" in msg and "reinstall" in msg
    r = cli("zoo", "verify", "--json")
    doc = json.loads(r.out)
    assert r.code == 1 and doc["ok"] is False and "sha256" in doc["members"][0]["error"]
    (d / "model.safetensors").write_bytes(good)
    (d / "tokenizer.json").unlink()
    assert "missing" in json.loads(cli("zoo", "verify", "--json").out)["members"][0]["error"]


def test_zoo_verify_checks_again_what_this_process_already_checked(cli, own_root):
    zoo.get("dsv3-v1", size="tiny")  # checked once: later gets in this process trust it
    (own_root / "dsv3-v1-tiny" / "config.json").write_text("{}")
    assert zoo.get("dsv3-v1", size="tiny")
    assert cli("zoo", "verify").code == 1


def test_package_data_includes_every_shipped_file():
    """pyproject's package-data globs (what goes into the wheel; `pip wheel .` lists them, see
    docs/zoo.md) match every file under zoo/shipped."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    globs = cfg["tool"]["setuptools"]["package-data"]["eagle3kit.zoo"]
    pkg = REPO / "src" / "eagle3kit" / "zoo"
    files = [p for p in (pkg / "shipped").rglob("*") if p.is_file()]
    assert len(files) >= 5 * 2  # four tiny members and the tiny K2 drafter
    for f in files:
        rel = str(f.relative_to(pkg))
        assert any(fnmatch.fnmatch(rel, g) and rel.count("/") == g.count("/") for g in globs), rel


def _float32_build(tmp_path: Path, name: str = "llama-v1") -> Path:
    """The shipped tiny member as a build writes it: no shipped block."""
    d = tmp_path / "build"
    shutil.copytree(zoo.get(name, size="tiny"), d)
    doc = json.loads((d / "zoo.json").read_text())
    del doc["shipped"]
    (d / "zoo.json").write_text(json.dumps(doc))
    return d


def test_ship_stores_the_sizes_dtype_and_lists_every_file(tmp_path):
    from safetensors import safe_open

    d = _float32_build(tmp_path)
    dest = shipping.ship(d, root=tmp_path / "pkg")
    assert dest == tmp_path / "pkg" / "llama-v1-tiny"
    doc = json.loads((dest / "zoo.json").read_text())
    assert doc["commit"] == zoo.manifest("llama-v1", size="tiny")["commit"]
    names = sorted(p.name for p in dest.iterdir() if p.name != "zoo.json")
    assert sorted(doc["shipped"]["files"]) == names
    assert doc["shipped"]["dtype"] == "float32"  # tiny: the tests' float32 fixtures
    shipped = zoo.manifest("llama-v1", size="tiny")["shipped"]["files"]
    assert doc["shipped"]["files"] == shipped  # shipping a shipped member again: same bytes
    # a full member goes to bf16, and its config says so
    doc["size"], doc["name"] = "full", "llama-v1"
    doc["recipe"] = json.loads(json.dumps(asdict(zoo.recipe("llama-v1", "full"))))
    del doc["shipped"]
    (d / "zoo.json").write_text(json.dumps(doc))
    full = shipping.ship(d, root=tmp_path / "pkg")
    with safe_open(str(full / "model.safetensors"), "pt") as f:
        assert {str(f.get_slice(k).get_dtype()) for k in f.keys()} == {"BF16"}
    assert json.loads((full / "config.json").read_text())["dtype"] == "bfloat16"
    assert json.loads((full / "zoo.json").read_text())["shipped"]["dtype"] == "bfloat16"


def test_ship_refuses_another_recipe_and_a_build_without_commit(tmp_path):
    d = _float32_build(tmp_path)
    doc = json.loads((d / "zoo.json").read_text())
    (d / "zoo.json").write_text(json.dumps({**doc, "commit": None}))
    with pytest.raises(Eagle3Error, match="--commit"):
        shipping.ship(d, root=tmp_path / "pkg")
    doc["recipe"]["steps"] += 1
    (d / "zoo.json").write_text(json.dumps(doc))
    with pytest.raises(Eagle3Error, match="recipe: built with another recipe.*steps"):
        shipping.ship(d, root=tmp_path / "pkg")
    with pytest.raises(Eagle3Error, match="--name k2-drafter"):
        shipping.ship(tmp_path, root=tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()


def test_zoo_ship_cli_takes_several_builds_and_names_a_drafter_by_its_folder(
    cli, monkeypatch, tmp_path
):
    """`zoo ship` as the maintainers run it: members by their zoo.json, the K2 drafter by its
    folder's name (here the full-size label), in float32 at every size (it loads in its
    config's dtype beside a float32 target); its verifier becomes the target's zoo name."""
    drafter = tmp_path / "k2-drafter"
    shutil.copytree(shipping.ROOT / "k2-drafter-tiny", drafter)
    cfg = json.loads((drafter / "config.json").read_text())
    (drafter / "config.json").write_text(json.dumps({**cfg, "eagle3kit_verifier": "/tmp/x"}))
    member = _float32_build(tmp_path)
    root = tmp_path / "pkg"
    monkeypatch.setattr(shipping, "ROOT", root)
    r = cli("zoo", "ship", member, drafter, "--commit", "abc123", "--json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)["shipped"]
    assert [Path(x["path"]).name for x in rows] == ["llama-v1-tiny", "k2-drafter"]
    doc = json.loads((root / "k2-drafter" / "zoo.json").read_text())
    assert doc["kind"] == "eagle3kit.zoo_drafter" and doc["commit"] == "abc123"
    assert doc["target"] == "dsv3-v1" and doc["recipe"]["k2_steps"] > 0  # kept
    assert doc["shipped"]["dtype"] == "float32"
    cfg = json.loads((root / "k2-drafter" / "config.json").read_text())
    assert cfg["eagle3kit_verifier"] == "dsv3-v1" and cfg["torch_dtype"] == "float32"
    r = cli("zoo", "verify", "--json")  # the new package's files check out
    assert r.code == 0 and len(json.loads(r.out)["members"]) == 2
