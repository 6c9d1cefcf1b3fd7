"""Before any work: DATA must have been prepared for the target (`train`, `eval`, `probe` and
`data capture` run the one check, data.prepared.check_data_matches_target), and a drafter whose
draft vocabulary misses DATA's loss tokens says so (warns below 50%, refuses at 0)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from test_train_helpers import tiny_data, tiny_target, train_args


@pytest.fixture(scope="module")
def best_dir(tmp_path_factory):
    from conftest import run_cli

    out = tmp_path_factory.mktemp("checks") / "run"
    r = run_cli(*train_args(out, tiny_data(), tiny_target(), "--steps", "1", "--json"))
    assert r.code == 0, r.err
    return out / "best"


def _data_with(tmp_path, **target_fields):
    """A copy of the tiny DATA whose data.json records another target."""
    dst = tmp_path / "data-other"
    shutil.copytree(tiny_data(), dst)
    meta = json.loads((dst / "data.json").read_text())
    meta["target"].update(target_fields)
    (dst / "data.json").write_text(json.dumps(meta))
    return dst


MISMATCHES = {
    "tokenizer_size": {"tokenizer_size": 999},
    "vocab_size": {"vocab_size": 1000},
    "tokenizer_sha256": {"tokenizer_sha256": "0" * 64},
}


def _assert_refused(r, field, data):
    assert r.code == 2, (r.code, r.err[-2000:])
    assert "Traceback" not in r.err
    last = r.err.strip().splitlines()[-1]  # (transformers' own load bar may come before it)
    assert f"target.{field}" in last and str(data / "data.json") in last, last


@pytest.mark.parametrize("field", list(MISMATCHES))
def test_train_refuses_data_of_another_target(field, tmp_path, cli):
    data = _data_with(tmp_path, **MISMATCHES[field])
    out = tmp_path / "run"
    r = cli(*train_args(out, data, tiny_target(), "--steps", "1"))
    _assert_refused(r, field, data)
    assert not (out / "state").exists()


def test_capture_refuses_data_of_another_tokenizer(tmp_path, cli):
    data = _data_with(tmp_path, tokenizer_size=999)
    out = tmp_path / "store"
    r = cli("data", "capture", data, "--target", tiny_target(), "-o", out)
    _assert_refused(r, "tokenizer_size", data)
    assert not out.exists()


def test_eval_refuses_data_of_another_target(best_dir, tmp_path, cli):
    data = _data_with(tmp_path, tokenizer_size=999)
    r = cli("eval", "--target", tiny_target(), "--drafter", best_dir, "--data", data)
    _assert_refused(r, "tokenizer_size", data)


def test_probe_refuses_data_of_another_target(best_dir, tmp_path, cli):
    data = _data_with(tmp_path, tokenizer_size=999)
    r = cli("probe", "--drafter", best_dir, "--target", tiny_target(), "--data", data)
    _assert_refused(r, "tokenizer_size", data)


def test_data_records_the_tokenizer_fingerprint(tmp_path):
    from transformers import AutoTokenizer

    from eagle3kit.data.prepare import prepare
    from eagle3kit.data.prepared import tokenizer_fingerprint

    src = tmp_path / "convs.jsonl"
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    src.write_text(json.dumps({"messages": turns}) + "\n")
    prepare([src], tiny_target(), tmp_path / "data", max_length=64)
    meta = json.loads((tmp_path / "data" / "data.json").read_text())
    tok = AutoTokenizer.from_pretrained(str(tiny_target()))
    assert meta["target"]["tokenizer_sha256"] == tokenizer_fingerprint(tok)


def _loss_token_counts():
    from eagle3kit.data.prepared import load_prepared

    d = load_prepared(tiny_data())
    return torch.bincount(d.all_input_ids[d.all_loss_mask].long(), minlength=512)


def _with_vocab(best_dir, dst, ids):
    """best_dir's drafter with its draft vocab re-pointed at target ids `ids` (sorted)."""
    from safetensors.torch import load_file, save_file

    dst.mkdir()
    (dst / "config.json").write_text((best_dir / "config.json").read_text())
    t = load_file(str(best_dir / "model.safetensors"))
    n = t["d2t"].numel()
    ids = torch.tensor(sorted(ids)[:n])
    assert ids.numel() == n
    t["d2t"] = ids - torch.arange(n)
    t["t2d"] = torch.zeros_like(t["t2d"])
    t["t2d"][ids] = True
    save_file(t, str(dst / "model.safetensors"))
    return dst


def _warm_args(out, init):
    args = train_args(out, tiny_data(), tiny_target(), "--init-from", init, "--steps", "1")
    i = args.index("--draft-vocab-size")  # a warm start keeps the checkpoint's vocab
    return args[:i] + args[i + 2 :]


def test_warm_start_with_no_loss_token_in_vocab_is_refused(best_dir, tmp_path, cli):
    counts = _loss_token_counts()
    unused = [int(i) for i in torch.nonzero(counts == 0).flatten()]
    init = _with_vocab(best_dir, tmp_path / "none", unused)
    out = tmp_path / "run"
    r = cli(*_warm_args(out, init))
    assert r.code == 2, r.err[-2000:]
    last = r.err.strip().splitlines()[-1]
    assert "--rebuild-vocab" in last and "loss tokens" in last, last
    assert not (out / "state").exists()


def test_warm_start_with_low_coverage_warns(best_dir, tmp_path, cli):
    counts = _loss_token_counts()
    order = torch.argsort(counts)  # rarest first: the unused ids, then the rarest used ones
    n_unused = int((counts == 0).sum())
    init = _with_vocab(best_dir, tmp_path / "low", order[: n_unused + 10].tolist()[-96:])
    out = tmp_path / "run"
    r = cli(*_warm_args(out, init), "--json")
    assert r.code == 0, r.err[-2000:]
    cov = json.loads(r.out)["vocab_coverage"]
    inside = int(counts[torch.tensor(order[: n_unused + 10].tolist()[-96:])].sum())
    assert cov["loss_tokens"] == int(counts.sum()) and cov["in_draft_vocab"] == inside
    assert 0 < cov["fraction"] < 0.5
    warn = [x for x in r.err.splitlines() if x.startswith("warning:") and "vocab" in x]
    assert len(warn) == 1 and "--rebuild-vocab" in warn[0], r.err[-2000:]


def test_fresh_vocab_from_data_does_not_warn(tmp_path, cli):
    r = cli(*train_args(tmp_path / "run", tiny_data(), tiny_target(), "--steps", "1", "--json"))
    assert r.code == 0, r.err[-2000:]
    assert json.loads(r.out)["vocab_coverage"]["fraction"] >= 0.5
    assert not [x for x in r.err.splitlines() if x.startswith("warning:") and "vocab" in x]
