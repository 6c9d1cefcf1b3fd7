"""compat against an engine release older than the method: "no METHOD in this release", exit 1.

The first releases are written out here by hand from the engines' own wheels (each version's
files read with `pip download --no-deps`; docs/formats.md "Releases that predate a method"),
not taken from core/registry.py:

    DFlash      vLLM 0.20.0 (qwen3_dflash.py; not in 0.19.1)   SGLang 0.5.11 (not in 0.5.10.post1)
    P-EAGLE     vLLM 0.16.0 (parallel_drafting; not in 0.15.1)  SGLang: never
    EAGLE 3.1   vLLM 0.22 (PR #42764)                           SGLang 0.5.12 (not in 0.5.11)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from safetensors.numpy import save_file

from eagle3kit.checkpoint.compat import compat
from eagle3kit.checkpoint.engines import rules as E

FIRST = {  # method -> engine -> (first release, its text in the message)
    "dflash": {"vllm": ((0, 20), "vLLM 0.20"), "sglang": ((0, 5, 11), "SGLang 0.5.11")},
    "peagle": {"vllm": ((0, 16), "vLLM 0.16")},
    "eagle3.1": {"vllm": ((0, 22), "vLLM 0.22"), "sglang": ((0, 5, 12), "SGLang 0.5.12")},
}
TITLE = {"dflash": "DFlash", "peagle": "P-EAGLE", "eagle3.1": "EAGLE 3.1"}
OLD = {"vllm": [(0, 10), (0, 15, 1)], "sglang": [(0, 4, 6), (0, 5, 10)]}  # the and more


def _text(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


def _before(engine: str, first: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every release the rules table names for `engine` (its bands' representatives and its
    break points) that predates `first`, the one just before it, and older ones."""
    table = {v for _, v in E.bands(engine)} | set(E.BREAKS[engine])
    just = first[:-1] + (first[-1] - 1,)
    return sorted(v for v in table | {just, *OLD[engine]} if v < first)


def _target(path: Path) -> Path:
    path.mkdir(parents=True)
    rng = np.random.default_rng(7)
    save_file(
        {
            "model.embed_tokens.weight": rng.standard_normal((96, 32)).astype(np.float32),
            "lm_head.weight": rng.standard_normal((96, 32)).astype(np.float32),
        },
        str(path / "model.safetensors"),
    )
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 32,
        "num_hidden_layers": 8,
        "vocab_size": 96,
        "num_attention_heads": 4,
    }
    (path / "config.json").write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="module")
def drafters(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """method -> (drafter, target): tiny hand-made files of each method."""
    from eagle3kit.checkpoint.eagle3.synthetic import (
        kimi_k25_mla_spec,
        kimi_k25_target_config,
        write_sparse_drafter,
        write_target_config,
    )
    from eagle3kit.methods.dflash.checkpoint.synthetic import tiny_dflash_spec, write_dflash
    from eagle3kit.methods.peagle.checkpoint.synthetic import tiny_peagle_spec, write_peagle

    root = tmp_path_factory.mktemp("first")
    t = _target(root / "t")
    write_dflash(root / "dflash", tiny_dflash_spec())
    write_peagle(root / "peagle", tiny_peagle_spec("vllm"))
    spec = kimi_k25_mla_spec().replace(fc_norm=True, norm_output=True)
    omit = ("embed_tokens.weight", "d2t", "t2d")
    write_sparse_drafter(root / "e31", spec, "vllm", omit=omit)
    k = write_target_config(root / "k", kimi_k25_target_config())
    return {
        "dflash": (root / "dflash", t),
        "peagle": (root / "peagle", t),
        "eagle3.1": (root / "e31", k),
    }


CASES = [(m, e) for m, by in FIRST.items() for e in by]


@pytest.mark.parametrize("method,engine", CASES, ids=[f"{m}-{e}" for m, e in CASES])
def test_every_release_before_the_first_has_no_method(drafters, method, engine):
    d, t = drafters[method]
    first, said = FIRST[method][engine]
    older = _before(engine, first)
    assert older  # the rules table names releases before it
    for v in older:
        r = compat(str(d), str(t), f"{engine}@{_text(v)}")
        errs = [f for f in r.findings if f.severity == "error" and f.engine == engine]
        lacks = [f for f in errs if f.code == "not-served"]
        assert len(lacks) == 1, (v, [f.message for f in errs])
        if method != "eagle3.1":  # nothing else of it is read (EAGLE-3's checks go on)
            assert len(errs) == 1, (v, [f.message for f in errs])
        msg = lacks[0].message
        assert msg.startswith(f"no {TITLE[method]} in this release: "), msg
        assert f"has no {TITLE[method]} (first served in {said}, " in msg, msg
    for v in (first, first[:-1] + (first[-1] + 1,)):  # the first release and the next one
        r = compat(str(d), str(t), f"{engine}@{_text(v)}")
        assert "not-served" not in [f.code for f in r.findings if f.engine == engine], v


@pytest.mark.parametrize(
    "method,engine,release",
    [("dflash", "sglang", "0.4.6"), ("dflash", "vllm", "0.10"), ("peagle", "vllm", "0.15.1")],
)
def test_cli_says_no_method_and_exits_1(drafters, method, engine, release):
    """The issue's cases: DFlash on SGLang 0.4.6 was 'served correctly', on vLLM 0.10 an id
    error; P-EAGLE on vLLM 0.15.1."""
    d, t = drafters[method]
    r = run_cli("compat", d, t, "--engine", f"{engine}@{release}")
    assert r.code == 1, r.out + r.err
    assert f"no {TITLE[method]} in this release" in r.out
    doc = json.loads(run_cli("compat", d, t, "--engine", f"{engine}@{release}", "--json").out)
    (f,) = [f for f in doc["findings"] if f["code"] == "not-served"]
    assert f["severity"] == "error" and release in f["message"]
