"""`train --method mtp` (FastMTP) and `add_mtp_layer` on the tiny DeepSeek-V3 zoo member, end
to end through the CLI: the trained head raises held-out acceptance and decodes losslessly."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from test_train_helpers import headless_target, tiny_data

from eagle3kit.decode import greedy_generate
from eagle3kit.methods.mtp.train.finetune import step_weights


def test_fastmtp_step_weights():
    # FastMTP (arXiv 2509.18362) eq. 2 with beta 0.6, K 3: 1, 0.6, 0.36 normalised
    assert step_weights(3, 0.6) == pytest.approx([1 / 1.96, 0.6 / 1.96, 0.36 / 1.96])


def test_walk_and_accepted_counts_by_hand():
    from eagle3kit.methods.mtp.train.finetune import accepted, walk

    # target greedy tokens g[t]; the head's three steps at anchor t guess g[t+1], g[t+2], g[t+3]
    g = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    right = [g[:, 1 + k : 1 + k + 3] for k in range(3)]  # anchors 0..2 all right
    logits = [torch.nn.functional.one_hot(r, 12).float() for r in right]
    logits[1][0, 1] = torch.nn.functional.one_hot(torch.tensor(0), 12).float()  # step 2 wrong at 1
    count = accepted(logits, g)
    assert count.tolist() == [[3, 1, 3]]
    assert walk(count[0], torch.tensor([True, True, True])) == [3]  # one cycle covers 0..3
    assert walk(torch.tensor([0, 1, 0]), torch.tensor([True, True, True])) == [0, 1]


def test_distilling_a_one_hot_teacher_is_the_data_loss():
    from eagle3kit.methods.mtp.train.finetune import mtp_loss

    torch.manual_seed(0)
    ids = torch.randint(0, 9, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.bool)
    logits = [torch.randn(2, 4, 9) for _ in range(3)]
    teacher = torch.full((2, 8, 9), -1e4)
    teacher[:, :-1].scatter_(-1, ids[:, 1:, None], 0.0)  # the law at t predicts x_{t+1}
    w = step_weights(3)
    torch.testing.assert_close(
        mtp_loss(logits, ids, mask, w, teacher), mtp_loss(logits, ids, mask, w)
    )


@pytest.mark.slow  # ~25 s: 60 training steps, then offline + online eval
def test_train_method_mtp_raises_tau_and_decodes_losslessly(cli, tmp_path):
    target, data = headless_target(tmp_path), tiny_data()
    r = cli(
        "train",
        "--method",
        "mtp",
        "--target",
        target,
        "--data",
        data,
        "-o",
        tmp_path / "run",
        "--steps",
        "60",
        "--batch-size",
        "8",
        "--max-len",
        "96",
        "--lr",
        "3e-3",
        "--threads",
        "1",
        "--json",
    )
    assert r.code == 0, r.err
    s = json.loads(r.out)
    assert s["method"] == "mtp" and s["init"] == "fresh"  # the headless copy has no head
    assert s["before"]["tau_every_position"] == pytest.approx(1.0, abs=0.05)
    assert s["after"]["tau_every_position"] > s["before"]["tau_every_position"] + 0.3, s["after"]
    head = tmp_path / "run" / "head"
    r = cli(
        "eval",
        "--target",
        target,
        "--drafter",
        head,
        "--data",
        data,
        "--online",
        "--max-new-tokens",
        "24",
        "--repeats",
        "1",
        "--limit",
        "3",
        "--threads",
        "1",
        "--json",
    )
    assert r.code == 0, r.err
    e = json.loads(r.out)
    assert e["method"] == "mtp" and e["lossless"] is True
    assert len(e["per_position_acceptance"]) == 3 and e["tau_online"] > 1.2
    assert e["offline"]["tau_walk"] > 1.2


@pytest.mark.slow  # ~20 s: a DATA dir, 10 training steps, one decode
def test_add_mtp_layer_writes_a_member_that_serves_its_head(cli, tmp_path):
    from eagle3kit.methods.mtp.train.zoo import add_mtp_layer
    from eagle3kit.model.loading import load_target

    member, out = headless_target(tmp_path), tmp_path / "dsv3-v1-tiny-mtp"
    torch.set_num_threads(1)
    add_mtp_layer(member, out, steps=10, samples=24, max_len=64)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["num_nextn_predict_layers"] == 1
    main, both = (
        load_file(str(member / "model.safetensors")),
        load_file(str(out / "model.safetensors")),
    )
    assert all(torch.equal(both[k], v) for k, v in main.items())  # main weights unchanged
    extra = set(both) - set(main)
    assert extra and all(k.startswith("model.layers.8.") for k in extra)
    assert {"model.layers.8.eh_proj.weight", "model.layers.8.shared_head.head.weight"} <= extra
    assert json.loads((out / "zoo.json").read_text())["mtp"]["layers"] == 1
    tm = load_target(str(out))  # loads as a target: the layer is left to the head
    prompt = "def parse(text):"
    plain = greedy_generate(tm, tm.tokenizer(prompt)["input_ids"], max_new_tokens=16).tokens
    r = cli(
        "generate",
        "--target",
        out,
        "--method",
        "mtp",
        "--prompt",
        prompt,
        "--max-new-tokens",
        "16",
        "--depth",
        "2",
        "--threads",
        "1",
        "--json",
    )
    assert r.code == 0, r.err
    g = json.loads(r.out)
    assert g["tokens"] == plain and g["stats"]["method"] == "mtp"
