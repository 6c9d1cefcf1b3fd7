"""The offline feature store: what `data capture` writes and offline training reads.

Per token t of every prepared sample it keeps what :func:`eagle3kit.data.features.compute_features`
gives, compactly (k = number of aux layers, H = the target's hidden size, K = top-K):

    aux         float8_e4m3fn [N_tok, k*H]   q = clamp(x / s, ±448) in fp8, per aux layer
    aux_scale   float32 [N_tok, k]            s[t, j] = max_i |x[t, j, i]| / 448  (1 for a zero row)
    teacher_logp float16 [N_tok, K]           top-K log-probs over the draft vocab (descending)
    teacher_ids int16|int32 [N_tok, K]        their draft ids (absent when K = Vd: ids = arange)
    target_argmax int32 [N_tok]               argmax over the FULL target vocab
    input_ids   int32 [N_tok], loss_mask uint8 [N_tok], offsets int64 [n+1]; metadata "ids"

so a token costs k*H + 4k + 9 + K*(2 + 2) bytes (int16 ids), against 8H for SpecForge's bf16
aux 3H + last hidden H (at H = 7168, k = 3, K = 64: 21 781 vs 57 344 bytes, 38%).
Dequantisation: x ≈ float(q) * s; fp8 e4m3 keeps 3 mantissa bits: |x - x'| <= s * 2^-4 * 448 worst
case.

STORE/manifest.json: {"format", "target", "aux_layers", "tokens", "samples", "shards": [{"file",
"sha256", "tokens", "samples", "bytes"}], "data": {...}, "vocab": {...}, "quantisation": {...},
"shard_tokens", "heldout_data", "drafter_layers", "complete"}. ``aux_layers`` are every h-index
the store holds, in column order (a superset of a drafter's, e.g. also the probe's other
reading): readers pick the ones they need by h-index (``FeatureStore.get(indices, layers)``);
``drafter_layers`` are the ones captured as the drafter's (the first ones; a fresh `train
--features` takes them). ``target.name_or_path`` is an absolute path for a local target (a hub
id as given). ``heldout_data`` is true when DATA is held-out data (``capture(heldout_data=True)``,
or DATA's data.json ``"split"`` names a held-out split): `eval --features` then scores the whole
store by default. Stores written before these keys are read as before (no ``drafter_layers``:
all ``aux_layers``; no ``heldout_data``: false). Shards are written whole (temp, fsync,
rename) and then listed in the manifest (rewritten atomically), so a kill at any point leaves a
valid prefix: the same command resumes after the last listed shard (samples go to shards in
data order, deterministically).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from eagle3kit.core.atomic import atomic_write_json, save_safetensors
from eagle3kit.core.digest import sha256_file
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.core.progress import Progress, emit
from eagle3kit.data.features import Features, compute_features
from eagle3kit.data.prepared import (
    META,
    check_data_matches_target,
    collate,
    load_prepared,
    split_ids,
)

if TYPE_CHECKING:
    from eagle3kit.model.protocols import RunningTarget

FORMAT = "eagle3kit-features/1"
MANIFEST = "manifest.json"
FP8_MAX = 448.0  # largest finite float8_e4m3fn
SHARD_TOKENS = 32768
DEFAULT_TOPK = 64


# -- quantisation ----------------------------------------------------------------------------
def quantise_aux(aux: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """aux [N, k*H] float -> (q float8_e4m3fn [N, k*H], scale float32 [N, k]), per token and
    layer."""
    x = aux.float().reshape(aux.shape[0], k, -1)  # [N, k, H]
    amax = x.abs().amax(dim=-1)  # [N, k]
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))  # [N, k]
    q = (x / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)  # [N, k, H]
    return q.reshape(aux.shape[0], -1), scale


def dequantise_aux(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """(q [N, k*H] fp8, scale [N, k]) -> aux float32 [N, k*H]."""
    n, k = scale.shape
    return (q.float().reshape(n, k, -1) * scale[..., None]).reshape(n, -1)  # [N, k*H]


def ids_dtype(draft_vocab_size: int) -> torch.dtype:
    return torch.int16 if draft_vocab_size <= 32767 else torch.int32


def bytes_per_token(k: int, hidden: int, topk: int, draft_vocab_size: int) -> int:
    """Tensor bytes one token costs in a shard (headers and offsets aside)."""
    ids = 0 if topk >= draft_vocab_size else topk * ids_dtype(draft_vocab_size).itemsize
    return k * hidden + 4 * k + 4 + 1 + 4 + 2 * topk + ids


# -- identities and the manifest -------------------------------------------------------------
def _vocab(vocab: str | Path | None, target: RunningTarget) -> tuple[torch.Tensor, dict[str, Any]]:
    """(d2t [Vd], identity): a vocab file (d2t/t2d) or, without one, the full target vocab."""
    V = target.vocab_size
    if vocab is None:
        return torch.zeros(V, dtype=torch.long), {"file": None, "draft_vocab_size": V}
    from eagle3kit.core.vocab import load_vocab, validate_vocab

    d2t, t2d = load_vocab(vocab)
    validate_vocab(d2t, t2d, V, str(vocab))
    return d2t.long(), {
        "file": str(Path(vocab).resolve()),
        "sha256": sha256_file(vocab),
        "draft_vocab_size": int(d2t.numel()),
    }


def _data_identity(data: Any) -> dict[str, Any]:
    m = data.meta
    return {
        "path": str(data.path.resolve()),
        "data_json_sha256": sha256_file(data.path / META),
        "samples": len(data),
        "tokens": int(m.get("tokens", 0)),
        "template_sha256": m.get("template_sha256"),
    }


HELDOUT_SPLITS = ("heldout", "held-out", "test", "validation", "eval")


def data_is_heldout(meta: dict[str, Any], declared: bool | None) -> bool:
    """Is DATA held-out data? ``declared`` (capture's option) when given, else what DATA's
    data.json says (``"split"``: one of HELDOUT_SPLITS), else False."""
    if declared is not None:
        return bool(declared)
    return str(meta.get("split") or "").lower() in HELDOUT_SPLITS


def target_identity(target: RunningTarget) -> dict[str, Any]:
    """The target's identity with a local path made absolute (a hub id stays as given), so a
    store read from another working directory still finds its target."""
    ident = dict(target.identity())
    src = ident.get("name_or_path")
    if src and Path(str(src)).expanduser().exists():
        ident["name_or_path"] = str(Path(str(src)).expanduser().resolve())
    return ident


def _fresh_manifest(
    target: RunningTarget,
    data: Any,
    vocab_id: dict,
    topk: int,
    shard_tokens: int,
    heldout: bool = False,
    drafter_layers: Any = None,
) -> dict:
    vd = vocab_id["draft_vocab_size"]
    quant = {
        "aux": "float8_e4m3fn",
        "aux_scale": "float32 per token per aux layer (amax / 448)",
        "teacher_logp": "float16",
        "topk": topk,
        "teacher_ids": None if topk >= vd else str(ids_dtype(vd)).removeprefix("torch."),
    }
    return {
        "kind": "eagle3kit.feature_store",
        "schema": 1,
        "format": FORMAT,
        "target": target_identity(target),
        "aux_layers": list(target.aux_layers),
        "drafter_layers": [int(i) for i in drafter_layers or target.aux_layers],
        "hidden_size": target.hidden_size,
        "tokens": 0,
        "samples": 0,
        "shards": [],
        "data": _data_identity(data),
        "vocab": vocab_id,
        "quantisation": quant,
        "shard_tokens": shard_tokens,
        "heldout_data": heldout,
        "complete": False,
    }


_SAME = ("format", "target", "aux_layers", "data", "vocab", "quantisation", "shard_tokens")
_SAME_NEW = ("heldout_data", "drafter_layers")  # keys older stores lack: compared as _old()
_WHERE = ("name_or_path", "path", "file")  # where things live may change between runs; not what


def _what(value: Any) -> Any:
    return {k: v for k, v in value.items() if k not in _WHERE} if isinstance(value, dict) else value


def _old(man: dict[str, Any], key: str) -> Any:
    """A manifest's value, with what a store written before the key existed meant by it."""
    if key in man:
        return man[key]
    return {"heldout_data": False, "drafter_layers": man.get("aux_layers")}.get(key)


def read_manifest(path: Path) -> dict[str, Any]:
    f = path / MANIFEST
    try:
        doc = json.loads(f.read_text())
    except FileNotFoundError:
        raise bad(str(path), f"expected a feature store with {MANIFEST}, found none") from None
    except ValueError as e:
        raise bad(str(f), f"expected JSON, found a parse error ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise bad(str(f), f"format: expected {FORMAT!r}, found {found!r}")
    return doc


def _resume(out: Path, fresh: dict[str, Any]) -> dict[str, Any]:
    """The manifest to continue: the existing one when it describes the same capture."""
    if not (out / MANIFEST).exists():
        if out.exists() and any(not p.name.endswith(".tmp") for p in out.iterdir()):
            raise bad(
                str(out),
                "expected an empty or new directory for a feature store, found other files",
            )
        return fresh
    old = read_manifest(out)
    for key in (*_SAME, *_SAME_NEW):
        if _what(_old(old, key)) != _what(fresh[key]):
            raise bad(
                str(out / MANIFEST),
                f"{key}: this run has {json.dumps(fresh[key])}, the store "
                f"has {json.dumps(old.get(key))}; resume with the same inputs or use a new -o",
            )
    for s in old["shards"]:
        if not (out / s["file"]).is_file() or (out / s["file"]).stat().st_size != s["bytes"]:
            raise bad(
                str(out / s["file"]),
                f"expected {s['bytes']} bytes (manifest), found another size or no file",
            )
    return old


def check_disk(out: Path, need: int) -> None:
    """Refuse (Eagle3Error, exit 2) when the filesystem of ``out`` has less than ``need`` bytes
    free."""
    probe = out
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if need > free:
        raise bad(str(out), f"capture needs about {_size(need)} of disk, found {_size(free)} free")


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"


# -- capture ---------------------------------------------------------------------------------
def _batches(lengths: list[int], start: int, batch_tokens: int) -> list[list[int]]:
    """Consecutive sample indices from ``start``, each batch padded B*T_max <= batch_tokens (>= 1
    sample)."""
    out, cur, tmax = [], [], 0
    for i in range(start, len(lengths)):
        t = max(tmax, lengths[i])
        if cur and t * (len(cur) + 1) > batch_tokens:
            out.append(cur)
            cur, t = [], lengths[i]
        cur.append(i)
        tmax = t
    if cur:
        out.append(cur)
    return out


def _sample_tensors(f: Features, row: int, n: int, k: int, ids_dt: torch.dtype | None) -> dict:
    """One sample's first n positions of a Features batch, in the shard's compact dtypes."""
    q, s = quantise_aux(f.aux[row, :n].cpu(), k)
    t = {
        "aux": q,
        "aux_scale": s,
        "teacher_logp": f.teacher_logp[row, :n].cpu().clamp(min=-1e4).half(),
        "target_argmax": f.target_argmax[row, :n].cpu().int(),
        "input_ids": f.input_ids[row, :n].cpu().int(),
        "loss_mask": f.loss_mask[row, :n].cpu().to(torch.uint8),
    }
    if ids_dt is not None:
        t["teacher_ids"] = f.teacher_ids[row, :n].cpu().to(ids_dt)
    return t


def _write_shard(out: Path, man: dict, parts: list[dict], ids: list[str]) -> None:
    """Concatenate samples into shard-NNNNN, write it atomically, then list it in the manifest."""
    lengths = torch.tensor([p["input_ids"].numel() for p in parts], dtype=torch.int64)  # [n]
    offsets = torch.zeros(len(parts) + 1, dtype=torch.int64)  # [n+1]
    offsets[1:] = torch.cumsum(lengths, 0)
    tensors = {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
    tensors["offsets"] = offsets
    name = f"shard-{len(man['shards']):05d}.safetensors"
    save_safetensors(out / name, tensors, {"ids": json.dumps(ids), "format": FORMAT})
    n_tok = int(offsets[-1])
    man["shards"].append(
        {
            "file": name,
            "sha256": sha256_file(out / name),
            "tokens": n_tok,
            "samples": len(parts),
            "bytes": (out / name).stat().st_size,
        }
    )
    man["tokens"] += n_tok
    man["samples"] += len(parts)
    atomic_write_json(out / MANIFEST, man)


def capture(
    data: str | Path,
    target: RunningTarget,
    out: str | Path,
    *,
    vocab: str | Path | None = None,
    topk: int | None = DEFAULT_TOPK,
    shard_tokens: int = SHARD_TOKENS,
    batch_tokens: int = 4096,
    heldout_data: bool | None = None,
    drafter_layers: Any = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Capture features of every sample of DATA into the store ``out`` (resumable; module doc).

    ``topk=None`` keeps the whole draft vocab; ``heldout_data`` declares DATA held-out data
    (None: what DATA's data.json says); ``drafter_layers``: which of the target's aux layers
    are the drafter's (default: all; the rest are extras, e.g. the probe's). Returns the
    manifest plus ``bytes_per_token`` (shard bytes / tokens) and ``resumed_from`` (samples
    already there).
    """
    out = Path(out)
    prepared = load_prepared(data)
    check_data_matches_target(
        prepared.meta,
        str(Path(data) / META),
        vocab_size=target.vocab_size,
        tokenizer=getattr(target, "tokenizer", None),
    )
    d2t, vocab_id = _vocab(vocab, target)
    vd = vocab_id["draft_vocab_size"]
    k_top = vd if topk is None else min(int(topk), vd)
    if k_top < 1 or shard_tokens < 1:
        raise Eagle3Error(
            f"capture: topk and shard_tokens must be positive, found {topk}, {shard_tokens}"
        )
    held = data_is_heldout(prepared.meta, heldout_data)
    fresh = _fresh_manifest(target, prepared, vocab_id, k_top, shard_tokens, held, drafter_layers)
    man = _resume(out, fresh)
    lengths = [int(x) for x in prepared.lengths()]
    start = man["samples"]
    k, H = len(target.aux_layers), target.hidden_size
    left = sum(lengths[start:])
    check_disk(out, int(left * bytes_per_token(k, H, k_top, vd) * 1.02) + (1 << 20))
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob(".*.tmp"):  # temp files of a killed write
        stale.unlink()
    atomic_write_json(out / MANIFEST, man)
    _capture_rest(prepared, target, out, man, d2t, k_top, lengths, start, batch_tokens, progress)
    man["complete"] = True
    atomic_write_json(out / MANIFEST, man)
    total = sum(s["bytes"] for s in man["shards"])
    return {**man, "bytes_per_token": total / max(1, man["tokens"]), "resumed_from": start}


def _capture_rest(prepared, target, out, man, d2t, k_top, lengths, start, batch_tokens, progress):
    """Run the target over samples ``start..`` in batches; flush a shard every ``shard_tokens``."""
    vd = int(d2t.numel())
    ids_dt = None if k_top >= vd else ids_dtype(vd)
    k = len(target.aux_layers)
    parts, ids, n_tok = [], [], 0
    total, done = sum(lengths), sum(lengths[:start])
    emit(progress, "capture", done, total, "tok")
    t0, first = time.monotonic(), done
    for batch in _batches(lengths, start, batch_tokens):
        samples = [prepared[i] for i in batch]
        f = compute_features(target, *collate(samples), d2t, topk=k_top)
        for row, s in enumerate(samples):
            parts.append(_sample_tensors(f, row, lengths[batch[row]], k, ids_dt))
            ids.append(s.id)
            n_tok += lengths[batch[row]]
            if n_tok >= man["shard_tokens"]:
                _write_shard(out, man, parts, ids)
                parts, ids, n_tok = [], [], 0
        done += sum(lengths[i] for i in batch)
        rate = (done - first) / max(time.monotonic() - t0, 1e-9)
        emit(progress, "capture", done, total, "tok", shards=len(man["shards"]), per_s=rate)
    if parts:
        _write_shard(out, man, parts, ids)


# -- reading ---------------------------------------------------------------------------------
class FeatureStore:
    """A feature store opened for training: ``len``, ``ids``, ``get(indices) -> Features``,
    ``split``."""

    def __init__(self, path: str | Path, *, verify: bool = False, partial: bool = False) -> None:
        """Open STORE; ``verify`` checks every shard's sha256; ``partial`` accepts an unfinished
        capture."""
        from safetensors import safe_open

        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        if not partial and self.manifest.get("complete") is not True:
            raise bad(
                str(self.path / MANIFEST),
                "complete: expected true (a finished capture), found "
                f"{self.manifest.get('complete')!r}; rerun the same `data capture` command to "
                "finish it",
            )
        self.ids: list[str] = []
        self._where: list[tuple[int, int, int]] = []  # sample -> (shard, token start, token end)
        for si, s in enumerate(self.manifest["shards"]):
            f = self.path / s["file"]
            if not f.is_file():
                raise bad(str(f), "expected a shard listed in the manifest, found no file")
            if verify and sha256_file(f) != s["sha256"]:
                raise bad(str(f), f"sha256: expected {s['sha256']} (manifest), found another")
            with safe_open(str(f), framework="pt") as st:
                ids = json.loads((st.metadata() or {}).get("ids", "[]"))
                offs = st.get_tensor("offsets").tolist()
            if len(ids) != s["samples"] or len(offs) != s["samples"] + 1 or offs[-1] != s["tokens"]:
                raise bad(
                    str(f),
                    f"expected {s['samples']} samples / {s['tokens']} tokens (manifest), found "
                    f"{len(ids)} / {offs[-1]}",
                )
            self.ids += ids
            self._where += [(si, offs[j], offs[j + 1]) for j in range(len(ids))]
        q = self.manifest["quantisation"]
        self.topk, self.draft_vocab_size = (
            int(q["topk"]),
            int(self.manifest["vocab"]["draft_vocab_size"]),
        )

    def __len__(self) -> int:
        return len(self.ids)

    def length(self, i: int) -> int:
        """Sample i's token count (from the offsets; no tensor read)."""
        _, a, b = self._where[i]
        return b - a

    def split(self, heldout: float | int = 0.05, seed: int = 0) -> tuple[list[int], list[int]]:
        """(train, held-out) indices: the same ids split as in the prepared DATA (``split_ids``)."""
        return split_ids(self.ids, heldout, seed)

    def _read(self, i: int) -> dict[str, torch.Tensor]:
        from safetensors import safe_open

        si, a, b = self._where[i]
        with safe_open(str(self.path / self.manifest["shards"][si]["file"]), framework="pt") as st:
            return {key: st.get_slice(key)[a:b] for key in st.keys() if key != "offsets"}

    @property
    def layers(self) -> list[int]:
        """Every h-index the store holds, in its column order."""
        return [int(i) for i in self.manifest.get("aux_layers") or []]

    @property
    def heldout_data(self) -> bool:
        """Captured from held-out data (module doc); False for stores that do not say."""
        return self.manifest.get("heldout_data") is True

    def slots(
        self, layers: list[int] | tuple[int, ...], why: str = "the drafter reads"
    ) -> list[int]:
        """Positions of these h-indices among the store's layers; a missing one is refused
        (exit 2) naming the store and the layer."""
        have = self.layers
        missing = [int(i) for i in layers if int(i) not in have]
        if missing:
            raise bad(
                str(self.path / MANIFEST),
                f"aux_layers: {why} h{[int(i) for i in layers]}, the store holds h{have} "
                f"(missing h{missing}); capture them into one store (data capture --drafter D "
                "--probe-layers or --extra-layers)",
            )
        return [have.index(int(i)) for i in layers]

    def get(self, indices: list[int], layers: list[int] | None = None) -> Features:
        """A right-padded batch of these samples (aux dequantised to float32; zeros at padding);
        ``layers``: only these h-indices' columns, in this order (default: all the store
        holds)."""
        if not indices:
            raise Eagle3Error("FeatureStore.get: expected at least one index, found none")
        sel = None if layers is None else self.slots(layers)
        rows = [self._read(i) for i in indices]
        B, T, K = len(rows), max(r["input_ids"].numel() for r in rows), self.topk
        k_all = rows[0]["aux_scale"].shape[1]
        hidden = rows[0]["aux"].shape[1] // max(1, k_all)
        width = hidden * (k_all if sel is None else len(sel))
        f = Features(
            input_ids=torch.zeros(B, T, dtype=torch.long),  # [B, T]
            attention_mask=torch.zeros(B, T, dtype=torch.bool),  # [B, T]
            loss_mask=torch.zeros(B, T, dtype=torch.bool),  # [B, T]
            aux=torch.zeros(B, T, width),  # [B, T, k*H]
            target_argmax=torch.zeros(B, T, dtype=torch.long),  # [B, T]
            teacher_ids=torch.zeros(B, T, K, dtype=torch.long),  # [B, T, K]
            teacher_logp=torch.zeros(B, T, K),  # [B, T, K]
        )
        for r, t in enumerate(rows):
            n = t["input_ids"].numel()
            f.input_ids[r, :n] = t["input_ids"].long()
            f.attention_mask[r, :n] = True
            f.loss_mask[r, :n] = t["loss_mask"].bool()
            f.aux[r, :n] = _dequantise_slots(t["aux"], t["aux_scale"], sel)
            f.target_argmax[r, :n] = t["target_argmax"].long()
            f.teacher_logp[r, :n] = t["teacher_logp"].float()
            f.teacher_ids[r, :n] = (
                t["teacher_ids"].long() if "teacher_ids" in t else torch.arange(K)
            )
        return f


def _dequantise_slots(q: torch.Tensor, scale: torch.Tensor, sel: list[int] | None) -> torch.Tensor:
    """``dequantise_aux`` of the layers at positions ``sel`` only (all with None): [n, len*H]."""
    if sel is None:
        return dequantise_aux(q, scale)
    n, k = scale.shape
    idx = torch.tensor(sel, dtype=torch.long)
    return dequantise_aux(q.reshape(n, k, -1)[:, idx].reshape(n, -1), scale[:, idx])
