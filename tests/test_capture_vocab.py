"""The launch line of engine capture says the capture command that goes with it, with the
drafter's own checkpoint as --vocab (what warm-start training from the store needs)."""

from __future__ import annotations

import torch
from decode_helpers import new_drafter, save_drafter_dir


def test_launch_command_names_the_capture_with_the_drafters_vocab(cli, tmp_path):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    model = str(zoo.get("llama-v1", size="tiny"))
    drafter = save_drafter_dir(new_drafter(TargetModel.from_pretrained(model)), tmp_path / "d")
    common = ("data", "capture", "--target", model, "--launch-command", "--states-dir", "/hs")
    r = cli(*common, "--drafter", drafter)
    assert r.code == 0, r.err
    assert r.out.startswith("vllm serve ") and len(r.out.strip().splitlines()) == 1  # stdout
    assert r.err.strip() == (
        f"then: eagle3kit data capture DATA --target {model} --drafter {drafter} "
        f"--vocab {drafter} --engine vllm --url URL --states-dir /hs -o STORE"
    )
    r = cli(*common)  # no drafter: a vocab of the user's choice
    assert r.code == 0 and "--vocab VOCAB --engine vllm" in r.err
