"""One `Target` protocol (model/protocols.py) for every way a target is held, and no `Any`
where a target or a drafter is passed (issue 33).

The implementations are checked structurally (the members each protocol names exist on the
class: a property, a method, a dataclass field or an attribute set in `__init__`), and one
stand-in is used for real: a drafter sized for a `FeaturesTarget` built by hand."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap
from pathlib import Path

import torch

from eagle3kit.live.capture import EngineTarget
from eagle3kit.measure.probe_features import StoreTarget
from eagle3kit.model import protocols as P
from eagle3kit.model.drafter import Eagle3Drafter
from eagle3kit.model.target import TargetModel
from eagle3kit.train.setup import FeaturesTarget

SRC = Path(__file__).resolve().parents[1] / "src" / "eagle3kit"


def test_no_target_or_drafter_typed_any():
    pat = re.compile(r"\b(target|drafter)\s*:\s*Any\b")
    bad = [
        f"{p.relative_to(SRC)}:{n}: {line.strip()}"
        for p in sorted(SRC.rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if pat.search(line)
    ]
    assert not bad, "type it with model/protocols.py or a concrete class:\n" + "\n".join(bad)


def test_no_simplenamespace_stand_ins():
    bad = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if "SimpleNamespace" in p.read_text()]
    assert not bad, f"a stand-in is a small dataclass implementing a protocol: {bad}"


def _protocol_members(proto: type) -> set[str]:
    names = set()
    for klass in proto.__mro__:
        if klass in (object,) or not getattr(klass, "_is_protocol", False):
            continue
        names |= {n for n in vars(klass) if not n.startswith("_") or n == "__call__"}
        names |= set(getattr(klass, "__annotations__", {}))
    return names - {"_is_protocol"}


def _members(cls: type) -> set[str]:
    """Class attributes, dataclass fields, and `self.x = ...` / register_buffer("x") in it."""
    names = set(dir(cls))
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls)}
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(cls)))):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "register_buffer":
            names.add(node.args[0].value)
    return names


IMPLEMENTATIONS = {
    P.Target: [TargetModel, EngineTarget, FeaturesTarget, StoreTarget],
    P.RunningTarget: [TargetModel, EngineTarget],
    P.EmbeddedTarget: [TargetModel, FeaturesTarget],
    P.Drafter: [Eagle3Drafter],
}


def test_each_implementation_offers_its_protocol():
    missing = {
        f"{cls.__name__} as {proto.__name__}": sorted(_protocol_members(proto) - _members(cls))
        for proto, classes in IMPLEMENTATIONS.items()
        for cls in classes
    }
    missing = {k: v for k, v in missing.items() if v}
    assert not missing, missing
    assert {"config", "vocab_size", "num_layers", "aux_layers"} <= _protocol_members(P.Target)


def test_the_check_sees_a_missing_member():
    @dataclasses.dataclass
    class Half:
        config: P.JsonConfig
        vocab_size: int

    assert _protocol_members(P.Target) - _members(Half) == {"num_layers", "aux_layers"}


def test_a_drafter_sized_for_a_stand_in_target():
    """`Eagle3Drafter.for_target` on the config + embedding offline training reads by header."""
    cfg = {"hidden_size": 16, "num_hidden_layers": 4, "vocab_size": 32, "num_attention_heads": 2}
    emb = torch.randn(32, 16)
    t = FeaturesTarget(P.JsonConfig(cfg), P.Embedding(emb), 32, 4, (1, 2, 3))
    d = Eagle3Drafter.for_target(t)
    assert d.spec.aux_layers == (1, 2, 3) and d.spec.hidden_size == 16
    assert torch.equal(d.embed_tokens.weight, emb) and d.embed_loaded
    assert d.dtype == torch.float32 and d.to_target_ids(torch.tensor([3])).tolist() == [3]
