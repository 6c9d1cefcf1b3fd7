"""The copying circuit a new zoo member starts with (zoo/circuit.py): it copies before any
training, on tokens it has never seen together, in both architectures."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from eagle3kit.zoo import circuit  # noqa: E402
from eagle3kit.zoo import training as tr  # noqa: E402

VOCAB = 1024


def _model(arch: str, install: bool):
    torch.manual_seed(0)
    cfg = tr.model_config(arch, "full", VOCAB, {"<s>": 0, "</s>": 1, "<pad>": 2})
    cfg.num_hidden_layers = 3  # the circuit lives in layers 0 and 1; one more layer on top
    cfg._attn_implementation = "eager"  # attention weights are returned
    model = tr.new_model(cfg).eval()
    if install:
        circuit.install(model, arch, torch.Generator().manual_seed(1))
    return model


def _copy_rows(n: int = 6):
    """Random tokens, a random span, random filler of random length, the span again: the
    second copy (past its first token) is predictable only by copying."""
    g = torch.Generator().manual_seed(2)
    rows = []
    for _ in range(n):
        span = torch.randint(3, VOCAB, (12,), generator=g)
        gap = torch.randint(3, VOCAB, (int(torch.randint(0, 60, (1,), generator=g)),), generator=g)
        pre = torch.randint(3, VOCAB, (10,), generator=g)
        rows.append(torch.cat([pre, span, gap, span]))
    return rows


def _copy_accuracy(model) -> float:
    hits = total = 0
    for x in _copy_rows():
        with torch.no_grad():
            pred = model(input_ids=x[None]).logits[0].argmax(-1)  # [T]
        start = len(x) - 12  # the second copy
        hits += int((pred[start : len(x) - 1] == x[start + 1 :]).sum())
        total += 11
    return hits / total


@pytest.mark.parametrize("arch", ["llama", "dsv3"])
def test_an_installed_circuit_copies_before_training(arch):
    assert _copy_accuracy(_model(arch, install=True)) >= 0.9
    assert _copy_accuracy(_model(arch, install=False)) <= 0.05  # chance is 1/1024


@pytest.mark.parametrize("arch", ["llama", "dsv3"])
def test_layer_0_head_0_attends_to_the_previous_token(arch):
    x = _copy_rows(1)[0][None]
    with torch.no_grad():
        att = _model(arch, install=True)(input_ids=x, output_attentions=True).attentions[0]
    assert float(att[0, 0].diagonal(-1).mean()) >= 0.9  # [B, heads, T, T]: row t, column t-1


def test_an_unknown_architecture_is_refused():
    with pytest.raises(ValueError, match="no copying circuit"):
        circuit.install(object(), "gpt2", torch.Generator())
