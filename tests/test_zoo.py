"""The built-in zoo: names, cache, determinism, atomic builds, the CLI (tiny members)."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import Counter

import pytest

from eagle3kit import zoo
from eagle3kit.core.errors import Eagle3Error


def _sha(p) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_names_and_paths(monkeypatch, tmp_path):
    """Members live in the package (zoo/shipped/<label>); builds of parents in the cache."""
    from eagle3kit.zoo.shipping import ROOT

    assert zoo.names() == ["llama-v1", "llama-v2", "dsv3-v1", "dsv3-v2"]
    monkeypatch.setenv("EAGLE3KIT_HOME", str(tmp_path))
    assert zoo.path("dsv3-v2") == ROOT / "dsv3-v2"
    assert zoo.path("dsv3-v2", size="tiny") == ROOT / "dsv3-v2-tiny"
    assert zoo.cache_path("dsv3-v2", size="tiny") == tmp_path / "zoo" / "dsv3-v2-tiny"
    assert zoo.parse_label("dsv3-v2-tiny") == ("dsv3-v2", "tiny")
    assert zoo.parse_label("llama-v1") == ("llama-v1", "full")
    assert zoo.parse_label("llama-v3-tiny") is None and zoo.parse_label("x/dsv3-v2") is None


def test_unknown_name_and_size(cli, tmp_path):
    r = cli("zoo", "build", "kimi-k3", "-o", tmp_path / "k3")
    assert r.code == 2
    lines = r.err.strip().splitlines()
    assert len(lines) == 1
    assert "kimi-k3" in lines[0] and "llama-v1, llama-v2, dsv3-v1, dsv3-v2" in lines[0]
    assert not (tmp_path / "k3").exists()
    r = cli("zoo", "list", "--size", "huge")
    assert r.code == 2 and "full, tiny" in r.err
    with pytest.raises(Eagle3Error):
        zoo.get("nope")


def test_shipped_tiny_v2_shares_its_v1_tokenizer_and_records_its_build():
    p2 = zoo.get("llama-v2", size="tiny")
    p1 = zoo.get("llama-v1", size="tiny")
    assert _sha(p1 / "tokenizer.json") == _sha(p2 / "tokenizer.json")
    assert _sha(p1 / "model.safetensors") != _sha(p2 / "model.safetensors")
    m = zoo.manifest("llama-v2", size="tiny")
    assert m["parent"] == "llama-v1" and m["data"]["slice"] == "test"
    for key in ("seed", "recipe", "metrics", "python", "build_seconds", "params", "commit"):
        assert key in m
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", m["commit"])
    met = m["metrics"]
    assert {"heldout_loss", "unigram_loss", "distinct4_mean"} <= set(met)
    stages = m["stage_seconds"]  # every stage timed, together no longer than the whole build
    want = {"tokenizer", "training", "unlikelihood against greedy loops", "evaluating"}
    assert want <= set(stages)
    assert 0 < sum(stages.values()) <= m["build_seconds"] + 0.1 * len(stages)


def test_hf_dir_and_chat_template():
    from transformers import AutoConfig, AutoTokenizer

    from eagle3kit.zoo.corpus import render_chat

    p = zoo.get("dsv3-v1", size="tiny")
    cfg = AutoConfig.from_pretrained(p)
    assert cfg.model_type == "deepseek_v3" and cfg.num_hidden_layers == 8
    assert cfg.q_lora_rank and cfg.kv_lora_rank and cfg.n_routed_experts > 1
    assert cfg.n_shared_experts >= 1 and cfg.first_k_dense_replace < cfg.num_hidden_layers
    tok = AutoTokenizer.from_pretrained(p)
    msgs = [
        {"role": "user", "content": "Write `f`."},
        {"role": "assistant", "content": "def f(): pass"},
    ]
    assert tok.apply_chat_template(msgs, tokenize=False) == render_chat(msgs)
    prompt = tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|assistant|>\n")
    enc = tok.apply_chat_template(msgs, return_dict=True, return_assistant_tokens_mask=True)
    mask = enc["assistant_masks"]
    answer = tok.decode([t for t, k in zip(enc["input_ids"], mask, strict=True) if k])
    assert answer == "def f(): pass</s>"
    assert tok.bos_token == "<s>" and tok.eos_token == "</s>" and tok.pad_token == "<pad>"


@pytest.mark.slow  # ~10 s: builds a member
def test_build_o_reproduces_a_member_and_verify_compares_it(cli, monkeypatch, tmp_path):
    """`zoo build llama-v1 --size tiny -o DIR` writes a float32 build with its zoo.json;
    `zoo verify DIR` compares it with the shipped llama-v1-tiny. On the machine kind that
    built the shipped member the weights are the same bytes and every figure is equal."""
    monkeypatch.setenv("EAGLE3KIT_HOME", str(tmp_path / "home"))
    out = tmp_path / "v1"
    r = cli("zoo", "build", "llama-v1", "--size", "tiny", "-o", out, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["path"] == str(out) and doc["manifest"]["member"] == "llama-v1"
    assert doc["manifest"]["recipe_digest"] == zoo.recipe_digest("llama-v1", "tiny")
    assert not (tmp_path / "home" / "zoo").exists()  # a v1 needs no parent in the cache
    r = cli("zoo", "build", "llama-v1", "--size", "tiny", "-o", out, "--json")  # already there
    assert r.code == 0 and json.loads(r.out)["seconds"] < 3
    r = cli("zoo", "verify", out, "--json")
    v = json.loads(r.out)
    assert v["member"] == "llama-v1-tiny" and v["recipe_same"] is True
    assert {f["figure"] for f in v["figures"]} >= {"heldout_loss", "chat.pooled_distinct4"}
    if v["weights_identical"]:  # same CPU kind and Python as the shipped build
        assert r.code == 0 and v["ok"] is True
        assert all(f["difference"] == 0 for f in v["figures"])
    else:  # another CPU rounds differently: the bytes differ, and verify says why
        assert "CPU" in v["bytes_note"] and r.code == (0 if v["ok"] else 1)
    table = cli("zoo", "verify", out).out
    assert "heldout_loss: shipped" in table and "tolerance" in table


def _fake_rebuild(tmp_path, **metrics):
    """A copy of the shipped dsv3-v1-tiny's zoo.json (no weights) with figures changed."""
    d = tmp_path / "rebuild"
    d.mkdir(parents=True)
    doc = json.loads((zoo.get("dsv3-v1", size="tiny") / "zoo.json").read_text())
    del doc["shipped"]
    for key, value in metrics.items():
        where = doc["metrics"]
        *parents, leaf = key.split(".")
        for p in parents:
            where = where[p]
        where[leaf] = value
    (d / "zoo.json").write_text(json.dumps(doc))
    return d, doc


def test_verify_passes_within_tolerance_and_fails_beyond(cli, tmp_path):
    """Figures stated by hand: held-out loss tolerance 0.2 nats, names_function 0.1."""
    base = json.loads((zoo.get("dsv3-v1", size="tiny") / "zoo.json").read_text())["metrics"]
    loss = base["heldout_loss"]
    d, _ = _fake_rebuild(tmp_path, heldout_loss=loss + 0.15)
    r = cli("zoo", "verify", d, "--json")
    assert r.code == 0, r.out
    row = next(f for f in json.loads(r.out)["figures"] if f["figure"] == "heldout_loss")
    assert row["difference"] == pytest.approx(0.15, abs=1e-4) and row["ok"] is True
    assert json.loads(r.out)["weights_identical"] is None  # no weights to hash

    d2, _ = _fake_rebuild(tmp_path / "b", heldout_loss=loss + 0.3)
    r = cli("zoo", "verify", d2, "--json")
    assert r.code == 1 and json.loads(r.out)["ok"] is False
    names = base["chat"]["names_function"]
    d3, _ = _fake_rebuild(tmp_path / "c", **{"chat.names_function": min(1.0, names + 0.5)})
    assert cli("zoo", "verify", d3).code == 1
    r = cli("zoo", "verify", d3)
    assert "chat.names_function" in r.out and "OUT OF TOLERANCE" in r.out


def test_verify_fails_on_another_recipe_and_refuses_a_non_build(cli, tmp_path):
    d, doc = _fake_rebuild(tmp_path)
    doc["recipe"]["steps"] += 1
    (d / "zoo.json").write_text(json.dumps(doc))
    r = cli("zoo", "verify", d, "--json")
    assert r.code == 1 and json.loads(r.out)["recipe_same"] is False
    (tmp_path / "empty").mkdir()
    r = cli("zoo", "verify", tmp_path / "empty")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "zoo.json" in r.err


def test_build_into_a_folder_holding_other_files_is_refused(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(Eagle3Error, match="absent or empty folder"):
        zoo.build("llama-v1", size="tiny", out=mine)
    assert (mine / "notes.txt").read_text() == "keep me"
    # a v2's parent must be a float32 build of its v1, not the shipped bf16 one
    with pytest.raises(Eagle3Error, match="float32 build"):
        zoo.build(
            "llama-v2", size="tiny", out=tmp_path / "v2", parent=zoo.get("llama-v1", size="tiny")
        )
    with pytest.raises(Eagle3Error, match="as the parent"):
        zoo.build("llama-v2", size="tiny", out=tmp_path / "v2", parent=mine)
    assert not (tmp_path / "v2").exists()


def test_interrupted_build_leaves_no_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("EAGLE3KIT_HOME", str(tmp_path))
    from eagle3kit.zoo import builder as _build

    def boom(m, size, recipe, out, parent_dir, progress, on_phase=None, strict=False):
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(_build, "build_into", boom)
    with pytest.raises(KeyboardInterrupt):
        zoo.build("llama-v1", size="tiny", progress=False)
    assert list((tmp_path / "zoo").iterdir()) == [tmp_path / "zoo" / ".llama-v1-tiny.lock"]
    # A build killed by a signal leaves its temp dir; the next build of that member removes it.
    stale = tmp_path / "zoo" / ".tmp-llama-v1-tiny-99999"
    stale.mkdir()
    with pytest.raises(KeyboardInterrupt):
        zoo.build("llama-v1", size="tiny", progress=False)
    assert not stale.exists()
    with pytest.raises(KeyboardInterrupt):  # into -o DIR: nothing left there either
        zoo.build("llama-v1", size="tiny", out=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_distinct_ngram_ratio():
    from eagle3kit.zoo.training import distinct_ngram_ratio

    assert distinct_ngram_ratio(list(range(10))) == 1.0
    assert distinct_ngram_ratio([1, 2] * 20) == 2 / 37
    assert distinct_ngram_ratio([5, 5, 5]) == 1.0  # no 4-gram, so nothing repeats


def test_repeat_mask_marks_repeated_4grams_after_the_prompt():
    import torch

    from eagle3kit.zoo.training import repeat_mask

    # prompt 9 9 | 1 2 3 4 5 1 2 3 4 6: the second "1 2 3 4" repeats the first
    seq = torch.tensor([[9, 9, 1, 2, 3, 4, 5, 1, 2, 3, 4, 6]])
    want = [False] * 7 + [True] * 4 + [False]
    assert repeat_mask(seq, start=2).tolist() == [want]
    # 4-grams of the prompt are not candidates: only the model's own continuation is judged
    seq = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4, 7]])
    assert not repeat_mask(seq, start=4).any()
    assert repeat_mask(seq, start=0)[0, 4:8].all()


def _markov_stream(n: int):
    """Text that does not loop but whose greedy decoding must: 32 states whose likeliest
    successor (p = 0.5) closes a 4-cycle; two random others share the remaining 0.5."""
    import torch

    g = torch.Generator().manual_seed(0)
    first = torch.tensor([(s // 4) * 4 + (s + 1) % 4 for s in range(32)])
    second, third = torch.randperm(32, generator=g), torch.randperm(32, generator=g)
    out, u = [0], torch.rand(n, generator=g).tolist()
    for i in range(n - 1):
        s = out[-1]
        out.append(int(first[s] if u[i] < 0.5 else second[s] if u[i] < 0.8 else third[s]))
    return torch.tensor(out) + 3  # ids 3..34; 0 pad, 1 eos


def _fit(stream):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from eagle3kit.zoo.training import sample_batch

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(150):
        x = sample_batch((stream,), [1.0], 8, 32, g)
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()
    return model.eval()


@pytest.mark.slow  # ~10 s: trains a small model
def test_unloop_breaks_greedy_loops(monkeypatch):
    """Sequence-level unlikelihood raises the distinct-4 ratio of the model's own greedy text;
    the same steps with no repeat candidates (likelihood only) do not."""
    import copy

    import torch

    from eagle3kit.zoo import training as tr

    stream = _markov_stream(20000)
    prompts = [stream[i : i + 4].tolist() for i in (100, 2000, 5000, 9000)]
    rec = tr.Recipe(
        vocab_size=64,
        file_limit=None,
        steps=0,
        batch=8,
        seq_len=32,
        lr=1e-2,
        warmup=1,
        chat_fraction=0.0,
        unloop_steps=40,
        unloop_lr=1e-2,
        unloop_batch=8,
        unloop_prefix=4,
        unloop_gen=40,
    )

    def d4(model) -> float:
        outs = tr.greedy(model, prompts, 40, eos_id=1, pad_id=0, stop_at_eos=False)
        return sum(map(tr.distinct_ngram_ratio, outs)) / len(outs)

    model = _fit(stream)
    control = copy.deepcopy(model)  # the same fit, for the control run
    before = d4(model)
    assert before < 0.4  # greedy follows the 4-cycles
    tr.unloop(model, (stream, stream), rec, seed=0, eos_id=1, pad_id=0)
    after = d4(model)

    monkeypatch.setattr(tr, "repeat_mask", lambda seq, start, n=4: torch.zeros_like(seq).bool())
    tr.unloop(control, (stream, stream), rec, seed=0, eos_id=1, pad_id=0)
    assert after > before + 0.15
    assert after > d4(control) + 0.2


def test_unloop_ends_with_the_moving_average_of_its_steps():
    """With ``unloop_ema`` the model ends with the EMA of the weights after each step (seeded
    by the weights before the phase), not with the last step's weights."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from transformers import LlamaConfig, LlamaForCausalLM

    from eagle3kit.zoo import training as tr

    stream = _markov_stream(2000)
    rec = tr.Recipe(
        vocab_size=64,
        file_limit=None,
        steps=0,
        batch=4,
        seq_len=16,
        lr=1e-2,
        warmup=1,
        chat_fraction=0.0,
        unloop_steps=3,
        unloop_lr=1e-2,
        unloop_batch=4,
        unloop_prefix=4,
        unloop_gen=12,
        unloop_ema=0.6,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
        )
    )
    seen = [[p.detach().clone() for p in model.parameters()]]  # before, then after each step
    hook = register_optimizer_step_post_hook(
        lambda opt, args, kwargs: seen.append([p.detach().clone() for p in model.parameters()])
    )
    try:
        tr.unloop(model, (stream, stream), rec, seed=0, eos_id=1, pad_id=0)
    finally:
        hook.remove()
    assert len(seen) == 1 + rec.unloop_steps
    want = seen[0]
    for step in seen[1:]:
        want = [0.6 * w + 0.4 * s for w, s in zip(want, step, strict=True)]
    got = list(model.parameters())
    assert all(torch.allclose(g, w, atol=1e-6) for g, w in zip(got, want, strict=True))
    assert not all(torch.equal(g, s) for g, s in zip(got, seen[-1], strict=True))


def test_inspect_zoo_target(cli):
    """`eagle3kit inspect` on a zoo target shows layers, hidden size, vocab, default aux layers."""
    import json

    p = zoo.get("dsv3-v1", size="tiny")
    r = cli("inspect", p, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    cfg = json.loads((p / "config.json").read_text())
    L = cfg["num_hidden_layers"]
    assert doc["format"] == "target" and doc["has_tokenizer"] is True
    assert doc["target"]["num_layers"] == L and doc["target"]["hidden_size"] == cfg["hidden_size"]
    assert doc["target"]["vocab_size"] == cfg["vocab_size"]
    assert doc["target"]["default_aux_layers"] == [2, L // 2, L - 3]
    r = cli("inspect", p)
    assert f"layers {L}" in r.out and "default EAGLE-3 aux layers" in r.out


def _phrasing(ask: str, name: str, module: str) -> str:
    """The template ``ask`` was written from: its first paragraph with the names put back."""
    return ask.split("\n\n")[0].replace(f"`{module}`", "`{m}`").replace(f" {name}()", " {f}()")


def test_held_out_requests_vary_phrasing_and_names():
    from eagle3kit.zoo import corpus

    held = corpus.files("lib", held_out=True)
    reqs = corpus.held_out_requests(held, 32)
    assert len(reqs) == 32
    names = [r["name"] for r in reqs]
    assert len(set(names)) == 32 and not any(n.startswith("__") for n in names)
    asks = [r["messages"][0]["content"] for r in reqs]
    used = {_phrasing(a, r["name"], r["module"]) for r, a in zip(reqs, asks, strict=True)}
    assert used <= set(corpus.PHRASINGS) and len(used) >= 3  # at least three phrasings
    assert any("\n\n" in a for a in asks) and any("\n\n" not in a for a in asks)  # docstrings
    held_paths = {f.rel for f in held}
    assert all(r["module"].replace(".", "/") in " ".join(held_paths) for r in reqs)


def test_varied_chat_samples_keep_the_function_and_vary_the_request():
    from eagle3kit.zoo import corpus

    src = corpus.files("lib", limit=20)
    plain = corpus.chat_samples(src)
    varied = corpus.chat_samples(src, varied=True)
    assert len(plain) == len(varied) > 20
    answers = [c["messages"][1]["content"] for c in plain]
    assert answers == [c["messages"][1]["content"] for c in varied]  # same code
    assert all(c["messages"][0]["content"].startswith("Write the Python function") for c in plain)
    fns = corpus.functions(src)
    pairs = zip(varied, fns, strict=True)
    used = {_phrasing(c["messages"][0]["content"], f.name, f.module) for c, f in pairs}
    assert used == set(corpus.PHRASINGS)
    assert varied == corpus.chat_samples(src, varied=True)  # deterministic


def test_chat_figures_by_hand():
    from eagle3kit.zoo.builder import chat_figures, names_function

    assert names_function("def f(x):\n    return x", "f")
    assert names_function("async def f (x):", "f")
    assert not names_function("def ff(x):", "f") and not names_function("x = 1\ndef f(", "f")
    answers = ["def f(a):\n    pass", "def g(b):\n    pass", "def test(self):\n    pass"]
    ids = [[1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [1, 2, 3, 4, 5]]
    fig = chat_figures(answers, ["f", "g", "h"], ids)
    assert fig["names_function"] == round(2 / 3, 4) and fig["distinct_openings"] == 1.0
    assert fig["distinct_answers"] == 2 and fig["pooled_distinct4"] == round(3 / 6, 4)


def test_chat_stream_marks_the_first_answer_line_and_windows_align():
    import tokenizers
    import torch

    from eagle3kit.zoo import builder, corpus
    from eagle3kit.zoo import training as tr

    tok = tokenizers.Tokenizer.from_file(str(zoo.get("llama-v1", size="tiny") / "tokenizer.json"))
    convs = [
        corpus.conversation("Write `alpha`.", "def alpha(x):\n    return x + 1"),
        corpus.conversation("Implement `beta`.", "def beta():\n    pass"),
    ]
    ids, starts, first = builder._chat_stream(tok, convs)
    assert starts.tolist()[0] == 0 and len(ids) == len(first)
    marked = tok.decode([int(i) for i, f in zip(ids, first, strict=True) if f]).replace(" ", "")
    assert marked == "defalpha(x):defbeta():"
    gen = torch.Generator().manual_seed(0)
    rows = 64
    chat = ([None, starts], [None, first])
    xy, w, _ = tr.sample_windows([ids, ids], [0.0, 1.0], rows, 8, gen, *chat)
    okstarts = [s for s in starts.tolist() if s < len(ids) - 9]
    assert all(int(r[0]) == int(ids[okstarts[0]]) for r in xy)  # every window opens a sample
    assert torch.equal(w, torch.stack([first[s + 1 : s + 9] for s in okstarts[:1]] * rows))


@pytest.mark.slow  # ~10 s: builds a member
def test_a_build_below_the_chat_bar_is_recorded_and_refused_when_strict(tmp_path):
    """A tiny member's answers do not name the function: zoo.json records the shortfall and
    a warning names it; with strict the build raises Eagle3Error and nothing is written."""
    out = tmp_path / "v1"
    with pytest.raises(Eagle3Error, match="names_function"):
        zoo.build("llama-v1", size="tiny", out=out, strict=True)
    assert not out.exists()
    zoo.build("llama-v1", size="tiny", out=out)
    chat = json.loads((out / "zoo.json").read_text())["metrics"]["chat"]
    assert chat["names_function"] < 0.8
    assert any(b.startswith("names_function") for b in chat["bar"]["below"])
    assert "llama-v1-tiny" in zoo.chat_warning("llama-v1", size="tiny")  # the shipped one too
    with pytest.raises(Eagle3Error, match="without --strict"):  # strict on an earlier build
        zoo.build("llama-v1", size="tiny", out=out, strict=True)
    assert (out / "zoo.json").is_file()  # nothing removed
    from conftest import run_cli

    r = run_cli("zoo", "build", "llama-v1", "--size", "tiny", "-o", out, "--json")
    assert r.code == 0 and "names_function" in json.loads(r.out)["warning"]
    r = run_cli("zoo", "build", "llama-v1", "--size", "tiny", "-o", out, "--strict")
    assert r.code == 2 and "names_function" in r.err and len(r.err.strip().splitlines()) == 1


def test_signed_requests_carry_the_signature_the_answer_opens_with():
    from eagle3kit.zoo import corpus

    held = corpus.files("lib", held_out=True)
    plain = corpus.held_out_requests(held, 32)
    signed = corpus.held_out_requests(held, 32, signed=True)
    assert [r["name"] for r in plain] == [r["name"] for r in signed]  # the same functions
    heads = set()
    for r in signed:
        ask = r["messages"][0]["content"]
        head, sig = ask.split("\n\n")[:2]
        assert re.match(rf"(async )?def {re.escape(r['name'])}\(", sig), ask
        heads.add(head.replace(f"`{r['module']}`", "`{m}`").replace(f" {r['name']}()", " {f}()"))
    assert heads == {p.split("\n\n")[0] for p in corpus.SIGNED_PHRASINGS}
    src = corpus.files("lib", limit=20)
    for conv in corpus.chat_samples(src, varied=True, signed=True):
        ask, answer = (m["content"] for m in conv["messages"])
        assert corpus.signature(answer) in ask  # the answer's def line(s) are in the request
    assert corpus.signature("def f(a,\n      b):\n    return a") == "def f(a,\n      b):"
    assert corpus.signature("def f(x): return x  # one line") == "def f(x): return x  # one line"


def test_signed_requests_with_the_docstring_show_it_as_the_answer_opens():
    """A signed request that includes the docstring shows the function's opening lines
    through the docstring, as source: the answer opens with exactly those lines."""
    from eagle3kit.zoo import corpus

    src = corpus.files("lib", limit=20)
    shown = 0
    for conv in corpus.chat_samples(src, varied=True, signed=True):
        ask, answer = (m["content"] for m in conv["messages"])
        code = ask.split("\n\n", 1)[1]
        if '"""' in code or "'''" in code:
            assert answer.startswith(code), ask  # the request's code is the answer's head
            assert len(code.split("\n")) <= corpus.HEAD_LINES
            shown += 1
    assert shown >= 50
    # a long docstring stays out; the prose first paragraph follows the signature instead
    text = 'def f(x):\n    """Doc.\n\n' + "    more\n" * 20 + '    """\n    return x\n'
    (fn,) = corpus.functions([corpus.SourceFile("m.py", text)], min_chars=1)
    assert fn.head == ""
    assert corpus.request(fn, 0, True, signed=True).endswith("def f(x):\n\nDoc.")
    (fn,) = corpus.functions([corpus.SourceFile("m.py", 'def g():\n    """One."""\n')], min_chars=1)
    assert fn.head == 'def g():\n    """One."""'
    assert corpus.request(fn, 0, False, signed=True).endswith("\n\ndef g():")  # no docstring


def test_prompts_follow_the_zoo_members_request_style(tmp_path):
    """bench's default prompts and probe's built-in batch carry the signature exactly when
    the target's zoo.json says it was trained on signed requests."""
    import json
    import shutil

    from transformers import AutoTokenizer

    from eagle3kit import zoo
    from eagle3kit.measure.bench import default_prompts

    src = zoo.get("dsv3-v1", size="tiny")
    for signed in (False, True):
        d = tmp_path / f"signed-{signed}"
        shutil.copytree(src, d)
        doc = json.loads((d / "zoo.json").read_text())
        doc["recipe"]["chat_signature"] = signed
        (d / "zoo.json").write_text(json.dumps(doc))
        assert zoo.signed_requests(d) is signed
        tok = AutoTokenizer.from_pretrained(str(d))
        text = [tok.decode(p) for p in default_prompts(tok, 4)]
        assert all(bool(re.search(r"\n(async )?def ", t)) is signed for t in text), text
    assert zoo.signed_requests(tmp_path / "nothing") is False
    assert zoo.signed_requests(None) is False


def test_the_chat_bar_warning_says_which_failure_it_is():
    """Canned answers (names or openings below the bar) and repeats (only pooled distinct-4
    below it) are different failures with different effects on a τ; the warning says which."""
    from eagle3kit.zoo.builder import chat_bar_warning

    fig = {"requests": 32, "names_function": 0.0, "distinct_openings": 0.2, "pooled_distinct4": 0.2}
    canned = chat_bar_warning("m", fig)
    assert "do not depend on the request" in canned and "names_function 0.00 < 0.8" in canned
    loops = chat_bar_warning("m", {**fig, "names_function": 0.97, "distinct_openings": 1.0})
    assert "answer the request but repeat" in loops and "names_function" not in loops
    assert "pooled_distinct4 0.20 < 0.6" in loops
    ok = {**fig, "names_function": 0.9, "distinct_openings": 0.9, "pooled_distinct4": 0.7}
    assert chat_bar_warning("m", ok) is None


def test_zoo_list_shows_every_shipped_member_with_its_size_hash_and_figures(cli):
    """`zoo list` reads the package: every shipped member available (no build), its size,
    its weights' sha256 as zoo.json lists it, its figures; an unshipped one says how to build
    it. Nothing is built: the cache stays empty."""
    from eagle3kit.zoo.shipping import sha256_file

    r = cli("zoo", "list", "--json")
    assert r.code == 0, r.err
    rows = {(m["name"], m["size"]): m for m in json.loads(r.out)["members"]}
    assert len(rows) == 8  # four members at two sizes
    for name in zoo.names():
        row = rows[(name, "tiny")]
        d = zoo.get(name, size="tiny")
        assert row["shipped"] and row["recipe_current"], name
        assert row["sha256"] == sha256_file(d / "model.safetensors")
        on_disk = sum(p.stat().st_size for p in d.iterdir() if p.name != "zoo.json")
        assert row["bytes"] == on_disk
    table = cli("zoo", "list", "--size", "tiny").out
    v1 = next(line for line in table.splitlines() if "llama-v1-tiny" in line)
    assert rows[("llama-v1", "tiny")]["sha256"][:12] in v1 and "yes" in v1
    assert "min to build" not in table and not (zoo.home() / "zoo").exists()
    for name in zoo.names():  # full members: shipped, or a line saying how to build them
        full = rows[(name, "full")]
        assert full["shipped"] or f"zoo build {name}" in cli("zoo", "list", "--size", "full").out


def test_shipped_members_are_the_code_recipes_output():
    """Each shipped member's zoo.json carries the recipe in code (digest and fields): a recipe
    change without shipping new members fails here. Members and the K2 drafter pass their
    sha256 check."""
    from eagle3kit.zoo.members import same_recipe
    from eagle3kit.zoo.shipping import ROOT

    for name in zoo.names():
        for size in zoo.SIZES:
            doc = zoo.manifest(name, size=size)
            if doc is None:
                assert size == "full", f"{name}-{size} must ship: the tests run on it"
                continue
            assert doc["recipe_digest"] == zoo.recipe_digest(name, size), (name, size)
            assert same_recipe(doc["recipe"], zoo.recipe(name, size)), (name, size)
            assert not same_recipe({**doc["recipe"], "steps": -1}, zoo.recipe(name, size))
            assert doc["shipped"]["dtype"] == {"full": "bfloat16", "tiny": "float32"}[size]
    assert (ROOT / "k2-drafter-tiny" / "zoo.json").is_file()


def _template(ask: str, name: str, module: str) -> str:
    """The template of a request in any phrasing table: its first paragraph, names put back."""
    first = ask.split("\n\n")[0].replace(f"{module}.{name}", "{m}.{f}")
    return re.sub(rf"(?<![\w.]){re.escape(name)}(?!\w)", "{f}", first).replace(module, "{m}")


@pytest.mark.slow
def test_unsigned_share_trains_user_phrasings_never_the_held_out_ones():
    from eagle3kit.zoo import corpus

    src = corpus.files("lib", limit=20)
    fns = corpus.functions(src)
    mixed = corpus.chat_samples(src, varied=True, signed=True, unsigned=0.5)
    signed = corpus.chat_samples(src, varied=True, signed=True)
    assert [c["messages"][1] for c in mixed] == [c["messages"][1] for c in signed]  # same code
    tables = {"user": set(corpus.USER_PHRASINGS), "held": set(corpus.HELD_OUT_PHRASINGS)}
    assert not tables["user"] & tables["held"]
    used = [
        _template(c["messages"][0]["content"], f.name, f.module)
        for c, f in zip(mixed, fns, strict=True)
    ]
    n_user = sum(u in tables["user"] for u in used)
    assert 0.35 < n_user / len(used) < 0.65  # about the share asked for
    assert len({u for u in used if u in tables["user"]}) == len(corpus.USER_PHRASINGS)
    assert not any(u in tables["held"] for u in used)  # held-out phrasings stay out
    user_asks = [
        c["messages"][0]["content"] for c, u in zip(mixed, used, strict=True) if u in tables["user"]
    ]
    assert not any("def " in a for a in user_asks)  # no signature in a user's request
    assert corpus.chat_samples(src, varied=True, signed=True, unsigned=0.0) == signed
    reqs = corpus.held_out_requests(
        corpus.files("lib", held_out=True), 8, table=corpus.HELD_OUT_PHRASINGS
    )
    got = {_template(r["messages"][0]["content"], r["name"], r["module"]) for r in reqs}
    assert got == tables["held"]


def test_words_pretokenizer_gives_a_name_the_same_tokens_in_every_phrasing():

    name = "get_read_buffer_size"
    asks = [f"Please write `m.{name}`.", f"Implement {name}() in m", f"def {name}(self):"]
    _same_name_tokens(name, asks, ("words", "bytelevel"), "words")


def _same_name_tokens(name: str, asks: list[str], kinds: tuple[str, ...], same: str) -> None:
    """Train each pre-tokenizer kind on 10 stdlib files: the tokens overlapping ``name`` are
    the same in every ask for kind ``same`` only; every kind decodes code losslessly."""
    from eagle3kit.zoo import corpus

    texts = [f.text for f in corpus.files("lib", limit=10)]
    for kind in kinds:
        tok = corpus.train_tokenizer(texts, 1000, kind)
        spans = []
        for a in asks:  # the tokens that overlap the name
            enc, at = tok.encode(a), a.index(name)
            over = zip(enc.ids, enc.offsets, strict=True)
            spans.append([t for t, (b, e) in over if b < at + len(name) and e > at])
        assert (spans[0] == spans[1] == spans[2]) is (kind == same), (kind, spans)
        code = "def f(a, b):\n    return a  +  b  # `x`\n\n\n\tx = 1\n"
        assert tok.decode(tok.encode(code).ids) == code  # lossless either way


def _word_edits(a: str, b: str) -> int:
    """Word-level Levenshtein distance of two phrasings (lower-cased words and {f}/{m} slots
    only), written out here so the check does not lean on corpus' own. Past 4 it returns a
    lower bound (the words one has and the other lacks), which is all the tests ask."""
    return _edits_of(_split(a), _split(b))


@functools.cache
def _split(t: str) -> tuple[tuple[str, ...], Counter]:
    words = tuple(re.findall(r"\{[fm]\}|[a-z]+", t.lower()))
    return words, Counter(words)


def _edits_of(a, b) -> int:
    (wa, ca), (wb, cb) = a, b
    bound = max(len(wa), len(wb)) - sum((ca & cb).values())
    if bound >= 4:
        return bound
    d = [[i + j if i * j == 0 else 0 for j in range(len(wb) + 1)] for i in range(len(wa) + 1)]
    for i in range(1, len(wa) + 1):
        for j in range(1, len(wb) + 1):
            sub = d[i - 1][j - 1] + (wa[i - 1] != wb[j - 1])
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, sub)
    return d[-1][-1]


@pytest.mark.slow
def test_recipe_10_grammar_is_large_varied_and_far_from_every_held_out_set():
    from eagle3kit.zoo import corpus

    g = corpus.grammar_phrasings()
    assert len(g) >= 2000 and len(set(g)) == len(g)
    sets = corpus.HELD_OUT_SETS
    held = [h for s in sets for h in s]
    assert len(set(held)) == len(held) == 16
    held_split = [_split(h) for h in held]
    for t in g:
        w = _split(t)
        assert all(_edits_of(w, h) >= 4 for h in held_split), t
    # the second and third sets' verbs are in no phrasing recipe 10 trains on, opener included
    trained = (*corpus.SIGNED_PHRASINGS, *corpus.PHRASINGS, *g, *corpus.OPENERS)
    verbs = ("reproduce", "recreate", "draft", "spell", "rewrite", "paste", "dig", "sketch")
    for verb in verbs + ("fetch", "recall", "quote", "retrieve"):
        assert any(verb in h.lower() for h in held)
        assert not any(verb in t.lower() for t in trained), verb
    for t in corpus.SIGNED_PHRASINGS:  # the signed requests' words are far from sets 2 and 3
        assert all(_word_edits(t.split("\n")[0], h) >= 4 for h in held[4:])
    # an opener shares no word with a held-out phrasing, so it brings no request nearer one
    held_words = set(re.findall(r"[a-z]+", " ".join(held).lower()))
    assert not set(re.findall(r"[a-z]+", " ".join(corpus.OPENERS).lower())) & held_words
    # the name stands at many places (after a verb, after "module", dotted), never first
    assert not any(t.startswith(("{f}", "`{f}", "{m}.", "`{m}.")) for t in g)
    assert any(re.match(r"[A-Z][a-z]+ \{f\}\(\) ", t) for t in g)
    assert any("module `{m}`: " in t for t in g) and any(" `{m}.{f}()`" in t for t in g)
    assert corpus.near_held_out("Implement {f}() in module `{m}`.")  # one word off
    assert corpus.near_held_out("Please write `{m}.{f}()`")
    assert corpus.near_held_out("Could you draft `{m}.{f}()`, please?")


def test_recipe_10_chat_samples_draw_on_the_grammar_and_keep_the_answers():
    from eagle3kit.zoo import corpus

    src = corpus.files("lib", limit=8)
    fns = corpus.functions(src)
    mixed = corpus.chat_samples(src, varied=True, signed=True, unsigned=0.6, grammar=True)
    signed = corpus.chat_samples(src, varied=True, signed=True)
    assert [c["messages"][1] for c in mixed] == [c["messages"][1] for c in signed]
    asks = [c["messages"][0]["content"] for c in mixed]
    opened = [next((o for o in corpus.OPENERS if o and a.startswith(o)), "") for a in asks]
    assert 0.2 < sum(map(bool, opened)) / len(asks) < 0.5  # grammar requests with an opener
    used = [
        _template(a[len(o) :], f.name, f.module) for a, o, f in zip(asks, opened, fns, strict=True)
    ]
    grammar = {t.lower() for t in corpus.grammar_phrasings()}
    used = [u.lower() if u.lower() in grammar else u for u in used]
    n_user = sum(u in grammar for u in used)
    assert 0.45 < n_user / len(used) < 0.75
    assert len({u for u in used if u in grammar}) > 0.8 * n_user  # hardly a template twice
    held = set(corpus.HELD_OUT_PHRASINGS) | set(corpus.HELD_OUT_PHRASINGS_B)
    assert not any(u in held for u in used)


@pytest.mark.slow
def test_grammar_tails_and_dotted_share_stay_far_from_every_held_out_set():
    from eagle3kit.zoo import corpus

    sets = corpus.HELD_OUT_SETS
    held = [_split(h) for s in sets for h in s]
    held_words = {w for h in held for w in h[0]}
    assert not {w for t in corpus.TAILS for w in _split(t)[0]} & held_words
    src = corpus.files("lib", limit=8)
    fns = corpus.functions(src)
    picked = [corpus.grammar_template(fn, 0.5, 0.4) for fn in fns]
    assert all(_edits_of(_split(t), h) >= 4 for t in picked for h in held)
    asked = corpus.question_phrasings()
    assert len(asked) >= 300 and all(t.endswith("?") for t in asked)
    assert all(_edits_of(_split(t), h) >= 4 for t in asked for h in held)
    assert any(t.endswith(".{f}?") for t in asked) and any(t.endswith("{f}()?") for t in asked)
    q = [corpus.grammar_template(fn, 0.0, 0.0, 0.3) for fn in fns]
    assert 0.15 < sum(t in asked for t in q) / len(q) < 0.45
    tailed = [t for t in picked if t.endswith(corpus.TAILS)]
    dotted = [t for t in picked if "{m}.{f}" in t]
    assert 0.35 < len(tailed) / len(picked) < 0.65 and 0.25 < len(dotted) / len(picked) < 0.55
    assert len(set(picked)) > 0.8 * len(picked)
    # off (the defaults): the requests are recipe 10's, word for word
    plain = corpus.chat_samples(src, varied=True, signed=True, unsigned=0.7, grammar=True)
    same = corpus.chat_samples(
        src, varied=True, signed=True, unsigned=0.7, grammar=True, tails=0.0, dotted=0.0
    )
    assert plain == same
    mixed = corpus.chat_samples(
        src, varied=True, signed=True, unsigned=0.7, grammar=True, tails=0.5, dotted=0.4
    )
    assert [c["messages"][1] for c in mixed] == [c["messages"][1] for c in plain]
    asks = [c["messages"][0]["content"].split("\n\n")[0] for c in mixed]
    assert sum(a.endswith(corpus.TAILS) for a in asks) > 0.2 * len(asks)


@pytest.mark.slow
def test_renamed_share_asks_and_answers_under_a_made_up_name():
    from eagle3kit.zoo import corpus

    src = corpus.files("lib", limit=8)
    fns = corpus.functions(src)
    kw = dict(varied=True, signed=True, unsigned=0.7, grammar=True)
    plain = corpus.chat_samples(src, **kw)
    mixed = corpus.chat_samples(src, **kw, renamed=0.5)
    assert corpus.chat_samples(src, **kw, renamed=0.0) == plain
    moved = 0
    for fn, p, m in zip(fns, plain, mixed, strict=True):
        ask, answer = m["messages"][0]["content"], m["messages"][1]["content"]
        name = re.match(r"(?:async\s+)?def\s+(\w+)\(", answer).group(1)
        assert re.search(rf"(?<!\w){name}(?!\w)", ask), (ask, name)
        if p == m:
            assert name == fn.name
            continue
        moved += 1
        assert name != fn.name and name.startswith("_") == fn.name.startswith("_")
        assert 2 <= len(name.strip("_").split("_")) <= 4
        assert not re.search(rf"(?<![\w.]){re.escape(fn.name)}(?!\w)", answer + ask)
    assert 0.3 < moved / len(fns) < 0.7
    assert corpus.chat_samples(src, **kw, renamed=0.5) == mixed  # deterministic


def test_recipe_10_is_staged_for_full_members_only(monkeypatch):
    from eagle3kit.zoo import members

    nine = {
        (n, s): (members.recipe(n, s), members.recipe_digest(n, s))
        for n in zoo.names()
        for s in zoo.SIZES
    }
    monkeypatch.setenv(members.RECIPE_ENV, "10")
    for (n, s), (r, digest) in nine.items():
        if s == "tiny":  # tiny members are byte for byte what ships
            assert (members.recipe(n, s), members.recipe_digest(n, s)) == (r, digest)
        else:
            assert members.recipe(n, s).chat_grammar and not r.chat_grammar
            assert members.recipe_digest(n, s) != digest
    monkeypatch.setenv(members.RECIPE_ENV, "11")
    with pytest.raises(Eagle3Error, match="EAGLE3KIT_ZOO_RECIPE: expected 9 or 10, found '11'"):
        members.recipe("dsv3-v1")


def test_idents_pretokenizer_gives_a_bare_name_before_a_space_its_def_tokens():

    name = "get_read_buffer_size"
    asks = [f"There is a function {name} in m.", f"`m.{name}`", f"def {name}(self):"]
    _same_name_tokens(name, asks, ("words", "idents"), "idents")


@pytest.mark.slow
def test_phrasal_requests_stay_far_from_every_held_out_set_and_default_off():
    """Round 8's ``chat_phrasal``: verbs with a particle before the name ("Look up f()"),
    none within three word edits of a held-out phrasing, none with a held-out verb; the share
    follows the knob, and at 0 the requests are the earlier ones word for word."""
    from eagle3kit.zoo import corpus

    sets = corpus.HELD_OUT_SETS
    held = [_split(h) for s in sets for h in s]
    ph = corpus.phrasal_phrasings()
    assert len(ph) >= 300 and len(set(ph)) == len(ph)
    assert all(_edits_of(_split(t), h) >= 4 for t in ph for h in held)
    assert not any(v in t.lower() for t in ph for v in ("dig", "fetch", "recall", "retrieve"))
    assert any(t.startswith("Look up {f}() ") for t in ph)
    src = corpus.files("lib", limit=8)
    fns = corpus.functions(src)
    picked = [corpus.grammar_template(fn, 0.0, 0.0, 0.0, 0.4) for fn in fns]
    assert 0.25 < sum(t in ph for t in picked) / len(picked) < 0.55
    kw = dict(varied=True, signed=True, unsigned=0.7, grammar=True, tails=0.5, dotted=0.4)
    assert corpus.chat_samples(src, **kw) == corpus.chat_samples(src, **kw, phrasal=0.0)
    assert corpus.chat_samples(src, **kw) != corpus.chat_samples(src, **kw, phrasal=0.3)


def test_a_v2_can_keep_a_share_of_its_parents_chat_samples():
    """Round 8's ``chat_parent_mix``: a v2 adds that share of the chat samples of its
    parent's slice (training files only), evenly spaced; off by default and for a v1."""
    from dataclasses import replace

    from eagle3kit import zoo
    from eagle3kit.zoo import builder, corpus

    r = replace(zoo.recipe("dsv3-v2", "tiny"), file_limit=8)
    v1, v2 = zoo.member("dsv3-v1"), zoo.member("dsv3-v2")
    assert builder._parent_chat(v2, r, "lib") == []
    mixed = replace(r, chat_parent_mix=0.5)
    assert builder._parent_chat(v1, mixed, "test") == []
    lib = corpus.chat_samples(corpus.files("lib", limit=8), **builder._chat_kwargs(mixed))
    got = builder._parent_chat(v2, mixed, "lib")
    assert len(got) == round(len(lib) * 0.5)
    at, seen = -1, []  # each taken in order, none twice, from all over the parent's samples
    for c in got:
        at = lib.index(c, at + 1)
        seen.append(at)
    assert seen[0] < len(lib) / 8 and seen[-1] > len(lib) * 3 / 4
    held = {f.rel for f in corpus.files("lib", held_out=True)}
    assert not held & {f.rel for f in corpus.files("lib", limit=8)}


def test_drills_ask_again_otherwise_and_answer_with_the_def_line():
    """Round 9's naming drills: every function asked for ``variants`` more times, phrased by
    salted draws (not the chat sample's phrasing), without a signature, answered with its
    ``def`` line alone."""
    from eagle3kit.zoo import corpus

    src = corpus.files("lib", limit=8)
    kw = dict(varied=True, signed=True, unsigned=0.7, grammar=True, tails=0.5, dotted=0.4)
    chat = corpus.chat_samples(src, **kw)
    drills = corpus.drill_samples(src, 2, **kw)
    assert len(drills) == 2 * len(chat)
    asks = [c["messages"][0]["content"] for c in chat]
    for i, conv in enumerate(drills):
        ask, answer = (m["content"] for m in conv["messages"])
        full = chat[i % len(chat)]["messages"][1]["content"]
        assert answer == full.split("\n", 1)[0] and answer.startswith("def ")
        assert "\ndef " not in ask
    same = sum(d["messages"][0]["content"] == a for d, a in zip(drills, asks * 2, strict=True))
    assert same < 0.05 * len(drills)


def test_drill_windows_train_on_their_first_lines_alone():
    """With a drill stream in ``chat_info``, a share ``chat_drills`` of the chat windows comes
    from it, weighted ``first_line_weight`` on first-line tokens and 0 elsewhere; the other
    windows keep 1 and ``first_line_weight``; without aligned chat windows it is refused."""
    from dataclasses import replace

    import torch

    from eagle3kit.zoo import training as tr

    shape = dict(vocab_size=1, file_limit=1, steps=1, lr=1.0, warmup=1, batch=256, seq_len=8)
    r = tr.Recipe(**shape, chat_fraction=1.0, chat_aligned=True, first_line_weight=4.0)
    r = replace(r, chat_drills=0.25)
    raw, chat, drill = (torch.arange(a, a + 100, dtype=torch.int32) for a in (0, 100, 200))
    starts, marks = torch.arange(0, 80, 10), torch.zeros(100)
    marks[1:4] = 1
    info = (starts, marks, (drill, starts, marks))
    xy, w = tr.recipe_batch((raw, chat), r, torch.Generator().manual_seed(0), info)
    is_drill = xy[:, 0] >= 200
    assert 0.15 < is_drill.float().mean() < 0.35
    assert set(w[is_drill].unique().tolist()) == {0.0, 4.0}
    assert set(w[~is_drill].unique().tolist()) == {1.0, 4.0}
    with pytest.raises(ValueError, match="chat_aligned"):
        tr.recipe_batch((raw, chat), replace(r, chat_aligned=False), torch.Generator(), info)


def test_first_line_mark_ends_with_the_answers_first_line():
    """The first-line mark covers the answer's ``def`` line and never the end-of-turn token,
    also when the answer is that line alone (a drill): marking it taught trials D14 and L12
    of round 9 to stop after the ``def`` line."""
    from eagle3kit.zoo import builder, corpus

    src = corpus.files("lib", limit=4)
    kw = dict(varied=True, signed=True, unsigned=0.7, grammar=True)
    tok = corpus.train_tokenizer([f.text for f in src], 512, "idents")
    eos = tok.token_to_id(corpus.EOS)
    for convs in (corpus.chat_samples(src, **kw)[:20], corpus.drill_samples(src, 1, **kw)[:20]):
        ids, _, marks = builder._chat_stream(tok, convs)
        assert marks[ids == eos].sum() == 0
        assert marks.sum() >= 20 * 3  # a def line is several tokens
