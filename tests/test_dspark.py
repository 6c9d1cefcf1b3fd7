"""DSpark (methods/dspark): hand-made checkpoints in speculators' and SpecForge's layouts read,
inspected, checked per engine release and converted byte for byte; the Markov chain over a
block's slots; lossless decoding on both tiny members (random and trained drafters, with and
without sample_from_anchor, every head type, a block stopped early by the confidence head);
`train --method dspark` from a DFlash drafter; logits equal to speculators' own DSparkDraftModel.

Expected values are written out from the peers' sources (methods/dspark/checkpoint/read.py's
docstring names them), never taken from the code under test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli
from safetensors.numpy import load_file

from eagle3kit.checkpoint.compat import compat
from eagle3kit.checkpoint.inspection import inspect_checkpoint
from eagle3kit.checkpoint.method_convert import convert_method
from eagle3kit.checkpoint.methods import detect_method
from eagle3kit.decode import greedy_generate, speculative_generate
from eagle3kit.methods.dflash.model import DFlashDrafter
from eagle3kit.methods.dspark.checkpoint.read import dspark_header
from eagle3kit.methods.dspark.checkpoint.spec import DSparkSpec
from eagle3kit.methods.dspark.checkpoint.synthetic import tiny_dspark_spec, write_dspark
from eagle3kit.methods.dspark.model import DSparkDrafter, from_dflash

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ["llama-v1", "dsv3-v1"]
ZLAB_IDS = (1, 3)  # aux h[2], h[4] on the 8-layer tiny members


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One torch thread: the machine's cores are shared (several are much slower here)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _target_dir(path: Path) -> Path:
    """A Qwen3-like target of the tiny drafters' shapes (H 32, vocab 96, 8 layers)."""
    from safetensors.numpy import save_file

    path.mkdir(parents=True)
    rng = np.random.default_rng(7)
    emb = rng.standard_normal((96, 32)).astype(np.float32)
    save_file(
        {"model.embed_tokens.weight": emb, "lm_head.weight": emb}, str(path / "model.safetensors")
    )
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 32}
    cfg |= {"num_hidden_layers": 8, "vocab_size": 96, "num_attention_heads": 4}
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _codes(r, engine: str) -> list[str]:
    return [f.code for f in r.findings if f.severity == "error" and f.engine in (None, engine)]


def _bytes(folder: Path) -> dict[str, bytes]:
    return {k: v.tobytes() for k, v in load_file(str(folder / "model.safetensors")).items()}


# ------------------------------------------------------------------ the checkpoint layer


def test_both_layouts_inspected(tmp_path):
    write_dspark(tmp_path / "s", tiny_dspark_spec("speculators"))
    write_dspark(tmp_path / "f", tiny_dspark_spec("specforge", markov_head_type="gated"))
    for name, fmt, kind in (("s", "speculators", "vanilla"), ("f", "specforge", "gated")):
        cfg = json.loads((tmp_path / name / "config.json").read_text())
        assert detect_method(cfg) == "dspark"  # above DFlash's claim on its family
        doc = inspect_checkpoint(str(tmp_path / name)).to_json()
        assert (doc["method"], doc["format"], doc["markov_head_type"]) == ("dspark", fmt, kind)
        assert (doc["missing"], doc["unexpected"], doc["shape_mismatches"]) == ([], [], [])
        assert doc["markov_rank"] == 8 and doc["block_size"] == 4
        assert doc["target_layers"]["zlab"] == [1, 5] and doc["target_layers"]["h"] == [2, 6]
    spf = json.loads((tmp_path / "f" / "config.json").read_text())
    # SpecForge's keys (configs/qwen3-8b-dspark.json): the heads beside projector_type
    assert spf["architectures"] == ["DSparkDraftModel"] and spf["model_type"] == "qwen3"
    assert spf["dflash_config"]["projector_type"] == "dspark"
    assert spf["dflash_config"]["markov_rank"] == 8 and spf["sample_from_anchor"] is False
    sp = json.loads((tmp_path / "s" / "config.json").read_text())
    assert (sp["speculators_model_type"], sp["markov_rank"]) == ("dspark", 8)
    assert sp["aux_hidden_state_layer_ids"] == [2, 6]
    # a gated head's gate_proj [r, H + r]; confidence [1, H + r]
    t = load_file(str(tmp_path / "f" / "model.safetensors"))
    assert t["markov_head.gate_proj.weight"].shape == (8, 40)
    assert t["confidence_head.proj.weight"].shape == (1, 40)
    assert "embed_tokens.weight" not in t and "lm_head.weight" not in t


def test_a_missing_head_tensor_is_an_error(tmp_path):
    write_dspark(tmp_path / "s", tiny_dspark_spec(), omit=("markov_head.markov_w2.weight",))
    doc = inspect_checkpoint(str(tmp_path / "s")).to_json()
    assert doc["missing"] == ["markov_head.markov_w2.weight"]


def test_compat_per_engine_release(tmp_path):
    """vLLM reads speculators' layout from 0.25 (vanilla heads only), SGLang SpecForge's from
    0.5.16 (the target's vocabulary only); each refuses the other's layout."""
    t = _target_dir(tmp_path / "t")
    write_dspark(tmp_path / "s", tiny_dspark_spec("speculators"))
    write_dspark(tmp_path / "f", tiny_dspark_spec("specforge"))
    assert compat(str(tmp_path / "s"), str(t), "vllm@0.33").compatible
    assert compat(str(tmp_path / "f"), str(t), "sglang@0.5.23").compatible
    assert _codes(compat(str(tmp_path / "s"), str(t), "vllm@0.24"), "vllm") == ["not-served"]
    r = compat(str(tmp_path / "f"), str(t), "sglang@0.5.15")
    assert _codes(r, "sglang") == ["not-served"]
    assert "no DSpark in this release" in r.findings[-1].message
    assert _codes(compat(str(tmp_path / "f"), str(t), "vllm@0.33"), "vllm") == ["not-served"]
    assert _codes(compat(str(tmp_path / "s"), str(t), "sglang@0.5.23"), "sglang") == ["not-served"]
    # SGLang captures h[z + 1] of SpecForge's ids; vLLM speculators' ids as they are
    r = compat(str(tmp_path / "s"), str(t), "vllm@0.33")
    assert r.engines["vllm"]["captures"] == [2, 6]
    assert compat(str(tmp_path / "f"), str(t), "sglang").engines["sglang"]["captures"] == [2, 6]
    write_dspark(tmp_path / "g", tiny_dspark_spec(markov_head_type="gated"))
    assert _codes(compat(str(tmp_path / "g"), str(t), "vllm@0.33"), "vllm") == ["engine-refuses"]
    write_dspark(tmp_path / "r", tiny_dspark_spec("specforge", markov_head_type="rnn"))
    assert compat(str(tmp_path / "r"), str(t), "sglang@0.5.23").compatible
    # a causal (sliding) layer trained bidirectional: both engines run sliding layers causal
    spec = tiny_dspark_spec(
        backbone={"layer_types": ("sliding_attention", "full_attention"), "sliding_window": 16}
    )
    write_dspark(
        tmp_path / "w", spec.replace(backbone=spec.backbone.replace(layer_causal=(True, False)))
    )
    cfg = json.loads((tmp_path / "w" / "config.json").read_text())
    cfg["sliding_window_non_causal"] = True  # trained bidirectional; vLLM does not read it
    (tmp_path / "w" / "config.json").write_text(json.dumps(cfg))
    assert "dflash-causality" in _codes(compat(str(tmp_path / "w"), str(t), "vllm@0.33"), "vllm")
    # SGLang's default sample_from_anchor is true: a SpecForge file must state false
    cfg = json.loads((tmp_path / "f" / "config.json").read_text())
    del cfg["sample_from_anchor"]
    (tmp_path / "f" / "config.json").write_text(json.dumps(cfg))
    r = compat(str(tmp_path / "f"), str(t), "sglang@0.5.23")
    assert _codes(r, "sglang") == ["sample-from-anchor"]


# written out by hand from the released wheels (`pip download --no-deps`): vLLM 0.25.0 has
# qwen3_dspark.py and update_dspark, 0.24.0 neither; SGLang 0.5.16 has DSPARK, 0.5.15.post1 not
FIRST = {"vllm": ((0, 25), "vLLM 0.25"), "sglang": ((0, 5, 16), "SGLang 0.5.16")}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_release_before_the_first_has_no_dspark(tmp_path, engine):
    """compat against every release the rules table names before DSpark's first (and the one
    just before it): one error, "no DSpark in this release", exit 1 on the command line."""
    from eagle3kit.checkpoint.engines import rules as E

    t = _target_dir(tmp_path / "t")
    write_dspark(
        tmp_path / "d", tiny_dspark_spec("speculators" if engine == "vllm" else "specforge")
    )
    first, said = FIRST[engine]
    table = {v for _, v in E.bands(engine)} | set(E.BREAKS[engine])
    older = sorted(v for v in table | {first[:-1] + (first[-1] - 1,)} if v < first)
    assert len(older) >= 2
    for v in older:
        r = compat(str(tmp_path / "d"), str(t), f"{engine}@{'.'.join(map(str, v))}")
        (f,) = [f for f in r.findings if f.severity == "error" and f.engine == engine]
        assert f.code == "not-served" and f.message.startswith("no DSpark in this release: ")
        assert f"has no DSpark (first served in {said}, " in f.message, f.message
    r = compat(str(tmp_path / "d"), str(t), f"{engine}@{'.'.join(map(str, first))}")
    assert not any(f.message.startswith("no DSpark") for f in r.findings)
    v = ".".join(map(str, older[-1]))
    r = run_cli("compat", tmp_path / "d", t, "--engine", f"{engine}@{v}")
    assert r.code == 1 and "no DSpark in this release" in r.out, r.out + r.err


def test_compat_releases_that_read_it_otherwise(tmp_path):
    """vLLM 0.25/0.26 run every speculators DSpark file with the 1+N block (its
    sample_from_anchor not read; read from 0.27, missing = false); SGLang reads SpecForge's
    heads (in dflash_config) from 0.5.23 only: before, its markov_rank is 0 and refused."""
    t = _target_dir(tmp_path / "t")
    write_dspark(tmp_path / "a", tiny_dspark_spec(backbone={"sample_from_anchor": True}))
    write_dspark(tmp_path / "b", tiny_dspark_spec())  # sample_from_anchor: false, stated
    for v in ("0.25", "0.26"):
        r = compat(str(tmp_path / "a"), str(t), f"vllm@{v}")
        assert _codes(r, "vllm") == ["sample-from-anchor"], v
        assert "does not read it" in r.findings[-1].message
        assert compat(str(tmp_path / "b"), str(t), f"vllm@{v}").compatible, v
    assert compat(str(tmp_path / "a"), str(t), "vllm@0.27").compatible
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    del cfg["sample_from_anchor"]  # vLLM reads a missing one as false
    (tmp_path / "a" / "config.json").write_text(json.dumps(cfg))
    r = compat(str(tmp_path / "a"), str(t), "vllm@0.33")
    assert _codes(r, "vllm") == ["sample-from-anchor"]
    write_dspark(tmp_path / "f", tiny_dspark_spec("specforge"))
    r = compat(str(tmp_path / "f"), str(t), "sglang@0.5.22")
    assert _codes(r, "sglang") == ["not-served"]
    assert "deepspec layout" in r.findings[-1].message
    assert compat(str(tmp_path / "f"), str(t), "sglang@0.5.23").compatible


@pytest.mark.parametrize("kind", ["vanilla", "gated", "rnn"])
def test_convert_both_ways_bit_exact(tmp_path, kind):
    spec = tiny_dspark_spec("speculators", markov_head_type=kind)
    write_dspark(tmp_path / "s", spec)
    convert_method(dspark_header(str(tmp_path / "s")), "specforge", str(tmp_path / "f"))
    assert _bytes(tmp_path / "s") == _bytes(tmp_path / "f")
    f = dspark_header(str(tmp_path / "f"))
    assert (f.layout, f.spec.markov_head_type, f.spec.target_layer_ids) == (
        "specforge",
        kind,
        (1, 5),
    )
    convert_method(f, "speculators", str(tmp_path / "s2"))
    assert _bytes(tmp_path / "s2") == _bytes(tmp_path / "s")
    a = json.loads((tmp_path / "s" / "config.json").read_text())
    assert json.loads((tmp_path / "s2" / "config.json").read_text()) == a
    write_dspark(tmp_path / "f0", tiny_dspark_spec("specforge", markov_head_type=kind))
    convert_method(dspark_header(str(tmp_path / "f0")), "speculators", str(tmp_path / "s0"))
    convert_method(dspark_header(str(tmp_path / "s0")), "specforge", str(tmp_path / "f1"))
    assert _bytes(tmp_path / "f1") == _bytes(tmp_path / "f0")
    assert json.loads((tmp_path / "f1" / "config.json").read_text()) == json.loads(
        (tmp_path / "f0" / "config.json").read_text()
    )


def test_convert_refuses_a_reduced_vocabulary_to_specforge(tmp_path):
    write_dspark(tmp_path / "r", tiny_dspark_spec(backbone={"draft_vocab_size": 48}))
    r = run_cli("convert", tmp_path / "r", "--to", "specforge", "-o", tmp_path / "o")
    assert r.code == 2 and "draft_vocab_size 48 of 96" in r.err and not (tmp_path / "o").exists()


def test_registry_and_launch_lines():
    from eagle3kit.core import registry

    m = registry.get("dspark")
    assert (m.passes, m.draft_passes(7)) == ("1", 1)  # one backbone pass per cycle
    lines = registry.launch_lines("dspark", 7, "T", "D")
    assert '"method": "dspark"' in lines["vllm"] and '"num_speculative_tokens": 7' in lines["vllm"]
    # sglang 0.5.16-0.5.23 server_args.py: gamma, the drafts per block (verify window gamma + 1)
    assert "--speculative-algorithm DSPARK" in lines["sglang"]
    assert "--speculative-dspark-block-size 7" in lines["sglang"]
    assert (
        registry.from_engine("vllm", "dspark") is m
        and registry.from_engine("sglang", "DSPARK") is m
    )


# ------------------------------------------------------------------ the module and decoding


@pytest.fixture(scope="module", params=ARCHS)
def target(request):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    path = zoo.get(request.param, size="tiny")
    return TargetModel.from_pretrained(path, aux_layers=[i + 1 for i in ZLAB_IDS])


def random_dspark(target, kind="vanilla", anchor=False, seed=0, rank=16) -> DSparkDrafter:
    """A random DSpark drafter for `target`: a fresh DFlash backbone (B 5) and heads drawn with
    std 0.5, large enough to change the drafts."""
    torch.manual_seed(seed)
    base = DFlashDrafter.for_target(
        target, num_hidden_layers=2, block_size=5, target_layer_ids=ZLAB_IDS
    )
    b = base.spec.replace(variant="dspark", sample_from_anchor=anchor)
    d = from_dflash(
        base, DSparkSpec(backbone=b, markov_rank=rank, markov_head_type=kind), seed=seed
    )
    with torch.no_grad():
        for n, p in d.named_parameters():
            if n.startswith(("markov_head.", "confidence_head.")):
                p.normal_(0.0, 0.5)
    return d.eval()


@pytest.mark.parametrize("kind,anchor", [("vanilla", True), ("gated", False), ("rnn", True)])
@pytest.mark.slow
def test_random_dspark_decodes_exactly_greedy(target, kind, anchor):
    d = random_dspark(target, kind, anchor, seed=1)
    eos = target.tokenizer.eos_token_id
    for text in ("def main(", "x = ["):
        ids = target.tokenizer(text)["input_ids"]
        want = greedy_generate(target, ids, max_new_tokens=20, eos_token_id=eos).tokens
        got = speculative_generate(target, d, ids, max_new_tokens=20, eos_token_id=eos)
        assert got.tokens == want, (kind, anchor, text)
        n = 5 if anchor else 4  # B with sample_from_anchor, else B - 1
        assert all(c.drafted == n for c in got.stats.cycles[:-1])


def test_the_markov_head_chains_the_previous_draft(target):
    """With the base logits flat and the head mapping token t to t + 1, the block drafts
    first+1, first+2, ...: slot k is biased by the token drafted at slot k-1."""
    d = random_dspark(target, "vanilla", anchor=True, rank=target.vocab_size)
    v = target.vocab_size
    with torch.no_grad():
        d.target_io = (d.target_io[0], torch.zeros_like(d.target_io[1]))  # base logits 0
        d.markov_head.markov_w1.weight.copy_(torch.eye(v))
        d.markov_head.markov_w2.weight.copy_(torch.roll(torch.eye(v), 1, dims=0))  # t -> t+1
    rows = torch.randn(5, d.spec.hidden_size)
    assert d.propose(rows, 10) == [11, 12, 13, 14, 15]
    assert d.propose(rows, 10, min_confidence=1.0) == [11]  # stopped after the first slot


def test_the_batched_chain_drafts_as_propose(target):
    """`chain` (the pass bench times, C blocks at once) drafts what `propose` drafts for each
    block, for every head type."""
    for kind in ("vanilla", "gated", "rnn"):
        d = random_dspark(target, kind, anchor=True, seed=6)
        rows, first = torch.randn(3, 5, d.spec.hidden_size), torch.tensor([4, 17, 60])
        got = d.chain(rows, first).tolist()
        assert got == [d.propose(rows[i], int(first[i])) for i in range(3)], kind


@pytest.fixture(scope="module")
def k2_pair():
    """The tiny DeepSeek member and the shipped K2 DFlash drafter (its drafts are often
    accepted)."""
    from eagle3kit.model.loading import load_pair
    from eagle3kit.zoo.shipping import shipped

    return load_pair("dsv3-v1-tiny", str(shipped("k2-dflash-tiny")))


def _k2_dspark(base, anchor: bool, std: float):
    """A DSpark drafter warm-started from the K2 DFlash drafter `base`, a gated head of rank
    16 drawn with `std`."""
    b = base.spec.replace(variant="dspark", sample_from_anchor=anchor)
    d = from_dflash(base, DSparkSpec(backbone=b, markov_rank=16, markov_head_type="gated"))
    with torch.no_grad():
        for n, p in d.named_parameters():
            if n.startswith(("markov_head.", "confidence_head.")):
                p.normal_(0.0, std, generator=torch.Generator().manual_seed(11))
    return d.eval()


@pytest.mark.parametrize("anchor", [True, False])
@pytest.mark.slow
def test_offline_walk_replays_online_decoding(k2_pair, anchor):
    """On answers the target wrote itself (greedy), offline eval's walked cycles are the
    cycles DSpark decoding went through, draft for draft (both block conventions), with a
    Markov head that changes the drafts."""
    from eagle3kit.measure.evaluate import EvalData
    from eagle3kit.methods.dspark.measure import evaluate_offline

    tm, base = k2_pair
    d = _k2_dspark(base, anchor, 0.3)
    flat = _k2_dspark(base, anchor, 0.0)  # the same backbone, a head adding nothing
    k = d.spec.num_proposals
    samples, online, without = [], [], []
    for text in ("def main(", "x = [", "for i in range(", "import "):
        ids = tm.tokenizer(text)["input_ids"]
        g = speculative_generate(tm, d, ids, max_new_tokens=20)
        # the last cycle may be cut by max_new_tokens: the sample ends at its anchor
        cycles = [c.accepted for c in g.stats.cycles][:-1]
        online += cycles
        g0 = speculative_generate(tm, flat, ids, max_new_tokens=20)
        without += [c.accepted for c in g0.stats.cycles][:-1]
        full = torch.tensor(ids + g.tokens[: 1 + sum(a + 1 for a in cycles)])
        samples.append((full, torch.arange(len(full)) >= len(ids)))
    doc = evaluate_offline(tm, d, EvalData("test", samples, []), k)
    assert doc["method"] == "dspark" and doc["cycles"] == len(online)
    assert doc["tau_walk"] == pytest.approx(sum(a + 1 for a in online) / len(online))
    want = [sum(a >= i for a in online) / len(online) for i in range(1, k + 1)]
    assert doc["per_position_acceptance"] == pytest.approx(want)
    assert 0 < sum(online)  # drafts were accepted: the walk is checked past 1-token cycles
    assert online != without  # the head changed drafts


@pytest.mark.slow
def test_confidence_stops_blocks_early_and_stays_lossless(target):
    d = random_dspark(target, "vanilla", anchor=False, seed=2)
    ids = target.tokenizer("for i in range(")["input_ids"]
    eos = target.tokenizer.eos_token_id
    want = greedy_generate(target, ids, max_new_tokens=16, eos_token_id=eos).tokens
    full = speculative_generate(target, d, ids, max_new_tokens=16, eos_token_id=eos)
    cut = speculative_generate(
        target, d, ids, max_new_tokens=16, eos_token_id=eos, min_confidence=0.9
    )
    top = speculative_generate(target, d, ids, max_new_tokens=16, eos_token_id=eos, draft_topk=3)
    assert full.tokens == cut.tokens == top.tokens == want
    assert sum(c.drafted for c in cut.stats.cycles) < sum(c.drafted for c in full.stats.cycles)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.slow
def test_hand_made_files_decode_exactly_greedy(tmp_path, arch):
    """A DSpark file in each layout for each tiny member, through `generate` with default
    options (K = the block's proposals)."""
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    member = zoo.get(arch, size="tiny")
    tm = TargetModel.from_pretrained(member, aux_layers=[2, 4])
    d = random_dspark(tm, "vanilla", anchor=True, seed=3)
    tensors = {n: t.detach() for n, t in d.state_dict().items()}
    d.save_tensors(tmp_path / "s", tensors)
    convert_method(dspark_header(str(tmp_path / "s")), "specforge", str(tmp_path / "f"))
    for name in ("s", "f"):
        args = ("generate", "--target", member, "--drafter", tmp_path / name, "--prompt", "import ")
        r = run_cli(*args, "--max-new-tokens", "16", "--json")
        assert r.code == 0, r.err
        doc = json.loads(r.out)
        eos = tm.tokenizer.eos_token_id
        assert (
            doc["tokens"]
            == greedy_generate(tm, doc["prompt_ids"], max_new_tokens=16, eos_token_id=eos).tokens
        )
        assert doc["stats"]["depth"] == 5


@pytest.mark.slow
def test_eval_offline_and_online(tmp_path):
    """`eval` offline, and with `--online` (decoding, every output equal to plain greedy
    decoding), with and without sample_from_anchor."""
    from decode_helpers import chat_jsonl

    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    member = zoo.get("llama-v1", size="tiny")
    tm = TargetModel.from_pretrained(member, aux_layers=[2, 4])
    data = chat_jsonl(tmp_path / "c.jsonl", n=2)
    for name, anchor in (("b", False), ("a", True)):
        d = random_dspark(tm, anchor=anchor, seed=8)
        d.save_tensors(tmp_path / name, {n: t.detach() for n, t in d.state_dict().items()})
    base = ("eval", "--target", member, "--data", data, "--depth", "3", "--json")
    r = run_cli(*base, "--drafter", tmp_path / "b")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["method"] == "dspark" and doc["samples"] == 2 and doc["tau_walk"] >= 1
    r = run_cli(*base, "--drafter", tmp_path / "a", "--online", "--max-new-tokens", "12")
    assert r.code == 0, r.err
    doc = json.loads(r.out)  # `lossless`: every output equal to plain greedy decoding's
    assert (doc["mode"], doc["method"], doc["lossless"]) == ("online", "dspark", True)
    assert doc["offline"]["tau_walk"] >= 1


@pytest.mark.slow
def test_bench_costs_and_plan(tmp_path):
    """`bench --concurrency` times a DSpark drafter's pass (backbone + Markov chain) under its
    method at every level, a cycle's drafting is one such pass, and `plan --methods` prices
    it beside prompt lookup from that file."""
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    member = zoo.get("llama-v1", size="tiny")
    d = random_dspark(TargetModel.from_pretrained(member, aux_layers=[2, 4]), seed=7)
    d.save_tensors(tmp_path / "d", {n: t.detach() for n, t in d.state_dict().items()})
    args = ["--prompts", "1", "--repeats", "1", "--max-new-tokens", "8", "--depth", "4"]
    args += ["--concurrency", "1,2", "--json"]
    r = run_cli("bench", "--target", member, "--drafter", tmp_path / "d", *args)
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    levels = doc["costs"]["levels"]
    assert [set(lv["pass_ms"]) for lv in levels] == [{"dspark"}, {"dspark"}]
    assert all(lv["pass_ms"]["dspark"] > 0 for lv in levels)
    chain = next(m for m in doc["methods"] if m["name"] == "chain")
    assert chain["method"] == "dspark"
    assert levels[0]["pass_ms"]["dspark"] == pytest.approx(chain["draft_ms"], rel=1e-6)
    (tmp_path / "bench.json").write_text(r.out)
    f = tmp_path / "bench.json"
    r = run_cli("plan", "--methods", "dspark,ngram", "--costs", f, "--accept", f, "--json")
    assert r.code in (0, 1), r.err
    for lv in json.loads(r.out)["levels"]:
        assert "dspark" in {m["label"] for m in lv["methods"]}


# ------------------------------------------------------------------ training


def test_a_warm_start_keeps_the_dflash_backbone(target):
    """Every tensor of the DFlash drafter is the DSpark drafter's, byte for byte; only the
    heads are new (markov_w1 drawn as speculators draws it, std 0.01)."""
    torch.manual_seed(0)
    base = DFlashDrafter.for_target(
        target, num_hidden_layers=2, block_size=5, target_layer_ids=ZLAB_IDS
    )
    spec = DSparkSpec(backbone=base.spec.replace(variant="dspark"), markov_rank=16)
    d = from_dflash(base, spec, seed=3)
    ours, theirs = d.state_dict(), base.state_dict()
    assert set(ours) - set(theirs) == {
        "markov_head.markov_w1.weight",
        "markov_head.markov_w2.weight",
        "confidence_head.proj.weight",
        "confidence_head.proj.bias",
    }
    assert all(torch.equal(ours[n], t) for n, t in theirs.items())
    assert 0.005 < float(ours["markov_head.markov_w1.weight"].std()) < 0.02


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["dsv3-v1", "llama-v1"])
def test_train_from_a_dflash_drafter(tmp_path, arch):
    """`train --method dspark`: on the DeepSeek member `--init-from` the shipped K2 DFlash
    drafter (the backbone is its, the heads fresh), on the Llama member from scratch; RUN/best
    is speculators' dspark layout and decodes exactly greedy."""
    from test_train_helpers import tiny_data, tiny_target

    from eagle3kit.zoo.shipping import shipped

    kd = shipped("k2-dflash-tiny") if arch == "dsv3-v1" else None
    args = ["train", "--method", "dspark", "--target", str(tiny_target(arch))]
    args += ["--data", str(tiny_data(arch)), "-o", str(tmp_path / "run"), "--batch-size", "2"]
    args += ["--block-size", "4", "--anchors", "4", "--heldout", "4", "--eval-samples", "4"]
    args += ["--init-from", str(kd)] if kd else []
    r = run_cli(*args, "--steps", "3", "--threads", "1", "--json")
    assert r.code == 0, r.err
    s = json.loads(r.out)
    assert (s["method"], s["init_from"]) == ("dspark", str(kd) if kd else None)
    best = tmp_path / "run" / "best"
    head = dspark_header(str(best))
    assert (head.layout, head.spec.markov_rank, head.spec.sample_from_anchor) == (
        "speculators",
        256,
        False,
    )
    m0 = load_file(str(tmp_path / "run" / "state" / "model.safetensors"))
    assert "markov_head.markov_w1.weight" in m0 and "confidence_head.proj.weight" in m0
    gen = ("generate", "--target", f"{arch}-tiny", "--drafter", best, "--prompt", "def f(")
    r = run_cli(*gen, "--max-new-tokens", "16", "--json")
    assert r.code == 0, r.err
    from eagle3kit.model.loading import load_target

    tm = load_target(f"{arch}-tiny")
    doc = json.loads(r.out)
    eos = tm.tokenizer.eos_token_id
    assert (
        doc["tokens"]
        == greedy_generate(tm, doc["prompt_ids"], max_new_tokens=16, eos_token_id=eos).tokens
    )


# ------------------------------------------------------------------ against the peer


def _peer_python() -> str | None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_train import peer_python

    return peer_python()[0]


CASES = [
    ("speculators", "vanilla", True),
    ("specforge", "gated", False),
    ("speculators", "rnn", False),
]


def _peer_case(root: Path, layout: str, kind: str, anchor: bool) -> dict:
    """A hand-made file in `layout` (SpecForge's converted to speculators' for the peer) and
    the inputs of one training forward: what the peer reads and what ours is run on."""
    from safetensors.torch import save_file

    from eagle3kit import zoo
    from eagle3kit.model.loading import load_pair
    from eagle3kit.model.target import TargetModel

    member = zoo.get("llama-v1", size="tiny")
    tm = TargetModel.from_pretrained(member, aux_layers=[2, 4])
    d = random_dspark(tm, kind, anchor, seed=4)
    d.dspark = d.dspark.replace(layout=layout)
    d.save_tensors(root / "ours", {n: t.detach() for n, t in d.state_dict().items()})
    peer_dir = root / "ours"
    if layout == "specforge":
        convert_method(dspark_header(str(root / "ours")), "speculators", str(root / "sp"))
        peer_dir = root / "sp"
    _, ours = load_pair(str(member), str(root / "ours"))
    g = torch.Generator().manual_seed(5)
    t = 30
    ids = torch.randint(1, 511, (1, t), generator=g)
    aux = torch.randn(1, t, 2 * 32, generator=g)
    mask = torch.zeros(1, t, dtype=torch.long)
    mask[0, [3, 11, 19]] = 1
    emb, head = tm.embed_tokens.weight.detach(), tm.model.get_output_embeddings().weight.detach()
    x = {
        "input_ids": ids,
        "hidden_states": aux,
        "loss_mask": mask,
        "embed_tokens": emb,
        "lm_head": head,
    }
    save_file({k: v.contiguous() for k, v in x.items()}, str(root / "in.safetensors"))
    triple = [str(peer_dir), str(root / "in.safetensors"), str(root / "out.safetensors")]
    return {"ours": ours, "ids": ids, "aux": aux, "anchor": anchor, "triple": triple}


@pytest.fixture(scope="module")
def peer_dspark(tmp_path_factory):
    """Every case's file through speculators 0.9.0's DSparkDraftModel, in its own venv, in
    one process (its imports paid once): {case: (our side, the peer's outputs)}."""
    from safetensors.torch import load_file as load_pt

    python = _peer_python()
    if python is None:
        pytest.skip("speculators' venv is not here (benchmarks/peers/setup_speculators.sh)")
    root = tmp_path_factory.mktemp("peer-dspark")
    cases = {}
    for c in CASES:
        (where := root / "-".join(map(str, c))).mkdir()
        cases[c] = _peer_case(where, *c)
    cmd = [python, str(ROOT / "tests" / "peer_dspark_forward.py")]
    cmd += [a for case in cases.values() for a in case["triple"]]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return {c: (case, load_pt(case["triple"][2])) for c, case in cases.items()}


@pytest.mark.slow
@pytest.mark.parametrize("layout,kind,anchor", CASES)
def test_logits_equal_speculators_dspark(peer_dspark, layout, kind, anchor):
    """A hand-made file in each layout (SpecForge's converted to speculators' byte for byte for
    the peer): speculators 0.9.0's DSparkDraftModel, in its own venv, gives the backbone's,
    the Markov-corrected and the confidence logits of ours within 1e-4 (float32)."""
    case, peer = peer_dspark[(layout, kind, anchor)]
    ours, ids, aux = case["ours"], case["ids"], case["aux"]
    b = ours.spec.block_size
    worst = {"base": 0.0, "logits": 0.0, "conf": 0.0}
    with torch.no_grad():
        for j, a in enumerate((3, 11, 19)):
            block = torch.full((1, b), ours.spec.mask_token_id)
            block[0, 0] = ids[0, a]
            hidden = ours(block, aux[:, :a], torch.arange(a + b)[None])[0]
            prev = (
                ids[0, a : a + b]
                if anchor
                else torch.cat([ids[0, a : a + 1], ids[0, a : a + b - 1]])
            )
            logits, conf = ours.head_logits(hidden, prev)
            rows = slice(j * b, (j + 1) * b)
            for key, mine, theirs in (
                ("base", ours.draft_logits(hidden).float(), peer["base_logits"][0][rows]),
                ("logits", logits, peer["logits"][0][rows]),
                ("conf", conf.float(), peer["confidence_logits"][0][rows]),
            ):
                worst[key] = max(worst[key], float((mine - theirs).abs().max()))
    assert max(worst.values()) <= 1e-4, worst
    assert float((peer["logits"] - peer["base_logits"]).abs().max()) > 1e-2  # the head acts
