"""The demo's building blocks, each a plain function of its inputs: the recipe, data,
training runs (the cached "K2 drafter" among them) and one bench of a drafter."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle3kit.core import registry
from eagle3kit.core.atomic import atomic_dir, atomic_write_json, atomic_write_text
from eagle3kit.core.progress import Progress

if TYPE_CHECKING:
    from eagle3kit.model.drafter import Eagle3Drafter
    from eagle3kit.model.protocols import EmbeddedTarget
    from eagle3kit.model.target import TargetModel

PAIR = ("dsv3-v1", "dsv3-v2")


@dataclass(frozen=True)
class Recipe:
    """Sizes of the zoo story (full: the default; tiny: tests)."""

    v1_samples: int  # conversations for the K2 drafter (from the stdlib library slice)
    v2_samples: int  # conversations of "K2.5 data" (the stdlib test slice)
    max_len: int
    batch: int
    k2_steps: int
    tune_steps: int  # fine-tune and scratch alike
    draft_vocab: int
    ttt_steps: int
    depth: int  # chain depth for bench and plan
    bench_prompts: int
    bench_repeats: int
    bench_tokens: int
    probe_samples: int
    lr: float = 3e-3  # from scratch; a warm start uses lr / 3
    k2_dflash_steps: int | None = None  # the K2 DFlash drafter's steps (None: k2_steps)


RECIPES = {
    "full": Recipe(
        v1_samples=1000,
        v2_samples=600,
        max_len=128,
        batch=8,
        k2_steps=240,
        tune_steps=80,
        draft_vocab=1024,
        ttt_steps=3,
        depth=3,
        bench_prompts=4,
        bench_repeats=2,
        bench_tokens=96,
        probe_samples=16,
        # a one-layer block drafter still gains at 240 steps (0.31 at position 1, against
        # the EAGLE-3 K2 drafter's 0.5): 3x as many (docs/dflash.md "The K2 DFlash drafter")
        k2_dflash_steps=720,
    ),
    "tiny": Recipe(
        v1_samples=160,
        v2_samples=96,
        max_len=96,
        batch=8,
        k2_steps=200,
        tune_steps=12,
        draft_vocab=256,
        ttt_steps=3,
        depth=3,
        bench_prompts=2,
        bench_repeats=1,
        bench_tokens=24,
        probe_samples=6,
    ),
}


def default_out() -> Path:
    """$EAGLE3KIT_HOME/demo (default ~/.cache/eagle3kit/demo): never the working directory."""
    from eagle3kit.zoo import home

    return home() / "demo"


def conversations(slice_name: str, n: int, path: Path, signed: bool = False) -> Path:
    """``n`` stdlib conversations (evenly spaced over the slice's functions) as OpenAI JSONL;
    ``signed``: requests that carry the signature (what the target was trained on)."""
    from eagle3kit.zoo import corpus

    # about 30 functions per file: read only as many files as the samples need
    files = corpus.files(slice_name, limit=max(8, n // 10))
    convs = corpus.spaced(corpus.chat_samples(files, signed=signed), n)
    atomic_write_text(path, "".join(json.dumps(c) + "\n" for c in convs))
    return path


def prepare_data(
    slice_name: str, n: int, folder: Path, target: Path, r: Recipe, progress: Progress | None
) -> Path:
    """`eagle3kit data prepare` of ``n`` stdlib conversations for ``target`` (reused if there)."""
    from eagle3kit.data.prepare import prepare

    data = folder / f"{slice_name}-prepared"
    if (data / "data.json").is_file():
        return data
    folder.mkdir(parents=True, exist_ok=True)
    from eagle3kit.zoo import signed_requests

    src = conversations(slice_name, n, folder / f"{slice_name}.jsonl", signed_requests(target))
    prepare([src], target, data, max_length=r.max_len, progress=progress)
    return data


def train_config(run: Path, target: Path, data: Path, steps: int, init: Path | None, r: Recipe):
    """The `eagle3kit train` settings of every demo run (a warm start takes lr / 3)."""
    from eagle3kit.train.loop import TrainConfig

    return TrainConfig(
        out=str(run),
        target=str(target),
        data=str(data),
        init_from=str(init) if init else None,
        draft_vocab_size=None if init else r.draft_vocab,
        ttt_steps=r.ttt_steps,
        steps=steps,
        batch_size=r.batch,
        max_len=r.max_len,
        lr=r.lr / 3 if init else r.lr,
        eval_every=max(1, steps // 6),
        eval_samples=32,
    )


def k2_drafter(
    size: str = "full",
    progress: Progress | None = None,
    say: Callable[[str], None] = lambda s: None,
) -> Path:
    """The demo's "K2 drafter" (EAGLE-3 trained on dsv3-v1): the one shipped in the package
    (zoo/shipped/k2-drafter[-tiny]) when it is there, else trained once on the shipped dsv3-v1
    and cached under $EAGLE3KIT_HOME/drafters/dsv3-v1-eagle3[-tiny]; returns its servable dir."""
    from eagle3kit.zoo.shipping import DRAFTER, location, shipped

    lab = DRAFTER + ("" if size == "full" else f"-{size}")
    if (location(lab) / "zoo.json").is_file():
        return shipped(lab)
    return _train_k2_drafter(size, progress, say)


def _train_k2_drafter(size: str, progress: Progress | None, say: Callable[[str], None]) -> Path:
    """Train the K2 drafter (the package ships none at ``size``), cached by its recipe and
    the shipped target's identity."""
    from eagle3kit import zoo

    p1 = zoo.get(PAIR[0], size=size)
    final = zoo.home() / "drafters" / ("dsv3-v1-eagle3" + ("" if size == "full" else f"-{size}"))
    done = final / "demo-drafter.json"
    if done.is_file() and json.loads(done.read_text()) == k2_key("eagle3", p1, size):
        return final / "run" / "best"
    say(f"   training the K2 drafter on {PAIR[0]} (once; cached in {final})")
    return build_k2_eagle3(final, p1, size, progress)


K2_FIELDS = ("v1_samples", "max_len", "batch", "k2_steps", "draft_vocab", "ttt_steps", "lr")


def k2_key(method: str, p1: Path, size: str, extra: dict[str, Any] | None = None) -> dict:
    """A K2 drafter's recipe (the cache key, and the shipped drafter's zoo.json recipe):
    method, target (its path and shipped weights' identity), the recipe's fields and the
    method's ``extra`` settings (the DFlash drafter's: dflash_arm.k2_dflash_settings)."""
    from eagle3kit.zoo.shipping import identity

    r = RECIPES[size]
    key: dict[str, Any] = {"kind": "eagle3kit.demo_drafter", "schema": 1, "version": 1}
    if method != registry.DEFAULT:  # EAGLE-3's key as it was before there were two
        key["method"] = method
    key["target"] = str(p1)
    key["target_weights"] = identity(p1)  # another shipped zoo retrains it
    fields = K2_FIELDS if method == registry.DEFAULT else K2_DFLASH_FIELDS
    key["recipe"] = {f: getattr(r, f) for f in fields} | (extra or {})
    return key


# the DFlash K2 drafter's recipe fields (its steps, block, layers and anchors: dflash_arm)
K2_DFLASH_FIELDS = ("v1_samples", "max_len", "batch", "lr")


def build_k2_eagle3(final: Path, p1: Path, size: str, progress: Progress | None) -> Path:
    """Train the EAGLE-3 K2 drafter on the member at ``p1`` into ``final`` (whole or not at
    all: data/, run/ with run/best the servable dir, demo-drafter.json); returns run/best."""
    from eagle3kit.train.loop import train

    r = RECIPES[size]
    final.parent.mkdir(parents=True, exist_ok=True)
    with atomic_dir(final) as tmp:
        data = prepare_data("lib", r.v1_samples, tmp / "data", p1, r, progress)
        train(train_config(tmp / "run", p1, data, r.k2_steps, None, r), progress=progress)
        atomic_write_json(tmp / "demo-drafter.json", k2_key("eagle3", p1, size))
    return final / "run" / "best"


# what the demo writes under OUT from the zoo's members: dropped when the zoo changes
DEMO_MADE = (
    "data/test-prepared",
    "data/test.jsonl",
    "runs/finetune",
    "runs/scratch",
    "runs/scratch-dflash",  # the DFlash arm's run before it started from the K2 DFlash drafter
    "runs/tuned-dflash",
)


def drop_stale(out: Path, size: str) -> None:
    """Remove the prepared data and training runs the demo made under OUT (``DEMO_MADE``,
    nothing else) unless OUT/zoo-recipes.json says they were made on the zoo members shipped
    now (their weights' sha256); then record those."""
    from eagle3kit import zoo
    from eagle3kit.zoo.shipping import identity

    want = {name: identity(zoo.get(name, size=size)) for name in PAIR}
    stamp_file = out / "zoo-recipes.json"
    try:
        have = json.loads(stamp_file.read_text())
    except (OSError, ValueError):
        have = None
    if have != want:
        for rel in DEMO_MADE:
            path = out / rel
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        atomic_write_json(stamp_file, want)


def train_run(
    out: Path,
    name: str,
    target: Path,
    data: Path,
    init: Path | None,
    r: Recipe,
    say: Callable[[str], None],
    progress: Progress | None,
) -> dict[str, Any]:
    """A training run in OUT/runs/NAME: reused when complete with this recipe, resumed when a
    previous demo was killed in it, else started fresh. Returns its summary."""
    from eagle3kit.train.loop import TrainConfig, train

    run = out / "runs" / name
    state = run / "state" / "state.json"
    if state.is_file():
        cfg = json.loads(state.read_text()).get("config", {})
        same = cfg.get("steps") == r.tune_steps and cfg.get("init_from") == (
            str(init) if init else None
        )
        if same and (run / "summary.json").is_file():
            say(f"   {name}: complete run reused [runs/{name}/summary.json]")
            return json.loads((run / "summary.json").read_text())
        if same:
            say(f"   {name}: resuming an interrupted run")
            cfg = TrainConfig.from_json({**cfg, "out": str(run)})
            return train(cfg, resume=True, progress=progress)
    if run.exists():
        shutil.rmtree(run)  # a previous demo's run with another recipe
    return train(train_config(run, target, data, r.tune_steps, init, r), progress=progress)


def held_out_prompts(data_dir: Path, n: int) -> list[list[int]]:
    """The first ``n`` held-out samples of DATA, cut before their first loss token."""
    from eagle3kit.data.prepared import load_prepared

    data = load_prepared(data_dir)
    _, held = data.split()
    out = []
    for i in held[:n]:
        s = data[i]
        first = int(s.loss_mask.nonzero()[0]) if s.loss_mask.any() else len(s.input_ids)
        out.append(s.input_ids[:first].tolist())
    return out


def load_drafter(path: Path, target: EmbeddedTarget) -> Eagle3Drafter:
    """An Eagle3Drafter for inference, sharing ``target``'s embedding."""
    from eagle3kit.model.drafter import Eagle3Drafter

    d = Eagle3Drafter.from_pretrained(path).eval().requires_grad_(False)
    d.set_embedding(target.embed_tokens.weight)
    return d


def bench_drafter(
    target: TargetModel,
    drafter: Path | Any,
    prompts: list[list[int]],
    r: Recipe,
    progress: Progress | None,
    labels: dict[str, Any],
    lookup: bool = False,
) -> dict[str, Any]:
    """`eagle3kit bench` (greedy and chain, interleaved, `bench_repeats` repeats) with the
    EAGLE-3 drafter at ``drafter`` (a directory) or a loaded drafter (the DFlash arm's); its
    document plus ``labels`` and the demo's summary keys. With ``lookup``, prompt lookup runs
    in the same rotation and the costs `plan --methods` prices with are measured at
    concurrency 1 (`costs`)."""
    from eagle3kit.measure.bench import bench

    doc = bench(
        target,
        load_drafter(drafter, target) if isinstance(drafter, Path) else drafter,
        prompts,
        repeats=r.bench_repeats,
        max_new_tokens=r.bench_tokens,
        depth=r.depth,
        lookup=LOOKUP_K,
        methods=("greedy", "lookup", "chain") if lookup else ("greedy", "chain"),
        levels=(1,) if lookup else (),
        progress=progress,
    )
    rows = {m["name"]: m for m in doc["methods"]}
    g, c = rows["greedy"], rows["chain"]
    doc.update(
        {
            **labels,
            "depth": r.depth,
            "baseline_tps": round(g["tokens_per_s"]["median"], 3),
            "spec_tps": round(c["tokens_per_s"]["median"], 3),
            "speedup": round(c["speedup"], 4),
            "tau_online": round(c["tau_online"], 4),
            "cycle_ms": round(c["cycle_ms"], 3),
            "draft_ms": round(c["draft_ms"], 3),
            "verify_ms": round(c["verify_ms"], 3),
            "per_position_acceptance": [round(x, 4) for x in c["per_position_acceptance"]],
            "lossless": c.get("same_tokens_as_greedy"),
        }
    )
    return doc


LOOKUP_K = 4  # prompt lookup's drafts per cycle in the demo (vLLM's ngram num_speculative_tokens)


def lookup_row(b: dict[str, Any], src: str) -> dict[str, Any]:
    """The headline row of prompt lookup, measured in the stale drafter's bench run."""
    row = next(m for m in b["methods"] if m["name"] == "lookup")
    return {
        "name": "prompt lookup",
        "method": registry.of_decoder("lookup").name,
        "tps": row["tokens_per_s"]["median"],
        "plain": b["baseline_tps"],
        "speedup": row["speedup"],
        "tau_online": row["tau_online"],
        "source": src,
    }


def headline_row(name: str, b: dict[str, Any], src: str) -> dict[str, Any]:
    """One row of the demo's headline table from a bench document (its "method": the chain
    row's draft method). A method other than the stale bench's (which times EAGLE-3 steps
    only) keeps its own drafter pass: its bench's drafting time per cycle over its passes."""
    row = {
        "name": name,
        "method": b.get("method", registry.DEFAULT),
        "tps": b["spec_tps"],
        "plain": b["baseline_tps"],
        "speedup": b["speedup"],
        "tau_online": b["tau_online"],
        "source": src,
    }
    if row["method"] != registry.DEFAULT:
        row["pass_ms"] = round(
            b["draft_ms"] / registry.get(row["method"]).draft_passes(b["depth"]), 4
        )
    return row


def _drafted(h: dict[str, Any]) -> bool:
    """A row of a drafter or a head (not plain decoding, not a model-free method)."""
    m = registry.find(h.get("method"))
    return m is not None and not m.model_free


def _model_free(h: dict[str, Any]) -> bool:
    """A row of a method without a drafter (prompt lookup)."""
    m = registry.find(h.get("method"))
    return m is not None and m.model_free


def predict_headline(
    headline: list[dict[str, Any]], stale: dict[str, Any], ev: dict[str, Any], depth: int
) -> None:
    """Add each row's predicted tok/s (`plan --methods`, plan/methods.py) beside the measured:
    the costs measured in the stale bench, each drafter's walked offline acceptance from
    eval.json (so a drafter's prediction is made without its bench), and for prompt lookup its
    acceptance in the stale bench (there is no offline measure of it), said in `predicted_from`.
    A DFlash row is priced as method dflash (one drafter pass per cycle), an MTP row as method
    mtp (one head pass per drafted token), each with that pass's time from its own bench (the
    stale bench times EAGLE-3 steps only)."""
    from dataclasses import replace

    from eagle3kit.plan.method_inputs import costs_of
    from eagle3kit.plan.methods import Candidate, plain, predict

    levels, prefill, new = costs_of(stale["costs"], "bench-stale.json")
    lv = levels[0]
    for h in headline:
        if _drafted(h) and h["name"] in ev["drafters"]:
            pp = tuple(ev["drafters"][h["name"]]["walk_acc"][:depth])
            at, h["predicted_from"] = lv, "eval.json (offline, walked)"
            if "pass_ms" in h:
                at = replace(lv, pass_ms={**lv.pass_ms, h["method"]: h["pass_ms"]})
                h["predicted_from"] += f"; its drafter pass from {h['source']}"
            p = predict(Candidate(h["name"], h["method"], pp), at, depth, new, prefill)
        elif _model_free(h):
            row = next(m for m in stale["methods"] if m["name"] == "lookup")
            cand = Candidate(
                h["method"],
                h["method"],
                tuple(row["per_position_acceptance"]),
                drafted=row["drafted_per_cycle"],
            )
            p = predict(cand, lv, cand.depth, new, prefill)
            h["predicted_from"] = "its acceptance in bench-stale.json"
        else:
            p = plain(lv, new, prefill)
            h["predicted_from"] = "the plain step in bench-stale.json"
        h["predicted_tps"] = round(p.request_tps, 3) if p.request_tps else None


def lookup_verdict(headline: list[dict[str, Any]]) -> str | None:
    """A line when no trained drafter beats prompt lookup (measured), else None."""
    look = next((h for h in headline if _model_free(h)), None)
    drafters = [h for h in headline if _drafted(h)]
    if look is None or not drafters:
        return None
    best = max(drafters, key=lambda h: h["tps"])
    if best["tps"] > look["tps"]:
        return None
    return (
        f"no trained drafter beats prompt lookup here: the best, {best['name']}, gives "
        f"{best['tps']:.1f} tok/s against lookup's {look['tps']:.1f} (free: no drafter to train "
        "or serve; vLLM `ngram`, SGLang `NGRAM`)"
    )


def eval_entry(r: dict[str, Any], path: Path | str, method: str, **extra: Any) -> dict[str, Any]:
    """eval.json's entry for a drafter from its offline `eval` document ``r`` (every position
    and walked acceptance, rounded), the shape the EAGLE-3 arms' entries have."""
    ap = r["all_positions"]
    return {
        "path": str(path),
        "method": method,
        **extra,
        "acc": [round(x, 6) for x in ap["per_position_acceptance"]],  # every position
        "counted": ap["counted"],
        "tau_every_position": round(r["tau_every_position"], 6),
        "tau_walk": round(r["tau_walk"], 6),
        "walk_acc": [round(x, 6) for x in r["per_position_acceptance"]],
        "cycles": r["cycles"],
    }
