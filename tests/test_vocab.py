"""model/vocab.py: every expected value below is worked out by hand in the comment beside it."""

from __future__ import annotations

import os

import pytest
import torch

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.vocab import build_vocab, coverage, load_vocab, save_vocab, validate_vocab


def test_build_vocab_top_n_ties_by_lower_id():
    # id:      0  1  2  3  4  5  6  7
    counts = torch.tensor([5, 9, 0, 9, 2, 5, 5, 1])
    # ranked: 1(9) 3(9) 0(5) 5(5) 6(5) 4(2) 7(1) 2(0); top 4 = {1, 3, 0, 5} -> sorted [0, 1, 3, 5]
    d2t, t2d = build_vocab(counts, 4)
    assert d2t.dtype == torch.int64 and t2d.dtype == torch.bool
    assert d2t.tolist() == [0 - 0, 1 - 1, 3 - 2, 5 - 3]  # [0, 0, 1, 2]
    assert t2d.tolist() == [True, True, False, True, False, True, False, False]
    validate_vocab(d2t, t2d, 8, "built")


def test_build_vocab_full_size_is_identity():
    d2t, t2d = build_vocab(torch.tensor([3, 1, 2]), 3)
    assert d2t.tolist() == [0, 0, 0] and t2d.all()


@pytest.mark.parametrize("n", [0, 9])
def test_build_vocab_refuses_bad_size(n):
    with pytest.raises(Eagle3Error, match="draft_vocab_size: expected 1..8"):
        build_vocab(torch.ones(8, dtype=torch.long), n)


def test_build_vocab_refuses_float_counts():
    with pytest.raises(Eagle3Error, match="counts: expected an integer dtype"):
        build_vocab(torch.ones(8), 2)


GOOD_D2T = torch.tensor([0, 0, 1, 2])  # target ids 0, 1, 3, 5
GOOD_T2D = torch.tensor([True, True, False, True, False, True, False, False])


@pytest.mark.parametrize(
    ("d2t", "t2d", "message"),
    [
        (GOOD_D2T.float(), GOOD_T2D, "d2t: expected an integer dtype .int64., found float32"),
        (
            torch.tensor([0, 0, 1, 5]),
            GOOD_T2D,
            "d2t: expected target ids < 8 .*found 1 beyond",
        ),  # 3+5=8
        (torch.tensor([-1, 0, 1, 2]), GOOD_T2D, "d2t: expected target ids >= 0, found 1 negative"),
        (GOOD_D2T, GOOD_T2D[:7], "t2d: expected 8 entries .*found 7"),
        (
            GOOD_D2T,
            torch.tensor([True] * 4 + [False] * 4),
            "t2d: expected exactly the 4 target ids",
        ),
    ],
)
def test_validate_vocab_names_each_problem(d2t, t2d, message):
    with pytest.raises(Eagle3Error, match="^where: " + message):
        validate_vocab(d2t, t2d, 8, "where")


def test_validate_vocab_duplicates():
    # targets: 0+0=0, 1+1=2, 2+0=2 -> target 2 twice
    with pytest.raises(Eagle3Error, match="expected distinct target ids, found 1 draft ids"):
        validate_vocab(torch.tensor([0, 1, 0]), None, 8, "w")


def test_save_load_round_trip_and_umask(tmp_path):
    old = os.umask(0o022)
    try:
        save_vocab(tmp_path / "vocab.safetensors", GOOD_D2T, GOOD_T2D)
    finally:
        os.umask(old)
    assert (tmp_path / "vocab.safetensors").stat().st_mode & 0o777 == 0o644
    d2t, t2d = load_vocab(tmp_path / "vocab.safetensors")
    assert d2t.tolist() == GOOD_D2T.tolist() and t2d.tolist() == GOOD_T2D.tolist()
    assert [p.name for p in tmp_path.iterdir()] == ["vocab.safetensors"]


def test_save_refuses_invalid_and_writes_nothing(tmp_path):
    with pytest.raises(Eagle3Error, match="d2t: expected distinct"):
        save_vocab(
            tmp_path / "v.safetensors", torch.tensor([0, 1, 0]), torch.zeros(8, dtype=torch.bool)
        )
    assert list(tmp_path.iterdir()) == []


def test_load_refuses_missing_key_and_non_safetensors(tmp_path):
    from safetensors.torch import save_file

    save_file({"d2t": GOOD_D2T}, str(tmp_path / "a.safetensors"))
    with pytest.raises(
        Eagle3Error, match=r"a.safetensors: t2d: expected a tensor, found keys \['d2t'\]"
    ):
        load_vocab(tmp_path / "a.safetensors")
    (tmp_path / "b.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(Eagle3Error, match="b.safetensors: expected a safetensors file"):
        load_vocab(tmp_path / "b.safetensors")


def test_coverage_hand_computed():
    counts = torch.tensor([5, 9, 0, 9, 2, 5, 5, 1])  # total 36; sorted 9 9 5 5 5 2 1 0
    cov = coverage(counts, [0, 1, 2, 4, 8, 100])
    assert cov == {0: 0.0, 1: 9 / 36, 2: 18 / 36, 4: 28 / 36, 8: 1.0, 100: 1.0}
    assert coverage(torch.zeros(4, dtype=torch.long), [2]) == {2: 0.0}


def test_derive_t2d_marks_the_target_ids_d2t_names():
    """Issue 21: a checkpoint with d2t but no t2d gets t2d from d2t, never an all-zero one."""
    from eagle3kit.core.vocab import derive_t2d

    # draft ids 0, 1, 2 -> target ids 0 + 1, 1 + 2, 2 + 4 = 1, 3, 6 (of 8)
    t2d = derive_t2d(torch.tensor([1, 2, 4]), 8)
    assert t2d.dtype == torch.bool
    assert t2d.tolist() == [False, True, False, True, False, False, True, False]
    import numpy as np

    assert derive_t2d(np.array([1, 2, 4]), 8).tolist() == t2d.tolist()  # numpy in, numpy out
    with pytest.raises(Eagle3Error, match="d2t: expected target ids < 8"):
        derive_t2d(torch.tensor([1, 2, 6]), 8)  # draft id 2 -> target id 2 + 6 = 8
