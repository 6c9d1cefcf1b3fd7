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
    """A private copy of the shipped dsv3-v1-tiny as the package's only member. `zoo verify`
    here checks files: its real-engine config check (a vLLM import per call) is skipped by an
    empty engines folder; tests/test_real_engine.py runs that check against the engine."""
    monkeypatch.setenv("EAGLE3KIT_ENGINES", str(tmp_path / "no-engines"))
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
    monkeypatch.setenv("EAGLE3KIT_ENGINES", str(tmp_path / "no-engines"))  # files only
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


# ---------------------------------------------------------------- MTP layers and K2 DFlash

DS_MEMBERS = ("dsv3-v1", "dsv3-v2", "dsv3-v1-tiny", "dsv3-v2-tiny")
# sha256 of each member's model.safetensors as shipped before it carried its MTP layer
# (zoo.json at commit ac854e3), valid while the member is the build of commit f3cf2aa
MEMBER_BUILD = "f3cf2aa531e91de2dac6b4f95a8959a402e56b30"
WEIGHTS_BEFORE_MTP = {
    "dsv3-v1": "f8dd5581717e3706e4bedca943e3bbeb6672452f70011c819b09a8ecaecd2674",
    "dsv3-v2": "bf850321e432e39999cd88397d0e15c618a2e8eff0371c0924fc71be1a762e41",
    "dsv3-v1-tiny": "7ad03cd8c929207c0855f27d2885062ab15f9293e7d0f87c5cf1527eb16fea59",
    "dsv3-v2-tiny": "0fc33723bb062eb59bf8e85695fcd0e3a506d6be5e258b6bb8626ea1c8ea73c0",
}
MTP_TENSORS = ("eh_proj.weight", "enorm.weight", "hnorm.weight", "shared_head.head.weight")


@pytest.mark.parametrize("lab", DS_MEMBERS)
def test_shipped_ds_members_carry_one_mtp_layer_beside_unchanged_main_tensors(lab):
    """Each DeepSeek member ships one MTP layer at model.layers.{L} (config declares it,
    zoo.json records its training) and its main tensors are the bytes shipped before."""
    from safetensors import safe_open

    folder = shipping.ROOT / lab
    doc = shipping.check(folder, again=True)  # every file against its sha256
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["num_nextn_predict_layers"] == 1
    prefix = f"model.layers.{cfg['num_hidden_layers']}."
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        extra = [k for k in f.keys() if k.startswith(prefix)]
    assert {prefix + t for t in MTP_TENSORS} <= set(extra)
    mtp = doc["mtp"]
    assert mtp["prefix"] == prefix and mtp["layers"] == 1 and mtp["steps"] > 0
    assert {"seed", "data", "lr", "batch_size", "max_len", "targets"} <= set(mtp)
    assert mtp["tau_after"] > mtp["tau_before"]  # the layer was trained
    main = shipping.main_weights_sha256(folder)  # recomputed from the shipped file
    assert main == mtp["main_weights_sha256"]
    if doc["commit"] == MEMBER_BUILD:
        assert main == WEIGHTS_BEFORE_MTP[lab]  # byte-identical to the member shipped before


def test_a_member_with_its_mtp_layer_loads_as_the_same_target(tmp_path, caplog):
    """Our target loader ignores the MTP layer silently and gives the logits of the member
    without it; transformers' own DeepseekV3 loader reports exactly the layer's tensors as
    unexpected (it ignores only layer 61, DeepSeek-V3's) and nothing missing, same logits."""
    import logging
    import warnings

    import torch
    from test_train_helpers import headless_target
    from transformers import AutoModelForCausalLM

    from eagle3kit.model.target import TargetModel

    src = shipping.ROOT / "dsv3-v1-tiny"
    bare = headless_target(tmp_path)
    ids = torch.tensor([[1, 17, 33, 2, 90, 7, 250]])
    with warnings.catch_warnings(record=True) as w, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        t = TargetModel.from_pretrained(src)
    assert not [x for x in w if "layers.8" in str(x.message)] and "layers.8" not in caplog.text
    plain = TargetModel.from_pretrained(bare)
    one = torch.ones_like(ids)
    assert torch.equal(t.forward(ids, one).logits, plain.forward(ids, one).logits)
    hf, info = AutoModelForCausalLM.from_pretrained(src, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert info["unexpected_keys"] and all(
        k.startswith("model.layers.8.") for k in info["unexpected_keys"]
    )
    ref = AutoModelForCausalLM.from_pretrained(bare)
    with torch.no_grad():
        assert torch.equal(hf(ids).logits, ref(ids).logits)


def test_method_mtp_on_a_shipped_member_uses_its_head_with_no_training(cli, monkeypatch):
    """`generate --method mtp` on a shipped DS member drafts with the shipped head (nothing
    trained), token-identical to plain greedy."""
    from eagle3kit.decode import greedy_generate
    from eagle3kit.methods.mtp.train import finetune as mtp
    from eagle3kit.model.loading import load_target

    monkeypatch.setattr(mtp, "train_mtp", lambda *a, **k: pytest.fail("trained an MTP head"))
    prompt = "def parse(text):"
    t = load_target("dsv3-v2-tiny")
    plain = greedy_generate(t, t.tokenizer(prompt)["input_ids"], max_new_tokens=12).tokens
    r = cli(
        "generate",
        "--target",
        "dsv3-v2-tiny",
        "--method",
        "mtp",
        "--prompt",
        prompt,
        "--max-new-tokens",
        "12",
        "--depth",
        "2",
        "--threads",
        "1",
        "--json",
    )
    assert r.code == 0, r.err
    g = json.loads(r.out)
    assert g["stats"]["method"] == "mtp" and g["tokens"] == plain


@pytest.mark.parametrize("lab", ["k2-dflash", "k2-dflash-tiny"])
def test_the_k2_dflash_drafter_ships_and_loads_strictly(lab, monkeypatch):
    """The K2 DFlash drafter: shipped with its recipe and figures, loaded strictly (every
    tensor, no other) against its target dsv3-v1, and the demo uses it with no training."""
    from eagle3kit.demo.dflash_arm import k2_dflash
    from eagle3kit.methods.dflash.model import DFlashDrafter
    from eagle3kit.methods.dflash.train import loop as dflash

    folder = shipping.ROOT / lab
    doc = shipping.check(folder, again=True)
    assert doc["method"] == "dflash" and doc["target"] == lab.replace("k2-dflash", "dsv3-v1")
    assert doc["recipe"]["block_size"] == 4 and doc["figures"]["steps"] == doc["recipe"]["steps"]
    d = DFlashDrafter.from_pretrained(folder)
    target = json.loads((zoo.get("dsv3-v1", size=doc["size"]) / "config.json").read_text())
    assert d.spec.block_size == 4 and 0 <= d.spec.mask_token_id < target["vocab_size"]
    assert d.spec.hidden_size == target["hidden_size"]
    monkeypatch.setattr(dflash, "train_dflash", lambda *a, **k: pytest.fail("trained"))
    assert k2_dflash(doc["size"], None, print) == folder


def test_the_shipped_zoo_stays_under_40_mb():
    total = sum(p.stat().st_size for p in shipping.ROOT.rglob("*") if p.is_file())
    assert total < 40e6, total


def test_zoo_verify_compares_a_headless_rebuild_with_the_main_tensors(tmp_path):
    """A DS member's rebuild has no MTP layer: `zoo verify DIR` compares its weights with the
    shipped member's main tensors (zoo.json mtp.main_weights_sha256), not the whole file."""
    from test_train_helpers import headless_target

    from eagle3kit.zoo.verify import compare

    assert compare(headless_target(tmp_path))["weights_identical"] is True
