"""checkpoint/eagle3/reader.py is the one reader of drafter checkpoints."""

from __future__ import annotations

import ast
from pathlib import Path

import torch
from ckpt_helpers import random_drafter, tiny_spec

import eagle3kit
from eagle3kit.checkpoint.eagle3.reader import drafter_header, read_drafter
from eagle3kit.model.drafter import Eagle3Drafter

SRC = Path(eagle3kit.__file__).parent


def _calls(tree: ast.AST, name: str) -> bool:
    return any(
        isinstance(n, ast.Call)
        and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name)
        for n in ast.walk(tree)
    )


def test_only_the_reader_calls_read_spec():
    """Every verb that opens a drafter goes through checkpoint/eagle3/reader.py."""
    callers = sorted(
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if _calls(ast.parse(p.read_text()), "read_spec")
    )
    assert callers == ["checkpoint/eagle3/reader.py"]


def test_read_drafter_gives_canonical_names_in_every_layout(tmp_path):
    spec = tiny_spec()
    for layout in ("sglang", "vllm", "eagle"):
        d = random_drafter(tmp_path / layout, spec, layout, seed=3)
        got, tensors, head = read_drafter(str(d))
        assert head.layout == layout and got.hidden_size == 64
        # SGLang's names whatever the file's: speculators stores layers.0.*, EAGLE midlayer.*
        assert "midlayer.self_attn.q_proj.weight" in tensors and "fc.weight" in tensors
        assert set(tensors) == set(head.names)
        assert drafter_header(str(d)).names == head.names
    a = Eagle3Drafter.from_pretrained(tmp_path / "sglang")
    b = Eagle3Drafter.from_pretrained(tmp_path / "vllm")
    for (n, p), (_, q) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(p, q), n
