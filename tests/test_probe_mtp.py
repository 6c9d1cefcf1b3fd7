"""probe --method mtp on the zoo's tiny dsv3-v1 -> dsv3-v2 (both ship an MTP layer)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import run_cli
from safetensors.torch import load_file, save_file

FAST = ["--samples", "4", "--online-prompts", "1", "--json"]


@pytest.fixture(scope="module")
def pair():
    from eagle3kit import zoo

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models, batch-1 decoding: one thread is fastest
    yield str(zoo.get("dsv3-v1", size="tiny")), str(zoo.get("dsv3-v2", size="tiny"))
    torch.set_num_threads(before)


def _probe(*args: str):
    r = run_cli("probe", "--method", "mtp", *args, *FAST)
    r.output = r.out + r.err
    return r


@pytest.mark.slow
def test_old_head_on_new_gives_a_verdict_and_the_fields(pair):
    old, new = pair
    r = _probe("--target", new, "--reference-target", old)
    assert r.code == 0, r.output
    doc = json.loads(r.out)
    assert doc["method"] == "mtp" and doc["verdict"] in ("plug-in", "fine-tune", "from-scratch")
    assert [s["layer"] for s in doc["similarity"]] == ["final_norm", "embedding"]
    assert doc["final_similarity"]["cosine_mean"] < 0.999  # v2 is a different target
    taus = doc["tau_every_position"]
    assert 1.0 <= taus["target"] <= 1 + doc["depth"] and 1.0 <= taus["reference"]
    assert doc["tau_online"]["target"]["cycles"] > 0
    assert doc["tau_online"]["reference"]["cycles"] > 0
    assert '"method": "mtp"' in doc["compat"]["engines"]["vllm"]
    assert "NEXTN" in doc["compat"]["engines"]["sglang"]


@pytest.mark.slow
def test_head_on_its_own_target_is_identical(pair):
    old, _ = pair
    r = _probe("--target", old, "--reference-target", old)
    assert r.code == 0, r.output
    doc = json.loads(r.out)
    for row in doc["similarity"]:
        assert row["cosine_mean"] == pytest.approx(1.0, abs=1e-6), row
        assert row["norm_ratio"] == pytest.approx(1.0, abs=1e-6), row
    taus = doc["tau_every_position"]
    assert taus["target"] == taus["reference"]
    assert taus["target"] > 1.0  # the shipped head drafts something on its own target
    on = doc["tau_online"]
    assert on["target"]["tau_online"] == on["reference"]["tau_online"]
    assert doc["verdict"] == "plug-in"


def test_a_target_without_a_head_is_refused(tmp_path, pair):
    from test_train_helpers import headless_target

    headless = str(headless_target(tmp_path))
    r = _probe("--target", pair[1], "--reference-target", headless)
    assert r.code == 2
    assert "num_nextn_predict_layers" in r.err and len(r.err.strip().splitlines()) == 1


def test_a_head_of_another_shape_is_refused(tmp_path, pair):
    from eagle3kit.methods.mtp.checkpoint.heads import extract_mtp

    old, new = pair
    head = tmp_path / "head"
    extract_mtp(old, str(head))
    f = next(head.glob("*.safetensors"))
    t = load_file(str(f))
    name = next(k for k in t if k.endswith("eh_proj.weight"))
    t[name] = t[name][:, :-2].contiguous()  # [H, 2H] -> [H, 2H - 2]: another hidden width
    save_file(t, str(f), metadata={"format": "pt"})
    r = _probe("--target", new, "--reference-target", old, "--drafter", str(head))
    assert r.code == 2, r.output
    assert "eh_proj.weight" in r.err and "expected shape [32, 64], found [32, 62]" in r.err
    assert len(r.err.strip().splitlines()) == 1


def test_an_unknown_method_is_refused():
    r = run_cli("probe", "--method", "medusa", "--target", "dsv3-v2")
    assert r.code == 2 and "--method" in r.err and "'medusa'" in r.err
