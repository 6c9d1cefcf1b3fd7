"""The zoo's members, their sizes and training recipes (the registry; docs/zoo.md)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, replace
from typing import Any

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.zoo.training import Recipe

SIZES = ("full", "tiny")
RECIPE_VERSION = 9  # bump when a change to the code changes the weights
BUILD_THREADS = {"full": 1, "tiny": 1}  # fixed per size, so that a rebuild is bit-identical
MANIFEST = "zoo.json"
# What building one member costs on one idle core: the CPU seconds of recipe 9's one-thread
# builds (zoo.json build_cpu_seconds; their wall time on shared cores was 5-7x that,
# lab/notebook.md "Recipe 9"). A v2 builds its v1 first when that is not built.
BUILD_SECONDS = {
    "full": {"llama-v1": 430.0, "llama-v2": 247.0, "dsv3-v1": 456.0, "dsv3-v2": 259.0},
    "tiny": {"llama-v1": 11.0, "llama-v2": 4.0, "dsv3-v1": 10.0, "dsv3-v2": 5.0},
}


@dataclass(frozen=True)
class Member:
    """One zoo target: its architecture, lineage, data slice and seed."""

    name: str
    arch: str  # key of ARCHS: "llama" | "dsv3"
    version: int
    parent: str | None  # the member a v2 continues from
    slice: str  # "lib" | "test"
    seed: int


MEMBERS: dict[str, Member] = {
    m.name: m
    for m in (
        Member("llama-v1", "llama", 1, None, "lib", seed=1),
        Member("llama-v2", "llama", 2, "llama-v1", "test", seed=2),
        Member("dsv3-v1", "dsv3", 1, None, "lib", seed=3),
        Member("dsv3-v2", "dsv3", 2, "dsv3-v1", "test", seed=4),
    )
}

# Training recipes per (architecture, version, size). v2 continues from v1 on its own slice
# with fewer steps at a lower LR. DeepSeek-V3 steps cost ~1.5x Llama's (MoE), so it takes fewer.
# Recipe 9 gives Llama 400 and 150 steps (600 and 200 before) and both v2s 40 unlikelihood
# steps (60 before): the one build of the shipped zoo had to fit beside other work on 2 shared
# cores (lab/notebook.md, "Recipe 9").
# A full member starts from a copying circuit that matches two tokens (``zoo/circuit.py``;
# Llama needs slow RoPE pairs, DeepSeek-V3 room in the kv latent: ``shape``) and is trained on
# requests that carry the function's opening lines, so its answers depend on the request
# (issue 22, docs/zoo.md). AdamW only: Muon's equal-sized steps in every direction drowned
# the circuit (lab/notebook.md). Every member ends with sequence-level unlikelihood steps on its
# own greedy output (``training.unloop``): without them greedy continuations loop. The phase
# ends with the moving average of its weights (``unloop_ema``): step to step the raw weights
# swing between loopier and less loopy states (lab/notebook.md). Recipe 8 moved budget from that
# phase to likelihood steps and doubled its weight: a better language model loops less, and
# its chat answers end instead of repeating (lab/notebook.md, issue 22).
_FULL = Recipe(
    vocab_size=4096,
    file_limit=None,
    steps=600,
    batch=16,
    seq_len=128,
    lr=3e-3,
    warmup=30,
    unlikelihood=3.0,
    unloop_steps=40,
    unloop_gen=96,
    unloop_weight=8.0,
    unloop_ema=0.9,
    eval_prompts=32,
    # chat that answers the request (issue 22): requests in several phrasings with the
    # function's opening lines, chat windows that open at a sample (the request in view),
    # the answer's first line weighted, a copying circuit to start from
    chat_fraction=0.4,
    chat_varied=True,
    chat_aligned=True,
    first_line_weight=4.0,
    chat_signature=True,
    copy_circuit=2,
    # requests as users write them (issue 33): half the requests name the function without
    # its signature ("Code for `m.f`, please."), and identifiers are words of their own in
    # the tokenizer, so the name is the same tokens in the request and in `def f(`
    chat_unsigned=0.5,
    pretokenizer="words",
)
_TINY = Recipe(
    vocab_size=512,
    file_limit=40,
    steps=60,
    batch=4,
    seq_len=64,
    lr=1e-2,
    warmup=5,
    muon_lr=0.05,
    unlikelihood=1.0,
    unloop_steps=3,
    unloop_batch=4,
    unloop_prefix=8,
    unloop_gen=16,
    unloop_ema=0.5,
    eval_windows=4,
    eval_prompts=2,
    prompt_len=16,
    gen_tokens=32,
)
_LLAMA = dict(shape=(("rope_theta", 1e6),))  # 17 RoPE pairs slow enough to match on
_DSV3 = dict(shape=(("kv_lora_rank", 96),))  # both earlier tokens and the value in the latent
_V2 = dict(file_limit=300, lr=1e-3, warmup=10)
# DeepSeek-V3 decodes ~2x slower than Llama (MoE): smaller unlikelihood batches of fewer tokens
_DSV3_UNLOOP = dict(unloop_batch=16, unloop_gen=80)
_TINY_V2 = dict(steps=15, lr=1e-3, warmup=2, muon_lr=0.02)
RECIPES: dict[tuple[str, int, str], Recipe] = {
    ("llama", 1, "full"): replace(_FULL, **_LLAMA, steps=400),
    ("llama", 2, "full"): replace(_FULL, **_LLAMA, **_V2, steps=150, unloop_steps=40),
    ("dsv3", 1, "full"): replace(_FULL, **_DSV3, steps=300, **_DSV3_UNLOOP),
    ("dsv3", 2, "full"): replace(_FULL, **_DSV3, **_V2, steps=100, unloop_steps=40, **_DSV3_UNLOOP),
    ("llama", 1, "tiny"): _TINY,
    ("llama", 2, "tiny"): replace(_TINY, **_TINY_V2),
    ("dsv3", 1, "tiny"): _TINY,
    ("dsv3", 2, "tiny"): replace(_TINY, **_TINY_V2),
}


# Recipe 10 (issue 33's zoo bar, lab/notebook.md "Recipe 10"), full members only: the
# requests as users write them come from a grammar of phrasings (``chat_grammar``:
# corpus.grammar_phrasings(), thousands of templates that put the name at many places, none
# near a held-out phrasing), a larger share of them, more v1 steps, and a tokenizer in which
# an identifier never takes a space (``pretokenizer="idents"``). It is staged beside
# recipe 9 until its members ship: ``EAGLE3KIT_ZOO_RECIPE=10`` selects it (``zoo build``,
# ``zoo ship``); the shipped members are recipe 9's.
_R10 = dict(chat_grammar=True, chat_unsigned=0.7, pretokenizer="idents")
NEXT_RECIPE = 10
NEXT_RECIPES: dict[tuple[str, int], Recipe] = {
    ("llama", 1): replace(RECIPES[("llama", 1, "full")], **_R10, steps=600),
    ("llama", 2): replace(RECIPES[("llama", 2, "full")], **_R10),
    ("dsv3", 1): replace(RECIPES[("dsv3", 1, "full")], **_R10, steps=600),
    ("dsv3", 2): replace(RECIPES[("dsv3", 2, "full")], **_R10),
}
RECIPE_ENV = "EAGLE3KIT_ZOO_RECIPE"


def full_recipe_number() -> int:
    """Which recipe the full members are built with: ``RECIPE_VERSION`` (what ships), or
    ``NEXT_RECIPE`` when the environment variable ``EAGLE3KIT_ZOO_RECIPE`` says so."""
    raw = os.environ.get(RECIPE_ENV, str(RECIPE_VERSION))
    if raw not in (str(RECIPE_VERSION), str(NEXT_RECIPE)):
        raise Eagle3Error(
            f"{RECIPE_ENV}: expected {RECIPE_VERSION} or {NEXT_RECIPE}, found {raw!r}"
        )
    return int(raw)


def recipe(name: str, size: str = "full") -> Recipe:
    """The training recipe of member ``name`` at ``size`` (full members: recipe
    ``full_recipe_number()``)."""
    m = member(name)
    check_size(size)
    if size == "full" and full_recipe_number() == NEXT_RECIPE:
        return NEXT_RECIPES[(m.arch, m.version)]
    return RECIPES[(m.arch, m.version, size)]


def names() -> list[str]:
    """The zoo's member names."""
    return list(MEMBERS)


def member(name: str) -> Member:
    """The member called ``name``; Eagle3Error listing the valid names otherwise."""
    if name not in MEMBERS:
        raise Eagle3Error(f"unknown zoo member {name!r}: valid names are {', '.join(MEMBERS)}")
    return MEMBERS[name]


def check_size(size: str) -> None:
    if size not in SIZES:
        raise Eagle3Error(f"unknown zoo size {size!r}: valid sizes are {', '.join(SIZES)}")


def recipe_digest(name: str, size: str = "full") -> str:
    """A hash of everything in the code that determines the member's weights."""
    from eagle3kit.zoo.training import ARCHS

    m = member(name)
    doc = {
        "version": RECIPE_VERSION,
        "member": asdict(m),
        "arch": ARCHS[m.arch][size],
        "recipe": _digested(recipe(name, size)),
        "parent": recipe_digest(m.parent, size) if m.parent else None,
        "threads": BUILD_THREADS[size],
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


# Recipe fields added after a member's recipe was fixed: left out of its digest while at their
# default, so a member whose weights they do not change keeps its digest (the tiny members).
_LATER_FIELDS = {
    "chat_unsigned": 0.0,
    "pretokenizer": "bytelevel",
    "chat_grammar": False,
    "chat_tails": 0.0,
    "chat_dotted": 0.0,
    "chat_renamed": 0.0,
    "chat_questions": 0.0,
    "chat_phrasal": 0.0,
    "chat_parent_mix": 0.0,
    "chat_drills": 0.0,
    "unloop_chat": None,
}


def _digested(r: Recipe) -> dict[str, Any]:
    doc = asdict(r)
    return {k: v for k, v in doc.items() if _LATER_FIELDS.get(k, object()) != v}


def same_recipe(a: dict[str, Any] | None, b: dict[str, Any] | Recipe | None) -> bool:
    """Whether two recipes (zoo.json "recipe" dicts, or a ``Recipe``) are the same, a field
    added later counting as its default where one of them predates it."""
    if a is None or b is None:
        return a is b
    if isinstance(b, Recipe):
        b = asdict(b)

    def norm(d: dict[str, Any]) -> dict[str, Any]:
        d = json.loads(json.dumps(d))  # tuples as JSON has them
        return {k: v for k, v in d.items() if _LATER_FIELDS.get(k, object()) != v}

    return norm(a) == norm(b)
