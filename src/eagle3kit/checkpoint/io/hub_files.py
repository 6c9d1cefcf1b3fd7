"""A target as far as a reader needs it: config, tokenizer, index, and only the shards that
hold the tensors it reads.

A 1T-parameter target lives in its engine; what a user downloads of it is `config.json`, the
tokenizer, `model.safetensors.index.json` and the shard or two holding the embedding, the
final norm and `lm_head`. `open_target` reads such a partial directory (its absent shards are
`Checkpoint.absent`), and reads a Hub id the same way through `huggingface_hub.hf_hub_download`,
one file at a time: config, tokenizer files and the index at once, a shard only when a tensor
in it is read (`Checkpoint.info` fetches it). Under HF_HUB_OFFLINE only the local Hub cache is
used: a file not in it is named in one line, with the command that downloads it.

`open_checkpoint` is `load_checkpoint` (headers by range requests for a Hub id, nothing
downloaded) except offline, where a Hub id is read from the local Hub cache this way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.io.safetensors_io import (
    Checkpoint,
    _index_files,
    load_checkpoint,
    load_local,
    looks_like_repo_id,
    read_header_file,
)
from eagle3kit.core.environment import hub_offline
from eagle3kit.core.errors import Eagle3Error, bad

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# Files a tokenizer (and a chat template) may need, fetched when the repo has them.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "tiktoken.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)


class _HubFiles:
    """hf_hub_download, one file at a time, from the Hub or (offline) the local cache only."""

    def __init__(self, repo_id: str, revision: str | None) -> None:
        self.repo_id, self.revision, self.offline = repo_id, revision, hub_offline()

    def get(self, rel: str, *, required: bool = True) -> str | None:
        """The local path of `rel`; None when the repo (or, offline, the cache) lacks it and it
        is not `required`."""
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError

        where = f"{self.repo_id}/{rel}"
        try:
            if self.offline:
                return self._from_cache(rel)
            return hf_hub_download(self.repo_id, rel, revision=self.revision)
        except EntryNotFoundError as e:
            if not required:
                return None
            if self.offline:
                raise bad(
                    where,
                    "not in the local Hub cache and HF_HUB_OFFLINE is set (offline); "
                    f"`hf download {self.repo_id} {rel}` fetches it",
                ) from e
            raise bad(where, f"not in the Hub repo ({type(e).__name__})") from e
        except Exception as e:  # repo not found, network, ... (kept as __cause__)
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise bad(where, f"cannot fetch from the Hub: {type(e).__name__}: {first}") from e

    def cached(self, rel: str) -> str | None:
        """The local path of `rel` when the local Hub cache holds it (never a download)."""
        return cached_hub_file(self.repo_id, rel, revision=self.revision)

    def _from_cache(self, rel: str) -> str:
        from huggingface_hub.errors import EntryNotFoundError

        found = self.cached(rel)
        if found is None:
            raise EntryNotFoundError(f"{self.repo_id}/{rel} is not in the local cache")
        return found


def cached_hub_file(
    repo_id: str, filename: str, *, repo_type: str | None = None, revision: str | None = None
) -> str | None:
    """The local path of a Hub file when the huggingface_hub cache holds it, else None: a
    lookup of the cache's folders, no request. (`hf_hub_download(local_files_only=True)`
    builds request headers, and from huggingface_hub 2.x that asks the Hub for its agent
    registry: up to 3 s on a dead network.)"""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, filename, revision=revision, repo_type=repo_type)
    except Exception:  # a broken cache, an invalid id: nothing to read
        return None
    return found if isinstance(found, str) and Path(found).is_file() else None


def _read_json(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(path, f"expected JSON, cannot read it ({type(e).__name__}: {e})") from e


def _remote_code_files(*configs: Any) -> list[str]:
    """The Python modules a config's `auto_map` names (`configuration_x.Cls` -> the file)."""
    out: list[str] = []
    for cfg in configs:
        amap = cfg.get("auto_map") if isinstance(cfg, dict) else None
        for v in (amap or {}).values() if isinstance(amap, dict) else ():
            for ref in v if isinstance(v, list) else [v]:
                if isinstance(ref, str) and "." in ref and "--" not in ref:
                    out.append(ref.split(".")[0] + ".py")
    return sorted(set(out))


def load_hub_files(repo_id: str, revision: str | None = None) -> Checkpoint:
    """A Hub repo through hf_hub_download: config, tokenizer files, remote-code modules named
    by `auto_map`, and the index (or the single weights file); the headers of the shards the
    local Hub cache holds; any other shard later, downloaded when a tensor in it is read."""
    hub = _HubFiles(repo_id, revision)
    cfg_path = hub.get("config.json")
    config = _read_json(cfg_path)
    if not isinstance(config, dict):
        raise bad(cfg_path, f"expected a JSON object, found {type(config).__name__}")
    tok = {f: p for f in TOKENIZER_FILES if (p := hub.get(f, required=False))}
    tok_cfg = _read_json(tok["tokenizer_config.json"]) if "tokenizer_config.json" in tok else {}
    for f in _remote_code_files(config, tok_cfg):
        hub.get(f, required=False)
    ckpt = Checkpoint(
        repo_id,
        config,
        cfg_path,
        {},
        [],
        has_tokenizer="tokenizer.json" in tok or "tokenizer_config.json" in tok,
        tokenizer_file=tok.get("tokenizer.json"),
    )
    index = hub.get(INDEX, required=False)
    if index is not None:
        ckpt.index_file = index
        ckpt.absent = dict(_index_files(_read_json(index), index, None))
        ckpt.fetch = hub.get  # a shard not in the cache is fetched when a tensor in it is read
        for shard in ckpt.missing_shards():
            if (path := hub.cached(shard)) is not None:
                ckpt._add_shard(shard, path)
    else:
        single = hub.get(SINGLE)
        ckpt.tensors, ckpt.files = read_header_file(single), [single]
    return ckpt


def open_target(name: str, revision: str | None = None) -> Checkpoint:
    """A target for a reader of some of its tensors: a local dir or file (partial allowed:
    only the shards holding what is read must be there), or a Hub id (`load_hub_files`)."""
    if os.path.exists(name):
        return load_local(name)
    if not looks_like_repo_id(name):
        raise bad(name, "no such file or directory (and not a Hub repo id of the form org/name)")
    return load_hub_files(name, revision)


def open_checkpoint(name: str) -> Checkpoint:
    """`load_checkpoint`, except that offline a Hub id is read from the local Hub cache."""
    first = name.split("/")[0]
    if (
        os.path.exists(name)
        or not looks_like_repo_id(name)
        or os.path.isdir(first)
        or not hub_offline()
    ):
        return load_checkpoint(name)
    try:
        return load_hub_files(name)
    except Eagle3Error as e:
        raise bad(name, f"no such local path; as a Hub repo id (offline): {e}") from e
