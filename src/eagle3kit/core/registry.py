"""The draft methods eagle3kit knows, one record each: the one list of method names, the one
map from an engine's name for a method to ours, and the one source of launch lines.

    METHODS                      the records, in the order every listing uses
    names(can=...)               the method names, optionally those with a capability
    get(name, where)             a record by name (one line naming `where` if none)
    family(name)                 the record reading `name`, a method or a variant of one
    from_engine(engine, name)    ours from vLLM's `method` / SGLang's `speculative_algorithm`
    launch_lines(name, k, ...)   the SGLang and vLLM command lines that serve a method
    part(name, layer)            the method package's part of one layer (imported on call)

Each method's code lives in one package, `eagle3kit.methods.<package>`, split by layer:
`checkpoint` (detect, read, inspect, compat, convert, write), `model` (build the module),
`decode` (propose for the one lossless verifier), `train` (options and step), `measure`
(offline eval, probe, pass cost). A generic layer asks `part(name, "<its layer or below>")`;
tests/test_layers.py checks that no caller asks for a higher layer's part, so the layer order
holds. Adding a method is one record here plus its package (docs/ARCHITECTURE.md "How to add
a method").

Engine names (sources, docs/plan.md "Methods"): vLLM `vllm/config/speculative.py`
(`SpeculativeConfig.method`, `parallel_drafting`, `mtp` and the older `*_mtp` names defaulting
to the target), SGLang `server_args.py` (`--speculative-algorithm` EAGLE, EAGLE3, DFLASH,
NEXTN, NGRAM; NEXTN is rewritten to EAGLE at startup, and a DeepSeek-style target's draft path
defaults to its own model path, so EAGLE drafting from the target itself is its MTP head).
Torch-free.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from eagle3kit.core.errors import Eagle3Error

LAYER_PARTS = ("checkpoint", "model", "decode", "train", "measure")  # low -> high


@dataclass(frozen=True, eq=False)
class Vllm:
    """How vLLM names and serves a method: `--speculative-config` {"method": ..., "model":
    DRAFTER (when it needs one), "num_speculative_tokens": k, **flags, **extra}. `flags` also
    tell methods sharing a name apart (P-EAGLE is `eagle3` with `parallel_drafting`)."""

    method: str
    aliases: tuple[str, ...] = ()  # other names vLLM reads as this method (fnmatch patterns)
    flags: dict[str, bool] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    since: tuple[int, ...] | None = None  # its first release serving it (None: every modelled)
    since_source: str = ""  # where that is read


@dataclass(frozen=True, eq=False)
class Sglang:
    """How SGLang names and serves a method: `--speculative-algorithm ALGO`, the draft path
    (when the method needs a drafter) and `flags` ({k}: draft steps, {k1}: k + 1)."""

    algorithm: str
    aliases: tuple[str, ...] = ()
    flags: str = ""
    # algorithms SGLang runs this method under when the draft path is the target's own path
    # (NEXTN becomes EAGLE at startup; a DeepSeek-style target's draft path defaults to it)
    self_draft: tuple[str, ...] = ()
    since: tuple[int, ...] | None = None  # its first release serving it (None: every modelled)
    since_source: str = ""  # where that is read


@dataclass(frozen=True, eq=False)
class Method:
    """One draft method: its names, its drafting cost, what it can do, its package."""

    name: str  # what the CLI, every JSON "method" field and the docs say
    package: str  # eagle3kit.methods.<package>
    drafter: str  # what drafts, in words (plan's method table)
    passes: str  # drafter passes per cycle of k drafts: "k", "1" or "0"
    parts: tuple[str, ...]  # the layers its package has a part for (LAYER_PARTS)
    vllm: Vllm | None = None  # None: vLLM does not serve it
    sglang: Sglang | None = None  # None: SGLang does not serve it
    needs_draft: bool = True  # False: no drafter directory (the target's head, or none)
    target_head: bool = False  # the drafter ships inside the target (its MTP layers)
    tree: bool = False  # drafts a tree (decode --tree, bench's tree row)
    store_eval: bool = False  # offline eval from a feature store (eval --features)
    train: bool = False  # train --method NAME
    probe: bool = False  # probe --method NAME
    convert: bool = False  # convert between layouts (or extract/stitch, for a target's head)
    decoders: tuple[str, ...] = ()  # DecodeStats.method of the loops that decode it
    # how `train` unrolls it, as `train --dry-run` counts its memory: "ttt" (k sequential
    # draft steps, train/ttt.py), "cod" (one pass over the COD elements of k depths); "" not
    # planned
    train_unroll: str = ""
    variants: tuple[str, ...] = ()  # related drafters read as this method (not built here)
    why_not: dict[str, str] = field(default_factory=dict)  # capability -> why it lacks it
    title: str = ""  # its name in prose ("P-EAGLE"); the name itself when empty

    @property
    def display(self) -> str:
        return self.title or self.name

    def first_served(self, engine: str) -> tuple[tuple[int, ...], str] | None:
        """(the first `engine` release serving it, the source saying so); None when every
        release modelled serves it, or the engine never does (`serves`)."""
        e = getattr(self, engine)
        return (e.since, e.since_source) if e is not None and e.since else None

    @property
    def model_free(self) -> bool:
        """No drafter runs at all (prompt lookup): no pass to time, nothing to train."""
        return self.passes == "0"

    def draft_passes(self, k: int) -> int:
        return {"k": k, "1": 1, "0": 0}[self.passes]

    def serves(self, engine: str) -> bool:
        return getattr(self, engine) is not None

    def vllm_config(self, k: int, draft: str | None = None) -> dict[str, Any] | None:
        """vLLM's `--speculative-config` object at k drafts (None: vLLM does not serve it)."""
        if self.vllm is None:
            return None
        doc: dict[str, Any] = {"method": self.vllm.method}
        if self.needs_draft:
            doc["model"] = draft or "DRAFTER_DIR"
        doc["num_speculative_tokens"] = k
        return {**doc, **self.vllm.flags, **self.vllm.extra}

    def sglang_flags(self, k: int, draft: str | None = None) -> str | None:
        """SGLang's speculative flags at k drafts (None: SGLang does not serve it)."""
        if self.sglang is None:
            return None
        out = f"--speculative-algorithm {self.sglang.algorithm}"
        if self.needs_draft:
            out += f" --speculative-draft-model-path {draft or 'DRAFTER_DIR'}"
        flags = self.sglang.flags.format(k=k, k1=k + 1)
        return f"{out} {flags}" if flags else out


_SG_STEPS = (
    "--speculative-num-steps {k} --speculative-eagle-topk 1 --speculative-num-draft-tokens {k1}"
)
_ALL_PARTS = LAYER_PARTS
_EAGLE = dict(
    package="eagle3",
    passes="k",
    parts=_ALL_PARTS,
    vllm=Vllm("eagle3", aliases=("eagle",)),
    sglang=Sglang("EAGLE3", aliases=("EAGLE",), flags=_SG_STEPS),
    tree=True,
    store_eval=True,
    train=True,
    convert=True,
    train_unroll="ttt",
)

_EAGLE31 = dict(
    _EAGLE,
    vllm=Vllm(
        "eagle3",
        aliases=("eagle",),
        since=(0, 22),
        since_source="vLLM PR #42764 (fc_norm, norm_output in models/llama_eagle3.py; release "
        "inferred from its merge date, 2026-05-19; absent from 0.21.0)",
    ),
    sglang=Sglang(
        "EAGLE3",
        aliases=("EAGLE",),
        flags=_SG_STEPS,
        since=(0, 5, 12),
        since_source="sglang 0.5.12 srt/models/llama_eagle3.py (fc_norm, norm_output; absent "
        "from 0.5.11)",
    ),
)

METHODS: tuple[Method, ...] = (
    Method(
        "eagle3",
        title="EAGLE-3",
        drafter="EAGLE-3 drafter",
        probe=True,
        decoders=("chain", "tree"),
        **_EAGLE,
    ),
    Method(
        "eagle3.1",
        title="EAGLE 3.1",
        drafter="EAGLE 3.1 drafter (fc_norm / norm_output)",
        **_EAGLE31,
    ),
    Method(
        "peagle",
        title="P-EAGLE",
        package="peagle",
        drafter="P-EAGLE drafter (parallel drafting)",
        passes="1",  # the k slots in one causal pass
        parts=_ALL_PARTS,
        vllm=Vllm(
            "eagle3",
            aliases=("eagle",),
            flags={"parallel_drafting": True},
            since=(0, 16),
            since_source="vLLM PR #32887 (parallel_drafting: vllm 0.16.0 config/speculative.py; "
            "absent from 0.15.1)",
        ),
        store_eval=True,
        train=True,
        convert=True,
        train_unroll="cod",
    ),
    Method(
        "dflash",
        title="DFlash",
        package="dflash",
        drafter="DFlash block drafter (block k+1)",
        passes="1",  # the block [token, mask x k] in one bidirectional pass
        parts=_ALL_PARTS,
        vllm=Vllm(
            "dflash",
            since=(0, 20),
            since_source="vllm 0.20.0 model_executor/models/qwen3_dflash.py, "
            "config/speculative.py (method dflash; absent from 0.19.1)",
        ),
        sglang=Sglang(
            "DFLASH",
            flags="--speculative-num-draft-tokens {k1}",
            since=(0, 5, 11),
            since_source="sglang 0.5.11 srt/speculative/dflash_worker.py, server_args.py "
            "(DFLASH; absent from 0.5.10.post1)",
        ),
        store_eval=True,
        train=True,
        probe=True,
        convert=True,
        decoders=("dflash",),
        variants=("dflash2", "domino"),
    ),
    Method(
        "dspark",
        title="DSpark",
        package="dspark",
        drafter="DSpark block drafter (DFlash backbone + Markov head)",
        passes="1",  # one backbone pass; the Markov head's K small steps ride on it
        parts=_ALL_PARTS,
        vllm=Vllm(
            "dspark",
            since=(0, 25),
            since_source="vllm 0.25.0 wheel: model_executor/models/qwen3_dspark.py, "
            "config/speculative.py, speculators/algos.py update_dspark (method dspark; "
            "absent from 0.24.0)",
        ),
        sglang=Sglang(
            "DSPARK",
            flags="--speculative-dspark-block-size {k}",
            since=(0, 5, 16),
            since_source="sglang 0.5.16 wheel: srt/speculative/spec_info.py, server_args.py "
            "(DSPARK, --speculative-dspark-block-size; absent from 0.5.15.post1)",
        ),
        train=True,
        convert=True,
        decoders=("dspark",),
        why_not={"probe": "no DSpark probe stages", "store_eval": "a store eval reads DFlash"},
    ),
    Method(
        "mtp",
        title="MTP",
        package="mtp",
        drafter="the target's MTP head, recursive",
        passes="k",  # one head, rerun for k > 1 (as vLLM does)
        parts=_ALL_PARTS,
        vllm=Vllm("mtp", aliases=("*_mtp",)),
        sglang=Sglang("NEXTN", flags=_SG_STEPS, self_draft=("EAGLE", "EAGLE3")),
        needs_draft=False,
        target_head=True,
        why_not={
            "store_eval": "a feature store keeps aux layers, not the final hidden states an "
            "MTP head reads",
        },
        train=True,
        probe=True,
        convert=True,
        decoders=("mtp",),
    ),
    Method(
        "ngram",
        title="prompt lookup",
        package="lookup",
        drafter="prompt lookup (n-gram match in the context)",
        passes="0",  # no model: a host-side string match
        parts=("decode",),
        # eagle3kit's lookup matches the last 2 tokens, else the last 1 (methods/lookup)
        vllm=Vllm("ngram", extra={"prompt_lookup_max": 2, "prompt_lookup_min": 1}),
        sglang=Sglang("NGRAM", flags="--speculative-num-draft-tokens {k1}"),
        needs_draft=False,
        decoders=("lookup",),
    ),
)
DEFAULT = METHODS[0].name  # what a verb assumes when nothing names the method
_BY_NAME = {m.name: m for m in METHODS}


def names(can: str | None = None) -> tuple[str, ...]:
    """Every method's name in registry order; with `can`, those having that capability
    (a boolean field of `Method`: "tree", "train", "probe", "store_eval", ...)."""
    return tuple(m.name for m in METHODS if can is None or getattr(m, can))


def get(name: str, where: str = "--method") -> Method:
    """The record of `name`; one line naming `where` otherwise."""
    found = find(name)
    if found is None:
        raise Eagle3Error(f"{where}: expected one of {', '.join(names())}, found {name!r}")
    return found


def find(name: Any) -> Method | None:
    """The record of `name`, None when it names no method."""
    return _BY_NAME.get(name) if isinstance(name, str) else None


def family(name: Any) -> Method | None:
    """The record of the method that reads `name`: the method itself, or the family of a
    variant (a DFlash2 or Domino drafter is read as DFlash)."""
    return find(name) or next((m for m in METHODS if name in m.variants), None)


def target_head() -> Method:
    """The method whose drafter ships inside the target (its MTP layers)."""
    return next(m for m in METHODS if m.target_head)


def of_decoder(decoder: str) -> Method | None:
    """The method a decoding loop (DecodeStats.method: chain, tree, lookup, ...) runs."""
    return next((m for m in METHODS if decoder in m.decoders), None)


def _engine_names(m: Method, engine: str) -> tuple[str, ...]:
    if engine == "any":
        return _engine_names(m, "vllm") + _engine_names(m, "sglang")
    e = getattr(m, engine)
    if e is None:
        return ()
    return ((e.method if engine == "vllm" else e.algorithm), *e.aliases)


def from_engine(
    engine: str, name: str, flags: dict[str, Any] | None = None, draft_is_target: bool = False
) -> Method | None:
    """Our method for an engine's name of it: vLLM's `method` (with its boolean `flags`, e.g.
    `parallel_drafting`) or SGLang's `speculative_algorithm` (`engine` "any": either, in any
    case); None when it is none of ours. `draft_is_target`: the server drafts with its own
    model path, i.e. its MTP head."""
    given = {k: bool(v) for k, v in (flags or {}).items()}
    low = str(name).lower()
    if draft_is_target and engine == "sglang":
        own = [m for m in METHODS if m.sglang and low in (a.lower() for a in m.sglang.self_draft)]
        if own:
            return own[0]
    best, score = None, -1
    for m in METHODS:
        if not any(fnmatch.fnmatchcase(low, n.lower()) for n in _engine_names(m, engine)):
            continue
        want = m.vllm.flags if engine == "vllm" and m.vllm else {}
        if all(given.get(k, False) == v for k, v in want.items()) and len(want) > score:
            best, score = m, len(want)
    return best


def engine_names() -> tuple[str, ...]:
    """Every engine name of a method (either engine, lower case, patterns left out), sorted."""
    every = {n.lower() for m in METHODS for e in ("vllm", "sglang") for n in _engine_names(m, e)}
    return tuple(sorted(n for n in every if "*" not in n))


def launch_lines(name: str, k: int, target: str, draft: str | None) -> dict[str, str | None]:
    """The SGLang and vLLM command lines that serve method `name` at k draft tokens on
    `target` (None: that engine does not serve it; k = 0: plain serving)."""
    if k == 0:
        return {
            "sglang": f"python -m sglang.launch_server --model-path {target}",
            "vllm": f"vllm serve {target}",
        }
    m = get(name)
    sg = m.sglang_flags(k, draft)
    vl = m.vllm_config(k, draft)
    return {
        "sglang": sg and f"python -m sglang.launch_server --model-path {target} {sg}",
        "vllm": vl and f"vllm serve {target} --speculative-config '{json.dumps(vl)}'",
    }


def eagle_code_line(target: str, draft: str) -> str:
    """How the original EAGLE code loads an EAGLE-3 drafter (its `eagle` layout)."""
    return (
        'python -c "from eagle.model.ea_model import EaModel; '
        f"EaModel.from_pretrained(base_model_path='{target}', ea_model_path='{draft}', "
        'use_eagle3=True)"'
    )


def part(name: str, layer: str) -> ModuleType | None:
    """Method `name`'s package part of `layer` (`eagle3kit.methods.<package>.<layer>`),
    imported now; None when its package has none. Call it only for your own layer or one
    below (tests/test_layers.py checks the callers)."""
    if layer not in LAYER_PARTS:
        raise ValueError(f"layer: expected one of {LAYER_PARTS}, found {layer!r}")
    m = family(name)
    if m is None:
        raise Eagle3Error(f"method: expected one of {', '.join(names())}, found {name!r}")
    if layer not in m.parts:
        return None
    return importlib.import_module(f"eagle3kit.methods.{m.package}.{layer}")


def parts(layer: str) -> list[tuple[Method, ModuleType]]:
    """Every package's part of `layer`, once per package, in registry order."""
    seen, out = set(), []
    for m in METHODS:
        if m.package not in seen and layer in m.parts:
            seen.add(m.package)
            out.append((m, part(m.name, layer)))
    return out
