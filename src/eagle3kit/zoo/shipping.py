"""The zoo as shipped in the package: each member (and the demo's K2 drafter) under
``zoo/shipped/<label>/``, a Hugging Face dir plus ``zoo.json`` with the recipe, the commit
that built it, the sha256 of every file and the build's figures (docs/zoo.md). Full members
are stored in bf16 (``DTYPES``), tiny ones and the K2 drafter in float32.

Reading never writes (an installed package may be read-only). A member's files are checked
against their sha256 once per process, on first use (``checked``); ``eagle3kit zoo verify``
checks them all. ``ship`` makes such a folder from a build (maintainers: ``eagle3kit zoo ship``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from eagle3kit.core.atomic import atomic_dir, atomic_write_json
from eagle3kit.core.digest import sha256_file
from eagle3kit.core.errors import Eagle3Error, bad
from eagle3kit.zoo.members import MANIFEST, SIZES, check_size, member

ROOT = Path(__file__).parent / "shipped"
WEIGHTS = "model.safetensors"
DRAFTER = "k2-drafter"  # the demo's "K2 drafter": EAGLE-3 trained on dsv3-v1 (demo/steps.py)
# the demo's K2 drafters shipped beside the members, and their method: the EAGLE-3 one and the
# DFlash one (demo/dflash_arm.py), both trained on dsv3-v1
DRAFTERS = {DRAFTER: "eagle3", "k2-dflash": "dflash"}
_CHECKED: set[Path] = set()  # shipped dirs whose sha256 matched, this process


def label(name: str, size: str = "full") -> str:
    """``dsv3-v2`` at full size, ``dsv3-v2-tiny`` at tiny."""
    check_size(size)
    return name if size == "full" else f"{name}-{size}"


def parse_label(text: str) -> tuple[str, str] | None:
    """``("dsv3-v2", "tiny")`` for ``dsv3-v2-tiny``; None when ``text`` names no member."""
    from eagle3kit.zoo.members import MEMBERS

    if text in MEMBERS:
        return text, "full"
    for size in SIZES[1:]:
        base = text.removesuffix(f"-{size}")
        if base != text and base in MEMBERS:
            return base, size
    return None


def location(lab: str, root: Path | None = None) -> Path:
    """Where the shipped ``lab`` lives (present or not)."""
    return (root or ROOT) / lab


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """``folder/zoo.json`` as a dict, or None when it is absent or not JSON."""
    try:
        doc = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def missing(lab: str) -> Eagle3Error:
    """The one-line error for a member this package does not ship."""
    base = lab.removesuffix("-tiny")
    size = " --size tiny" if lab.endswith("-tiny") else ""
    return Eagle3Error(
        f"zoo member {lab!r} is not shipped in this package ({location(lab)} has no "
        f"{MANIFEST}): build it with `eagle3kit zoo build {base}{size} -o DIR` and pass DIR "
        "as the target"
    )


def check(folder: Path, *, again: bool = False) -> dict[str, Any]:
    """The shipped ``folder``'s zoo.json after every file it lists matched its sha256 (once per
    process per folder, unless ``again``); Eagle3Error naming the first file that does not."""
    doc = read_manifest(folder)
    files = (doc or {}).get("shipped", {}).get("files")
    if not isinstance(files, dict) or not files:
        raise bad(str(folder / MANIFEST), "expected a shipped zoo.json with shipped.files")
    if folder.resolve() in _CHECKED and not again:
        return doc
    for name, want in files.items():
        f = folder / name
        if not f.is_file():
            raise bad(str(f), "listed in zoo.json's shipped.files but missing; reinstall eagle3kit")
        got = sha256_file(f)
        if got != want["sha256"]:
            raise bad(
                str(f),
                f"sha256 expected {want['sha256'][:16]}… (zoo.json), found {got[:16]}…: the "
                "shipped file was changed; reinstall eagle3kit",
            )
    _CHECKED.add(folder.resolve())
    return doc


def shipped(lab: str, root: Path | None = None) -> Path:
    """The checked folder of the shipped ``lab``; ``missing(lab)`` when the package lacks it."""
    folder = location(lab, root)
    if not (folder / MANIFEST).is_file():
        raise missing(lab)
    check(folder)
    return folder


def identity(folder: Path) -> str | None:
    """A shipped folder's weights sha256 (first 16 hex digits), from its zoo.json."""
    doc = read_manifest(folder) or {}
    w = doc.get("shipped", {}).get("files", {}).get(WEIGHTS)
    return w["sha256"][:16] if w else None


def git_commit(where: Path = Path(__file__).parent) -> str | None:
    """The commit of the checkout ``where`` is in (``+dirty`` when tracked files changed);
    None outside a git checkout (an installed package)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        sha = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", "."))
    except (OSError, subprocess.CalledProcessError):
        return None
    return sha + ("+dirty" if dirty else "")


# The dtype each size of member ships in. Full: bf16 halves the zoo (the issue's ~40 MB
# budget), and config.json says so, so an engine serves it as it would a real bf16
# checkpoint. Tiny: the tests' fixtures of the float32 paths (engine fakes compare float32
# states), under 1 MB each. The K2 drafter ships in float32 at both sizes (a few MB): a
# drafter loads in its config's dtype (model/drafter.py), and the demo runs it beside a
# float32 target.
DTYPES = {"full": "bfloat16", "tiny": "float32"}


def weights_bytes(weights: Path, dtype: str, *, without: str | None = None) -> bytes:
    """``weights`` (a safetensors file) with every floating tensor in ``dtype``, serialized
    (safetensors writes tensors in a fixed order: the same tensors give the same bytes);
    ``without``: leave out the tensors whose names start with it (a member's MTP layer)."""
    import torch
    from safetensors.torch import load_file, save

    dt = getattr(torch, dtype)
    tensors = load_file(str(weights))
    out = {
        k: v.to(dt) if v.is_floating_point() else v
        for k, v in tensors.items()
        if without is None or not k.startswith(without)
    }
    return save(out, metadata={"format": "pt"})


def main_weights_sha256(folder: Path) -> str:
    """The sha256 the shipped member in ``folder`` would have as its weights file without its
    MTP layer (zoo.json ``mtp.prefix``): equal to the file shipped before the layer was added
    exactly when every main tensor is unchanged."""
    doc = read_manifest(folder) or {}
    prefix = doc.get("mtp", {}).get("prefix")
    if not prefix:
        raise bad(str(folder / MANIFEST), "expected an mtp block with its prefix, found none")
    dtype = doc.get("shipped", {}).get("dtype") or "float32"
    return hashlib.sha256(weights_bytes(folder / WEIGHTS, dtype, without=prefix)).hexdigest()


def ship(
    src: Path, *, commit: str | None = None, name: str | None = None, root: Path | None = None
) -> Path:
    """Copy the build in ``src`` into ``root/<label>``: weights in ``DTYPES[size]`` (and
    config.json's dtype with them), every other file as is, zoo.json with a ``shipped`` block
    (commit, sha256 and size of every file). A zoo member's label comes from its zoo.json,
    whose recipe must be the code's; the K2 drafter (``src`` = a trained run's servable dir,
    or the demo's cache dir holding ``run/best``) needs ``name`` (``k2-drafter`` or
    ``k2-drafter-tiny``). Returns the new folder."""
    src = Path(src)
    doc, weights_dir = _source(src, name)
    commit = commit or doc.get("commit")
    if not commit:
        raise bad(f"{src / MANIFEST}", "no commit recorded: pass --commit SHA (the build's)")
    if not (weights_dir / WEIGHTS).is_file():
        raise bad(str(weights_dir / WEIGHTS), "expected the build's single weights file")
    dest = location(doc["name"], root)
    with atomic_dir(dest) as tmp:
        for f in sorted(weights_dir.iterdir()):
            if f.is_file() and f.name not in (WEIGHTS, MANIFEST) and not f.name.startswith("."):
                shutil.copyfile(f, tmp / f.name)
        dtype = DTYPES[doc["size"]] if doc["kind"] == "eagle3kit.zoo_member" else "float32"
        (tmp / WEIGHTS).write_bytes(weights_bytes(weights_dir / WEIGHTS, dtype))
        _set_config(tmp / "config.json", doc, dtype)
        if doc.get("mtp"):  # the member's weights as they would ship without the layer
            main = weights_bytes(weights_dir / WEIGHTS, dtype, without=doc["mtp"]["prefix"])
            doc["mtp"]["main_weights_sha256"] = hashlib.sha256(main).hexdigest()
        files = {
            f.name: {"sha256": sha256_file(f), "bytes": f.stat().st_size}
            for f in sorted(tmp.iterdir())
        }
        doc["commit"] = commit
        doc["shipped"] = {
            "dtype": dtype,
            "from": src.name,  # the build folder's name: its path is the builder's machine's
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "files": files,
        }
        atomic_write_json(tmp / MANIFEST, doc)
    return dest


def _set_config(cfg: Path, manifest: dict[str, Any], dtype: str) -> None:
    """config.json's dtype made the stored one; a drafter's verifier made its target's zoo
    name (the build's was a path on the machine that built it). Rewritten only on a change."""
    if not cfg.is_file():
        return
    doc = json.loads(cfg.read_text())
    new = {k: dtype for k in ("torch_dtype", "dtype") if k in doc}
    if "eagle3kit_verifier" in doc and manifest.get("target"):
        new["eagle3kit_verifier"] = manifest["target"]
    if any(doc[k] != v for k, v in new.items()):
        cfg.write_text(json.dumps({**doc, **new}, indent=2) + "\n")


def _source(src: Path, name: str | None) -> tuple[dict[str, Any], Path]:
    """(the zoo.json to ship, the folder holding the weights) of the build in ``src``."""
    doc = read_manifest(src)
    if doc is not None and doc.get("kind") == "eagle3kit.zoo_member":
        return _member_doc(src, doc), src
    if (name or "").removesuffix("-tiny") not in DRAFTERS:
        raise bad(
            str(src),
            f"expected a zoo member's build (a {MANIFEST} of kind eagle3kit.zoo_member) or, "
            f"with --name {'|'.join(DRAFTERS)}[-tiny], a K2 drafter; found neither",
        )
    return _drafter_doc(src, name)


def _member_doc(src: Path, doc: dict[str, Any]) -> dict[str, Any]:
    from dataclasses import asdict

    from eagle3kit.zoo.members import recipe, recipe_digest, same_recipe

    name, size = doc.get("member"), doc.get("size")
    member(name)
    check_size(size)
    want = json.loads(json.dumps(asdict(recipe(name, size))))  # tuples as JSON has them
    if not same_recipe(doc.get("recipe"), want):
        diff = sorted(k for k in want if doc.get("recipe", {}).get(k) != want[k])
        raise bad(
            str(src / MANIFEST),
            f"recipe: built with another recipe than this code's {label(name, size)} "
            f"(fields {', '.join(diff) or '?'} differ); ship from the code that built it",
        )
    return {**doc, "recipe_digest": recipe_digest(name, size)}


def _drafter_doc(src: Path, name: str) -> tuple[dict[str, Any], Path]:
    """A K2 drafter's zoo.json: its method, recipe (the demo's cache key), target, figures."""
    run = src / "run" if (src / "run" / "best").is_dir() else src.parent
    servable = run / "best" if (run / "best").is_dir() else src
    key = _json(run.parent / "demo-drafter.json") or {}
    summary = _json(run / "summary.json") or {}
    prior = read_manifest(src) or {}  # shipping a shipped drafter again keeps what it said
    doc = {
        "kind": "eagle3kit.zoo_drafter",
        "schema": 1,
        "name": name,
        "size": "tiny" if name.endswith("-tiny") else "full",
        "method": DRAFTERS[name.removesuffix("-tiny")],
        "target": "dsv3-v1" + ("-tiny" if name.endswith("-tiny") else ""),
        "recipe": key.get("recipe") or prior.get("recipe"),
        "figures": {k: summary[k] for k in _DRAFTER_FIGURES if k in summary}
        or prior.get("figures", {}),
        "commit": prior.get("commit"),
    }
    return doc, servable


# the training summary's figures a shipped drafter's zoo.json keeps (train/loop.py, and
# methods/dflash/train/step.py for a DFlash drafter)
_DRAFTER_FIGURES = ("steps", "best_step", "tau_walk", "tau_every_position", "train_samples")
_DRAFTER_FIGURES += ("heldout_samples", "draft_vocab_size", "per_position_acceptance")
_DRAFTER_FIGURES += ("block_size", "draft_layers", "target_layer_ids")


def _json(p: Path) -> dict[str, Any] | None:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None
