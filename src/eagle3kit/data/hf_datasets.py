"""Rows of a Hugging Face `datasets` dataset: a `save_to_disk` folder, or a hub id.

With the `datasets` package: `load_from_disk` (folders) or `load_dataset(id, split=...)` (hub).
Without it, a saved folder is still readable with `pyarrow` alone: `save_to_disk` writes
Arrow IPC streams listed in `state.json` (`_data_files`), one folder per split under a
`dataset_dict.json`. With neither package: one clear error saying what to install.
A dataset with several splits is read from `train` (or its only split).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eagle3kit.core.errors import Eagle3Error

INSTALL_HINT = "install 'datasets' (pip install datasets) or at least 'pyarrow'"


def _pick_split(splits: list[str], where: str) -> str:
    if "train" in splits:
        return "train"
    if len(splits) == 1:
        return splits[0]
    raise Eagle3Error(f"{where}: several splits {splits} and none is 'train'")


def _rows_with_datasets(source: str) -> Iterator[dict[str, Any]]:
    import datasets

    if Path(source).is_dir():
        try:
            ds = datasets.load_from_disk(source)
        except (FileNotFoundError, ValueError) as e:
            raise Eagle3Error(f"{source}: not a saved datasets directory ({e})") from e
    else:
        try:
            ds = datasets.load_dataset(source)
        except Exception as e:  # network, missing repo, bad config: all one line for the user
            raise Eagle3Error(f"{source}: cannot load the hub dataset ({e})") from e
    if isinstance(ds, datasets.DatasetDict):
        ds = ds[_pick_split(list(ds), source)]
    yield from iter(ds)


def _arrow_files(folder: Path) -> list[Path]:
    """The Arrow files of one saved split, in order (state.json `_data_files`)."""
    state = folder / "state.json"
    try:
        doc = json.loads(state.read_text())
        names = [d["filename"] for d in doc["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Eagle3Error(f"{state}: expected a datasets state.json with _data_files ({e})") from e
    files = [folder / n for n in names]
    for f in files:
        if f.resolve().parent != folder.resolve() or not f.is_file():
            raise Eagle3Error(f"{state}: _data_files names {f.name!r}, not a file in {folder}")
    return files


def _rows_with_pyarrow(source: str) -> Iterator[dict[str, Any]]:
    import pyarrow as pa

    folder = Path(source)
    splits_file = folder / "dataset_dict.json"
    if splits_file.is_file():
        try:
            splits = json.loads(splits_file.read_text())["splits"]
        except (ValueError, KeyError) as e:
            raise Eagle3Error(f"{splits_file}: expected {{'splits': [...]}} ({e})") from e
        folder = folder / _pick_split(list(splits), source)
    for f in _arrow_files(folder):
        try:
            with pa.memory_map(str(f)) as src:
                for batch in pa.ipc.open_stream(src):
                    yield from batch.to_pylist()
        except pa.ArrowInvalid as e:
            raise Eagle3Error(f"{f}: not an Arrow stream file ({e})") from e


def iter_rows(source: str) -> Iterator[dict[str, Any]]:
    """Each row of the dataset at `source` (a saved folder, or a hub id with network)."""
    try:
        import datasets  # noqa: F401
    except ImportError:
        pass
    else:
        return _rows_with_datasets(source)
    if not Path(source).is_dir():
        raise Eagle3Error(f"{source}: reading a hub dataset needs the 'datasets' package")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise Eagle3Error(f"{source}: a datasets directory; to read it, {INSTALL_HINT}") from None
    return _rows_with_pyarrow(source)
