"""Device-correct by construction, checked on a CPU: the decode and regenerate paths run with
the default device set to `meta`, so any tensor made without an explicit device lands on
`meta` and fails; and every random draw checks that its generator lives on the device of the
tensor it makes (what CUDA enforces: a CUDA generator with a CPU draw raises there)."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
import torch
from decode_helpers import new_drafter

from eagle3kit.decode import Sampling, TreeShape, plain_generate, speculative_generate
from eagle3kit.decode.sampling import make_generator

SRC = Path(__file__).resolve().parents[1] / "src" / "eagle3kit"


@contextlib.contextmanager
def device_checks(monkeypatch):
    """Default device `meta`; torch.rand/randn/randint/multinomial assert that the generator's
    device is the device of the tensor the draw makes."""
    seen = []

    def wrap(name, where):
        real = getattr(torch, name)

        def checked(*args, generator=None, **kw):
            if generator is not None:
                dev = where(args, kw)
                assert generator.device == dev, (
                    f"torch.{name}: generator on {generator.device}, draw on {dev}"
                )
                seen.append(name)
            return real(*args, generator=generator, **kw)

        monkeypatch.setattr(torch, name, checked)

    def made(_args, kw):
        return torch.device(kw.get("device") or torch.get_default_device())

    for name in ("rand", "randn", "randint"):
        wrap(name, made)
    wrap("multinomial", lambda args, kw: args[0].device)
    torch.set_default_device("meta")
    try:
        yield seen
    finally:
        torch.set_default_device("cpu")


@pytest.fixture(scope="module", params=["llama-v1", "dsv3-v1"])
def target(request):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    return TargetModel.from_pretrained(zoo.get(request.param, size="tiny"))


SHAPES = {"chain": None, "tree": TreeShape(topk=2, budget=5)}


@pytest.mark.parametrize("shape", ["chain", "tree"])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.slow
def test_speculative_on_the_targets_device(target, monkeypatch, shape, temperature):
    d = new_drafter(target, seed=1)
    ids = target.tokenizer("def main(")["input_ids"]
    s = Sampling(temperature, 0.9 if temperature else 1.0)
    want = speculative_generate(
        target, d, ids, max_new_tokens=8, depth=3, tree=SHAPES[shape], sampling=s, seed=4
    )
    with device_checks(monkeypatch) as seen:
        got = speculative_generate(
            target, d, ids, max_new_tokens=8, depth=3, tree=SHAPES[shape], sampling=s, seed=4
        )
    assert got.tokens == want.tokens  # the same run, with the checks on
    assert bool(seen) == (temperature > 0)  # the sampled runs did draw through the checks


def test_plain_sampled_on_the_targets_device(target, monkeypatch):
    ids = target.tokenizer("x = [")["input_ids"]
    s = Sampling(0.9, 0.8)
    with device_checks(monkeypatch) as seen:
        g = make_generator(target.device, 3)
        got = plain_generate(target, ids, max_new_tokens=6, sampling=s, generator=g).tokens
    assert seen and len(got) == 6


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_regenerate_local_on_the_targets_device(target, monkeypatch, temperature):
    from eagle3kit.decode.local import local_generator

    gen = local_generator(target, 6, temperature, seed=1)
    msgs = [{"role": "user", "content": "Write `f`."}]
    want = gen(msgs, "s0")
    with device_checks(monkeypatch) as seen:
        got = gen(msgs, "s0")
    assert got == want and bool(seen) == (temperature > 0)


def test_checks_catch_a_draw_off_the_generators_device(monkeypatch):
    """Power: the detector fails a draw that does not say where it lives."""
    g = torch.Generator().manual_seed(0)
    with device_checks(monkeypatch), pytest.raises(AssertionError, match="generator on cpu"):
        torch.rand((), generator=g)


def test_no_cpu_only_generator_or_draw_in_library_code():
    """No `torch.Generator()` (a CPU generator whatever the data's device) and no
    `torch.rand(...)` without `device=` in the decode, model and regenerate code."""
    files = [*(SRC / "decode").glob("*.py"), *(SRC / "model").glob("*.py")]
    files.append(SRC / "data" / "regenerate.py")
    bad = []
    for f in files:
        text = f.read_text()
        for line in text.splitlines():
            if "torch.Generator()" in line or ".numpy()" in line:
                bad.append(f"{f.name}: {line.strip()}")
            if re.search(r"torch\.rand\(", line) and "device=" not in line:
                bad.append(f"{f.name}: {line.strip()}")
    assert not bad, bad
