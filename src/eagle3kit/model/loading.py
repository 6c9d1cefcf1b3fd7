"""The one loader of a target and a drafter: resolve the target's name, read the drafter's
checkpoint once, and check that the two fit (aux layers, vocabulary, hidden size)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle3kit.core.errors import bad
from eagle3kit.model.target import parse_dtype

if TYPE_CHECKING:
    from eagle3kit.core.spec import DraftSpec
    from eagle3kit.model.drafter import Eagle3Drafter

__all__ = [
    "LoadedDrafter",
    "load_drafter",
    "load_pair",
    "load_target",
    "parse_dtype",
    "resolve_target",
]


def resolve_target(name_or_path: str) -> str:
    """A local model dir (as given), a zoo member name (``dsv3-v2``, ``llama-v1-tiny``: its
    folder shipped in the package, never built here; Eagle3Error saying how to build one the
    package lacks), else the string itself, for the hub to resolve."""
    if Path(name_or_path).expanduser().exists():
        return name_or_path
    from eagle3kit import zoo

    found = zoo.parse_label(name_or_path)
    if found is None:
        return name_or_path
    name, size = found
    return str(zoo.get(name, size=size))


@dataclass
class LoadedDrafter:
    """A drafter as read from its checkpoint: the module, its spec and the file's layout."""

    drafter: Eagle3Drafter  # eval mode, no grad
    spec: DraftSpec
    layout: str


def load_drafter(path: str, *, device: str = "cpu", dtype: Any = "float32") -> LoadedDrafter:
    """Read a drafter in any layout (SGLang, speculators/vLLM, EAGLE; DFlash z-lab) once."""
    from eagle3kit.checkpoint.eagle3.reader import read_drafter

    dflash = _dflash_drafter(path, device, dtype)
    if dflash is not None:
        return dflash
    from eagle3kit.model.peagle import drafter_class, refuse_extra_layers

    refuse_extra_layers(path)
    spec, tensors, head = read_drafter(str(path))
    cfg = head.ckpt.config  # P-EAGLE's: mask_hidden + a mask token
    d = drafter_class(cfg).from_read(spec, tensors, cfg, device, parse_dtype(dtype), str(path))
    return LoadedDrafter(d.eval().requires_grad_(False), spec, head.layout)


def _dflash_drafter(path: str, device: str, dtype: Any) -> LoadedDrafter | None:
    """A DFlash drafter (z-lab's or speculators' layout, model/dflash.py), else None."""
    import json

    cfg_file = Path(str(path)).expanduser() / "config.json"
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, ValueError):
        return None  # not a local JSON config: the general reader reports it
    from eagle3kit.checkpoint.dflash_layout import is_dflash_config
    from eagle3kit.model.dflash import DFlashDrafter

    if not isinstance(cfg, dict) or not is_dflash_config(cfg):
        return None
    d = DFlashDrafter.from_pretrained(cfg_file.parent, device=device, dtype=parse_dtype(dtype))
    return LoadedDrafter(d.eval().requires_grad_(False), d.spec, f"dflash-{d.spec.layout}")


def load_for(
    target: str, drafter: str | None, method: str, *, device: str = "cpu", dtype: Any = "float32"
) -> tuple[Any, Any]:
    """(TargetModel, drafter) for `generate`, `eval` and `bench`: a drafter dir read as its
    own method says (`load_pair`), or, for a method whose drafter ships inside the target (or
    a standalone head dir given as the drafter), the target's head by its method's model
    part."""
    from eagle3kit.core import registry
    from eagle3kit.model.mtp import is_head_dir, load_mtp  # (until methods/mtp holds it)

    rec = registry.get(method)
    if rec.target_head or is_head_dir(drafter):
        return load_mtp(target, drafter, device=device, dtype=dtype)
    return load_pair(target, drafter, device=device, dtype=dtype)


def drafter_method(path: str | Path) -> str | None:
    """The method a local drafter dir's config.json declares (None: not a local dir)."""
    import json

    from eagle3kit.checkpoint.methods import detect_method

    try:
        cfg = json.loads((Path(path).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return detect_method(cfg) if isinstance(cfg, dict) else None


def load_target(
    name_or_path: str,
    *,
    device: str = "cpu",
    dtype: Any = "float32",
    aux_layers: Any = None,
    trust_remote_code: bool = False,
) -> Any:
    """A TargetModel from a zoo name, a local dir or a hub id (`resolve_target`)."""
    from eagle3kit.model.target import TargetModel

    return TargetModel.from_pretrained(
        resolve_target(name_or_path),
        device=device,
        dtype=parse_dtype(dtype),
        aux_layers=aux_layers,
        trust_remote_code=trust_remote_code,
    )


def load_pair(
    target: str,
    drafter: str | None,
    *,
    device: str = "cpu",
    dtype: Any = "float32",
    trust_remote_code: bool = False,
) -> tuple[Any, Any]:
    """(TargetModel, Eagle3Drafter | None) on one device and dtype.

    The target captures the drafter's aux layers when its checkpoint records them; the drafter
    gets the target's input embedding when its checkpoint has none. Shapes that do not fit
    (vocabulary, hidden size of the aux states) are refused with the field named.
    """
    d = load_drafter(drafter, device=device, dtype=dtype).drafter if drafter is not None else None
    aux = d.spec.aux_layers if d is not None else None
    tm = load_target(
        target, device=device, dtype=dtype, aux_layers=aux, trust_remote_code=trust_remote_code
    )
    if d is None:
        return tm, None
    if d.spec.vocab_size != tm.vocab_size:
        raise bad(
            f"{drafter}/config.json",
            f"vocab_size: expected the target's {tm.vocab_size}, found {d.spec.vocab_size}",
        )
    if d.spec.target_hidden_size != tm.hidden_size:
        raise bad(
            f"{drafter}/config.json",
            f"target_hidden_size: expected the target's {tm.hidden_size}, "
            f"found {d.spec.target_hidden_size}",
        )
    if hasattr(d, "attach_target") and not d.embed_loaded:
        d.attach_target(tm)  # DFlash (z-lab): the target's embedding and lm_head
    elif not d.embed_loaded:
        d.set_embedding(tm.embed_tokens.weight)
    return tm, d
