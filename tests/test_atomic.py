"""core/atomic.py: a folder or file replaced under a reader (or a kill -9) is the old one whole
or the new one whole, never a mix and never missing; the stop points the kill tests use."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from kill_helpers import kill_at

from eagle3kit.core import atomic
from eagle3kit.core.atomic import atomic_dir, atomic_write_text, exchange

FILES = 20  # a folder of many files: a mix of old and new would show


def _fill(folder: Path, word: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(FILES):
        (folder / f"f{i:02d}").write_text(f"{word} {i}")


def _reads(folder: Path) -> str:
    words = {(folder / f"f{i:02d}").read_text().split()[0] for i in range(FILES)}
    assert len(words) == 1 and len(list(folder.iterdir())) == FILES, words  # no mix
    return words.pop()


WRITER = """
import sys
from pathlib import Path
from eagle3kit.core.atomic import atomic_dir
dest = Path(sys.argv[1])
with atomic_dir(dest) as tmp:
    for i in range(20):
        (tmp / f"f{i:02d}").write_text(f"new {i}")
"""


@pytest.mark.kill
@pytest.mark.parametrize(("moment", "finds"), [("before", "old"), ("after", "new")])
def test_a_folder_killed_at_the_swap_is_old_or_new_whole(tmp_path, moment, finds):
    dest = tmp_path / "X"
    _fill(dest, "old")
    kill_at([sys.executable, "-c", WRITER, str(dest)], f"{moment}:{dest}", tmp_path)
    assert _reads(dest) == finds
    assert len([p for p in tmp_path.iterdir() if p.name.startswith(".X.")]) == 1  # left over
    with atomic_dir(dest) as tmp:  # the next write removes what the killed one left
        _fill(tmp, "third")
    assert _reads(dest) == "third"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".X.")] == []


@pytest.mark.kill
def test_a_file_killed_before_its_rename_keeps_the_old_one(tmp_path):
    dest = tmp_path / "f.json"
    dest.write_text("old")
    code = (
        "from eagle3kit.core.atomic import atomic_write_text\n"
        f"atomic_write_text({str(dest)!r}, 'new')"
    )
    kill_at([sys.executable, "-c", code], f"before:{dest}", tmp_path)
    assert dest.read_text() == "old"
    atomic_write_text(dest, "new")
    assert dest.read_text() == "new"


def test_exchange_swaps_two_folders_in_one_step(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _fill(a, "aa")
    _fill(b, "bb")
    if not exchange(a, b):
        pytest.skip("this filesystem cannot exchange names (the fallback is tested below)")
    assert (_reads(a), _reads(b)) == ("bb", "aa")


def test_without_exchange_a_crash_between_the_renames_is_undone_by_the_next_write(
    tmp_path, monkeypatch
):
    """NFS or FAT: the old folder goes aside, then the new one comes in. A crash between the
    two leaves the old one aside; the next write to the same place puts it back first."""
    dest = tmp_path / "X"
    _fill(dest, "old")
    monkeypatch.setattr(atomic, "exchange", lambda a, b: False)
    renames, replace = [], os.replace

    def crash_on_second(src, dst):
        renames.append((Path(src).name, Path(dst).name))
        if len(renames) == 2:
            raise KeyboardInterrupt("the crash")
        replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", crash_on_second)
    with pytest.raises(KeyboardInterrupt), atomic_dir(dest) as tmp:
        _fill(tmp, "new")
    monkeypatch.setattr(atomic.os, "replace", replace)
    assert not dest.exists() and renames[0][1] == f".X.old-{os.getpid()}"
    with atomic_dir(dest) as tmp:
        assert _reads(dest) == "old"  # put back before the new write began
        _fill(tmp, "newer")
    assert _reads(dest) == "newer"
    assert list(tmp_path.glob(".X.old-*")) == []


@pytest.mark.kill
def test_a_stop_point_counts_its_matches(tmp_path):
    """#N: the N-th matching write stops the job; writes to other paths do not count."""
    code = (
        "from eagle3kit.core.atomic import atomic_write_text\n"
        "for i in range(5):\n"
        f"    atomic_write_text({str(tmp_path / 'other')!r}, str(i))\n"
        f"    atomic_write_text({str(tmp_path / 'log')!r}, str(i))\n"
    )
    where = kill_at([sys.executable, "-c", code], "after:*/log#3", tmp_path)
    assert where.split()[1:] == ["after", str(tmp_path / "log")]
    assert (tmp_path / "log").read_text() == "2" and (tmp_path / "other").read_text() == "2"
