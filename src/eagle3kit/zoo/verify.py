"""`eagle3kit zoo verify`: the shipped files against their sha256, and a rebuild's figures
against the shipped member's within stated tolerances (docs/zoo.md, "Rebuild and verify").

A rebuild on another CPU gives other bytes: float kernels round differently (AMD EPYC and
Intel Xeon differ in the last bits of a matmul) and training amplifies those bits into other
weights. So the weights are compared by hash only to say whether they are identical; the
verdict rests on the figures each build measures, which should agree within ``TOLERANCES``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eagle3kit.core.errors import bad
from eagle3kit.zoo import shipping
from eagle3kit.zoo.members import MANIFEST, check_size, member, same_recipe
from eagle3kit.zoo.shipping import (
    WEIGHTS,
    check,
    label,
    location,
    read_manifest,
    weights_bytes,
)

# zoo.json metrics -> the largest absolute difference a rebuild may show. Set from the same
# recipe (8) built on an AMD EPYC and an Intel Xeon (benchmarks/results/zoo_chat.json against
# zoo_chat-recipe8-xeon.json): held-out loss moved by up to 0.14 nats/token, continuation
# distinct-4 by up to 0.10, pooled chat distinct-4 by up to 0.15, names_function by 0.03
# (one request in 32); each bound is about 1.5x the largest move seen.
TOLERANCES = {
    "heldout_loss": 0.2,
    "heldout_loss_other_slice": 0.2,
    "distinct4_mean": 0.15,
    "chat.names_function": 0.1,
    "chat.distinct_openings": 0.1,
    "chat.pooled_distinct4": 0.2,
}
DATA_FIELDS = ("train_files", "heldout_files", "train_tokens", "chat_samples")
BYTES_NOTE = (
    "a rebuild on another CPU (or Python, whose stdlib is the training text) gives other "
    "bytes: float kernels round differently and training amplifies it; the figures decide"
)


def shipped_files(root: Path | None = None) -> list[dict[str, Any]]:
    """Every shipped folder under ``root`` checked against its zoo.json sha256: one row each
    (label, ok, the error when not)."""
    from eagle3kit.core.errors import Eagle3Error

    rows = []
    root = root or shipping.ROOT
    if not root.is_dir():
        return []
    for folder in sorted(p for p in root.iterdir() if (p / MANIFEST).is_file()):
        try:
            check(folder, again=True)
            rows.append({"label": folder.name, "ok": True, "error": None})
        except Eagle3Error as e:
            rows.append({"label": folder.name, "ok": False, "error": str(e)})
    return rows


def _figure(metrics: dict[str, Any], key: str) -> float | None:
    v: Any = metrics
    for part in key.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    return v if isinstance(v, (int, float)) else None


def compare(rebuild: Path, root: Path | None = None) -> dict[str, Any]:
    """The rebuild in folder ``rebuild`` (``zoo build NAME -o DIR``) against the shipped member
    of the same name and size: recipe, data, weights' hash, figures within ``TOLERANCES``.
    ``ok`` when the recipe is the same and every figure is within its tolerance."""
    doc = read_manifest(rebuild)
    if doc is None or doc.get("kind") != "eagle3kit.zoo_member":
        raise bad(str(rebuild / MANIFEST), "expected a zoo member's build (zoo build -o DIR)")
    name, size = doc.get("member"), doc.get("size")
    member(name)
    check_size(size)
    lab = label(name, size)
    folder = location(lab, root)
    if not (folder / MANIFEST).is_file():
        raise bad(str(folder), f"expected the shipped {lab} to compare with; not in this package")
    ship = check(folder)
    figures = [
        _row(k, tol, ship.get("metrics", {}), doc.get("metrics", {}))
        for k, tol in TOLERANCES.items()
    ]
    figures = [f for f in figures if f is not None]
    data = {k: (ship.get("data", {}).get(k), doc.get("data", {}).get(k)) for k in DATA_FIELDS}
    same_weights = None
    if (rebuild / WEIGHTS).is_file():
        import hashlib

        stored = weights_bytes(rebuild / WEIGHTS, ship["shipped"]["dtype"])
        digest = hashlib.sha256(stored).hexdigest()
        want = ship["shipped"]["files"][WEIGHTS]["sha256"]
        if ship.get("mtp") and not doc.get("mtp"):  # the layer was added after the build
            want = ship["mtp"]["main_weights_sha256"]  # `zoo add-mtp`: the main tensors'
        same_weights = digest == want
    recipe_same = same_recipe(doc.get("recipe"), ship.get("recipe"))
    return {
        "member": lab,
        "shipped": str(folder),
        "rebuild": str(rebuild),
        "recipe_same": recipe_same,
        "data_same": all(a == b for a, b in data.values()),
        "data": {k: {"shipped": a, "rebuild": b} for k, (a, b) in data.items()},
        "python": {"shipped": ship.get("python"), "rebuild": doc.get("python")},
        "weights_identical": same_weights,  # once in the shipped dtype
        "bytes_note": BYTES_NOTE,
        "figures": figures,
        "ok": recipe_same and bool(figures) and all(f["ok"] for f in figures),
    }


def _row(key: str, tol: float, ship: dict[str, Any], rebuilt: dict[str, Any]):
    a, b = _figure(ship, key), _figure(rebuilt, key)
    if a is None:
        return None  # the shipped build did not measure it
    diff = None if b is None else round(abs(b - a), 4)
    return {
        "figure": key,
        "shipped": a,
        "rebuild": b,
        "difference": diff,
        "tolerance": tol,
        "ok": diff is not None and diff <= tol,
    }


ENGINE_PROBE = Path(__file__).with_name("engine_config_probe.py")


def engine_configs(root: Path | None = None, timeout: float = 600.0) -> dict[str, Any]:
    """Every shipped target member's config built by the real vLLM engine's own code, where its
    venv is ready (`benchmarks/real_engine.py --setup`): {"checked", "reason", "members"}.
    Each member row: dir, ok, architecture, error (and the DeepSeek router keys vLLM read)."""
    import json
    import os
    import subprocess

    from eagle3kit.core.engine_venv import engine_venv, ready_state

    state = ready_state()
    if not state["ready"]:
        return {"checked": False, "reason": state["reason"], "members": []}
    root = root or shipping.ROOT
    dirs = [
        str(p)
        for p in sorted(root.iterdir())
        if (read_manifest(p) or {}).get("kind") == "eagle3kit.zoo_member"
    ]
    py = engine_venv() / "bin" / "python"
    env = {**os.environ, "PYTHONPATH": "", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(
        [str(py), str(ENGINE_PROBE), *dirs],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    rows = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    if len(rows) != len(dirs):
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {"checked": False, "reason": f"engine probe failed: {tail[:300]}", "members": rows}
    return {"checked": True, "reason": state["reason"], "members": rows}
