"""The DATA directory that `data prepare` writes and training reads (format `eagle3kit-data/1`).

    DATA/data.json              {"kind": "eagle3kit.data", "schema": 1,
                                 "format": "eagle3kit-data/1", "target": {...identity...},
                                 "template_sha256", "max_length", "samples", "tokens",
                                 "loss_tokens", "truncated",
                                 "skipped": [{"file", "line", "reason"}],
                                 "shards": [{"file", "samples", "tokens", "sha256"}]}
    DATA/shard-00000.safetensors  input_ids int32 [N_tok]    all samples' tokens, concatenated
                                  loss_mask uint8 [N_tok]    1 where the token is an assistant
                                                             token (incl. its end-of-turn token)
                                  offsets   int64 [n+1]      sample j: tokens[offsets[j]:
                                                                           offsets[j+1]]
                                  metadata {"ids": JSON list of the n sample ids}

Any safetensors reader opens a shard (`safetensors.numpy.load_file`); nothing is pickled.
The loss mask marks tokens to *predict*: a causal LM trained on (input_ids, loss_mask) takes
its loss at position t-1 (predicting token t) where loss_mask[t] is True.

`split` is deterministic in the sample ids: sample i goes to held-out when its rank under
sha256(f"{seed}:{id}") is among the first n_heldout, so the same ids give the same split in any
order and in any other store (a feature store calls `split_ids` with its own ids).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from eagle3kit.core.atomic import atomic_write_json, save_safetensors
from eagle3kit.core.digest import sha256_file
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.data.split import split_ids  # noqa: F401  (the split's one rule, torch-free)

FORMAT = "eagle3kit-data/1"
META = "data.json"
SHARD_TOKENS = 1 << 22  # ~4M tokens (20 MB) per shard


@dataclass(frozen=True)
class Sample:
    id: str
    input_ids: torch.Tensor  # int64 [T]
    loss_mask: torch.Tensor  # bool [T]


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """sha256 of the tokenizer's vocabulary (every token and its id, by id): two tokenizers
    with the same fingerprint turn text into the same ids."""
    pairs = sorted(tokenizer.get_vocab().items(), key=lambda kv: (kv[1], kv[0]))
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode()).hexdigest()


def check_data_matches_target(
    meta: dict[str, Any], where: str, *, vocab_size: int | None = None, tokenizer: Any = None
) -> None:
    """DATA's recorded target (data.json "target") against the target in hand: vocab_size,
    tokenizer size and tokenizer fingerprint, each where both sides know it. The one check
    `data capture`, `train`, `eval` and `probe` run before any work; `where` names data.json.
    """
    rec = meta.get("target") or {}
    name = rec.get("name_or_path") or "another target"
    fix = "; prepare DATA again with this target (`eagle3kit data prepare --target ...`)"
    want = rec.get("vocab_size")
    if want is not None and vocab_size is not None and int(want) != int(vocab_size):
        raise bad(
            where,
            f"target.vocab_size: expected the target's {vocab_size}, found {want} "
            f"(DATA was prepared for {name}){fix}",
        )
    if tokenizer is None:
        return
    size = rec.get("tokenizer_size")
    if size is not None and int(size) != len(tokenizer):
        raise bad(
            where,
            f"target.tokenizer_size: expected the target tokenizer's {len(tokenizer)}, found "
            f"{size} (DATA was tokenised for {name}){fix}",
        )
    sha = rec.get("tokenizer_sha256")
    if sha is not None and sha != tokenizer_fingerprint(tokenizer):
        raise bad(
            where,
            f"target.tokenizer_sha256: expected the target tokenizer's, found another "
            f"(DATA was tokenised for {name}){fix}",
        )


class PreparedWriter:
    """Append samples, then `finish(meta)`: shards written atomically, data.json last.

    Write into a temp folder (`eagle3kit.core.atomic.atomic_dir`) so a killed run leaves nothing
    half-made under the final name.
    """

    def __init__(self, folder: str | Path, shard_tokens: int = SHARD_TOKENS) -> None:
        self.folder = Path(folder)
        self.shard_tokens = shard_tokens
        self.shards: list[dict[str, Any]] = []
        self._ids: list[str] = []
        self._tok: list[torch.Tensor] = []
        self._mask: list[torch.Tensor] = []
        self._n_tok = 0
        self.samples = self.tokens = self.loss_tokens = 0

    def add(self, sample_id: str, input_ids: Sequence[int], loss_mask: Sequence[bool]) -> None:
        ids = torch.as_tensor(input_ids, dtype=torch.int32)  # [T]
        mask = torch.as_tensor(loss_mask, dtype=torch.uint8)  # [T]
        if ids.dim() != 1 or ids.shape != mask.shape:
            raise ValueError(
                f"sample {sample_id}: input_ids {list(ids.shape)} vs loss_mask {list(mask.shape)}"
            )
        self._ids.append(str(sample_id))
        self._tok.append(ids)
        self._mask.append(mask)
        self._n_tok += ids.numel()
        self.samples += 1
        self.tokens += ids.numel()
        self.loss_tokens += int(mask.sum())
        if self._n_tok >= self.shard_tokens:
            self._flush()

    def _flush(self) -> None:
        if not self._ids:
            return
        lengths = torch.tensor([t.numel() for t in self._tok], dtype=torch.int64)  # [n]
        offsets = torch.zeros(len(lengths) + 1, dtype=torch.int64)  # [n+1]
        offsets[1:] = torch.cumsum(lengths, 0)
        name = f"shard-{len(self.shards):05d}.safetensors"
        tensors = {
            "input_ids": torch.cat(self._tok),  # int32 [N_tok]
            "loss_mask": torch.cat(self._mask),  # uint8 [N_tok]
            "offsets": offsets,
        }
        save_safetensors(self.folder / name, tensors, {"ids": json.dumps(self._ids)})
        self.shards.append(
            {
                "file": name,
                "samples": len(self._ids),
                "tokens": self._n_tok,
                "sha256": sha256_file(self.folder / name),
            }
        )
        self._ids, self._tok, self._mask, self._n_tok = [], [], [], 0

    def finish(self, meta: dict[str, Any]) -> dict[str, Any]:
        """Write the last shard and data.json (`meta` + counts + shards); returns the document."""
        self._flush()
        doc = {
            "kind": "eagle3kit.data",
            "schema": 1,
            "format": FORMAT,
            **meta,
            "samples": self.samples,
            "tokens": self.tokens,
            "loss_tokens": self.loss_tokens,
            "shards": self.shards,
        }
        atomic_write_json(self.folder / META, doc)
        return doc


def _read_meta(folder: Path) -> dict[str, Any]:
    f = folder / META
    if not f.is_file():
        raise bad(str(folder), f"expected a prepared DATA directory with {META}, found none")
    try:
        doc = json.loads(f.read_text())
    except ValueError as e:
        raise bad(str(f), f"expected JSON, found a parse error ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise bad(str(f), f"format: expected {FORMAT!r}, found {found!r}")
    if not isinstance(doc.get("shards"), list):
        raise bad(str(f), "shards: expected a list")
    return doc


def _load_shard(
    folder: Path, entry: Any, verify: bool
) -> tuple[list[str], dict[str, torch.Tensor]]:
    from safetensors import SafetensorError, safe_open

    where = str(folder / META)
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
        raise bad(
            where, f"shards: expected {{'file', 'samples', 'tokens', 'sha256'}}, found {entry!r}"
        )
    f = folder / entry["file"]
    if f.resolve().parent != folder.resolve() or not f.is_file():
        raise bad(where, f"shards: {entry['file']!r} is not a file in {folder}")
    if verify and sha256_file(f) != entry.get("sha256"):
        raise bad(str(f), f"sha256: expected {entry.get('sha256')} (data.json), found another")
    try:
        with safe_open(str(f), framework="pt") as st:
            ids = json.loads((st.metadata() or {}).get("ids", "null"))
            t = {k: st.get_tensor(k) for k in ("input_ids", "loss_mask", "offsets")}
    except (SafetensorError, ValueError) as e:
        raise bad(
            str(f), f"expected a shard with input_ids, loss_mask, offsets and ids ({e})"
        ) from e
    n_tok, n = t["input_ids"].numel(), len(t["offsets"]) - 1
    ok = (
        isinstance(ids, list)
        and len(ids) == n == entry.get("samples")
        and t["loss_mask"].numel() == n_tok == entry.get("tokens")
        and int(t["offsets"][0]) == 0
        and int(t["offsets"][-1]) == n_tok
        and bool((t["offsets"][1:] >= t["offsets"][:-1]).all())
    )
    if not ok:
        raise bad(
            str(f),
            f"expected {entry.get('samples')} samples / {entry.get('tokens')} tokens with "
            f"consistent offsets, ids and loss_mask, found {n} / {n_tok}",
        )
    return ids, t


class PreparedData:
    """A DATA directory in memory: `len(d)`, `d[i] -> Sample`, `d.ids`, `d.meta`, `d.split()`."""

    def __init__(self, path: str | Path, *, verify: bool = True) -> None:
        self.path = Path(path)
        self.meta = _read_meta(self.path)
        self.ids: list[str] = []
        toks, masks, offs = [], [], [torch.zeros(1, dtype=torch.int64)]
        base = 0
        for entry in self.meta["shards"]:
            ids, t = _load_shard(self.path, entry, verify)
            self.ids += [str(i) for i in ids]
            toks.append(t["input_ids"])
            masks.append(t["loss_mask"])
            offs.append(t["offsets"][1:] + base)
            base += t["input_ids"].numel()
        self._tokens = torch.cat(toks) if toks else torch.zeros(0, dtype=torch.int32)  # [N_tok]
        self._mask = torch.cat(masks).bool() if masks else torch.zeros(0, dtype=torch.bool)
        self._offsets = torch.cat(offs)  # [n+1]
        if len(self.ids) != self.meta.get("samples"):
            raise bad(
                str(self.path / META),
                f"samples: expected {self.meta.get('samples')}, found {len(self.ids)} in the "
                "shards",
            )

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> Sample:
        if not -len(self) <= i < len(self):
            raise IndexError(f"sample {i} of {len(self)}")
        i %= len(self)
        a, b = int(self._offsets[i]), int(self._offsets[i + 1])
        return Sample(self.ids[i], self._tokens[a:b].long(), self._mask[a:b].clone())

    def lengths(self) -> torch.Tensor:
        """Tokens per sample, int64 [n] (for length-bucketed batching)."""
        return self._offsets[1:] - self._offsets[:-1]

    @property
    def all_input_ids(self) -> torch.Tensor:
        """Every token of every sample, concatenated (int32 [N_tok])."""
        return self._tokens

    @property
    def all_loss_mask(self) -> torch.Tensor:
        return self._mask  # bool [N_tok]

    def split(self, heldout: float | int = 0.05, seed: int = 0) -> tuple[list[int], list[int]]:
        """(train indices, held-out indices), both ascending; see `split_ids`."""
        return split_ids(self.ids, heldout, seed)


def load_prepared(path: str | Path, *, verify: bool = True) -> PreparedData:
    """Open a DATA directory (checks data.json, shard hashes when `verify`, shapes, counts)."""
    return PreparedData(path, verify=verify)


def collate(
    samples: Sequence[Sample], pad_id: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad a batch -> (input_ids int64 [B, T], attention_mask bool [B, T],
    loss_mask bool [B, T]).

    T = the longest sample; padding has attention_mask False, loss_mask False, id `pad_id`.
    """
    if not samples:
        raise Eagle3Error("collate: expected at least one sample, found none")
    t_max = max(s.input_ids.numel() for s in samples)
    b = len(samples)
    input_ids = torch.full((b, t_max), pad_id, dtype=torch.long)  # [B, T]
    attention_mask = torch.zeros(b, t_max, dtype=torch.bool)  # [B, T]
    loss_mask = torch.zeros(b, t_max, dtype=torch.bool)  # [B, T]
    for r, s in enumerate(samples):
        n = s.input_ids.numel()
        input_ids[r, :n] = s.input_ids
        attention_mask[r, :n] = True
        loss_mask[r, :n] = s.loss_mask
    return input_ids, attention_mask, loss_mask
