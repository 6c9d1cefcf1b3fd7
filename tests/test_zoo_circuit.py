"""The copying circuit a new zoo member starts with (zoo/circuit.py): it copies before any
training, on tokens it has never seen together, in both architectures."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from eagle3kit.zoo import circuit  # noqa: E402
from eagle3kit.zoo import training as tr  # noqa: E402

VOCAB = 1024
KINDS = [("llama", 1), ("llama", 2), ("dsv3", 1), ("dsv3", 2)]
# what two-token matching needs (zoo/circuit.py): slow RoPE pairs; room in the kv latent
SHAPE = {"llama": (("rope_theta", 1e6),), "dsv3": (("kv_lora_rank", 96),)}


def _model(arch: str, match: int, install: bool):
    torch.manual_seed(0)
    shape = SHAPE[arch] if match == 2 else (("kv_lora_rank", 64),) if arch == "dsv3" else ()
    cfg = tr.model_config(arch, "full", VOCAB, {"<s>": 0, "</s>": 1, "<pad>": 2}, shape)
    cfg.num_hidden_layers = 3  # the circuit lives in layers 0 and 1; one more layer on top
    cfg._attn_implementation = "eager"  # attention weights are returned
    model = tr.new_model(cfg).eval()
    if install:
        circuit.install(model, arch, torch.Generator().manual_seed(1), match)
    return model


def _copy_rows(n: int = 6):
    """Random tokens, a random span, random filler of random length, the span again: the
    second copy (past its first two tokens) is predictable only by copying."""
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
        start = len(x) - 11  # the second copy's second token
        hits += int((pred[start : len(x) - 1] == x[start + 1 :]).sum())
        total += 10
    return hits / total


@pytest.mark.parametrize(("arch", "match"), KINDS)
def test_an_installed_circuit_copies_before_training(arch, match):
    assert _copy_accuracy(_model(arch, match, install=True)) >= 0.9
    assert _copy_accuracy(_model(arch, match, install=False)) <= 0.05  # chance is 1/1024


@pytest.mark.parametrize(("arch", "match"), KINDS)
def test_layer_0_holds_the_previous_tokens(arch, match):
    x = _copy_rows(1)[0][None]
    with torch.no_grad():
        model = _model(arch, match, install=True)
        att = model(input_ids=x, output_attentions=True).attentions[0][0]  # [heads, T, T]
    assert float(att[0].diagonal(-1).mean()) >= 0.9  # head 0: row t on column t-1
    if match == 2:
        assert float(att[1].diagonal(-2).mean()) >= 0.9  # head 1: t-2


def test_what_is_not_written_is_refused():
    with pytest.raises(ValueError, match="no copying circuit"):
        circuit.install(object(), "gpt2", torch.Generator())
    with pytest.raises(ValueError, match="matching 3 tokens"):
        circuit.install(object(), "llama", torch.Generator(), 3)
    with pytest.raises(ValueError, match="rope_theta"):
        circuit.install(_model("llama", 1, install=False), "llama", torch.Generator(), 2)
