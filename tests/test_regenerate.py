"""data regenerate: local target and OpenAI-compatible servers (the fixture in openai_server.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eagle3kit.core.errors import Eagle3Error

sys.path.insert(0, str(Path(__file__).parent))
from kill_helpers import kill_at  # noqa: E402
from openai_server import FakeOpenAIServer  # noqa: E402

MAX_TOKENS = 10
PROMPTS = [
    "def parse(text):",
    "import os",
    "class Node:",
    "for i in range(10):",
    "x = [1, 2",
    "def main():",
    "return None",
    "with open(path) as f:",
    "try:",
    "while True:",
]


@pytest.fixture(scope="module")
def model_dir():
    from eagle3kit import zoo

    return str(zoo.get("llama-v1", size="tiny"))


@pytest.fixture(scope="module")
def target(model_dir):
    from eagle3kit.model.target import TargetModel

    n = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model on a shared 2-core box: 1 thread is ~10x faster
    yield TargetModel.from_pretrained(model_dir)
    torch.set_num_threads(n)


def write_input(path: Path, n: int = 6) -> list[dict]:
    """n records: ShareGPT (2 turns, extra fields) and OpenAI (system + 1 turn), alternating."""
    recs = []
    for i in range(n):
        p = PROMPTS[i % len(PROMPTS)]
        if i % 2 == 0:
            recs.append(
                {
                    "id": f"s{i}",
                    "source": "test",
                    "conversations": [
                        {"from": "human", "value": p},
                        {"from": "gpt", "value": "OLD", "weight": 1},
                        {"from": "human", "value": "and then?"},
                        {"from": "gpt", "value": "OLD"},
                    ],
                }
            )
        else:
            recs.append(
                {
                    "messages": [
                        {"role": "system", "content": "You write Python."},
                        {"role": "user", "content": p},
                        {"role": "assistant", "content": "OLD"},
                    ]
                }
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return recs


def regen_local(inp, outp, target, *, max_tokens, temperature=0.0, seed=0):
    """`regenerate` with the local target's generator (eagle3kit.decode.local)."""
    from eagle3kit.data.regenerate import regenerate
    from eagle3kit.decode.local import local_generator

    gen = local_generator(target, max_tokens, temperature, seed)
    return regenerate(inp, outp, generate=gen, max_tokens=max_tokens)


def read_output(path: Path) -> dict[str, dict]:
    lines = path.read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    ids = [r["id"] for r in recs]
    assert len(ids) == len(set(ids)), f"duplicate ids in {path}: {ids}"
    return {r["id"]: r for r in recs}


def greedy_text(target, msgs: list[dict]) -> str:
    """Reference: transformers' generate on the chat template (not the code under test)."""
    from decode_helpers import hf_greedy_ids

    tok = target.tokenizer
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True)
    out = hf_greedy_ids(target, list(ids["input_ids"]), MAX_TOKENS, tok.eos_token_id)
    return tok.decode([t for t in out if t != tok.eos_token_id], skip_special_tokens=True)


def test_local_turn_by_turn_keeps_form(tmp_path, target):

    inp, outp = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    recs = write_input(inp, 2)
    res = regen_local(inp, outp, target, max_tokens=MAX_TOKENS)
    assert (res.done, res.failed, res.already_done) == (2, [], 0)
    got = read_output(outp)
    s0 = got["s0"]
    assert s0["source"] == "test" and s0["conversations"][1]["weight"] == 1
    conv = s0["conversations"]
    assert [t["from"] for t in conv] == ["human", "gpt", "human", "gpt"]
    assert conv[0]["value"] == PROMPTS[0] and conv[2]["value"] == "and then?"
    # turn 1 answers the first prompt; turn 2 sees the regenerated turn 1, not "OLD"
    a1 = greedy_text(target, [{"role": "user", "content": PROMPTS[0]}])
    a2 = greedy_text(
        target,
        [
            {"role": "user", "content": PROMPTS[0]},
            {"role": "assistant", "content": a1},
            {"role": "user", "content": "and then?"},
        ],
    )
    assert (conv[1]["value"], conv[3]["value"]) == (a1, a2)
    (oa,) = [r for k, r in got.items() if k != "s0"]
    assert oa["id"].startswith("sha256:") and [m["role"] for m in oa["messages"]] == [
        "system",
        "user",
        "assistant",
    ]
    assert oa["messages"][2]["content"] == greedy_text(target, recs[1]["messages"][:2])
    # a rerun does nothing and says so
    res2 = regen_local(inp, outp, target, max_tokens=MAX_TOKENS)
    assert (res2.done, res2.already_done) == (0, 2)
    assert len(outp.read_text().splitlines()) == 2


@pytest.mark.slow  # seconds; the full suite runs it (fast subset under 3 min)
def test_servers_match_local_with_failures(tmp_path, target, model_dir):
    """A normal and a flaky server (HTTP 500 every third request) share the work: same text as
    local."""
    from eagle3kit.data.regenerate import regenerate

    inp = tmp_path / "in.jsonl"
    write_input(inp, 6)
    regen_local(inp, tmp_path / "local.jsonl", target, max_tokens=MAX_TOKENS)
    with FakeOpenAIServer(model_dir) as a, FakeOpenAIServer(model_dir, mode="flaky") as b:
        res = regenerate(
            inp,
            tmp_path / "srv.jsonl",
            servers=[a.url, b.url + "/v1"],
            max_tokens=MAX_TOKENS,
            concurrency=3,
        )
        assert b.chat_requests >= 3 and b.answered < b.chat_requests  # failures were injected
        assert a.answered > 0 and b.answered > 0  # both served
    assert (res.done, res.failed) == (6, [])
    assert read_output(tmp_path / "srv.jsonl") == read_output(tmp_path / "local.jsonl")


def test_request_body_and_model_name(tmp_path, model_dir):
    """The model name comes from /v1/models; template kwargs travel as chat_template_kwargs."""
    from eagle3kit.data.regenerate import regenerate

    inp = tmp_path / "in.jsonl"
    write_input(inp, 1)
    with FakeOpenAIServer(model_dir, name="served-name") as a:
        kw = {"enable_thinking": False}
        res = regenerate(
            inp, tmp_path / "o.jsonl", servers=[a.url], max_tokens=3, template_kwargs=kw
        )
    assert res.done == 1 and len(a.bodies) == 2  # two assistant turns, one request each
    b = a.bodies[1]
    assert (b["model"], b["max_tokens"], b["chat_template_kwargs"]) == ("served-name", 3, kw)
    first = json.loads((tmp_path / "o.jsonl").read_text())["conversations"][1]["value"]
    assert [m["role"] for m in b["messages"]] == ["user", "assistant", "user"]
    assert b["messages"][1]["content"] == first  # the second request saw the regenerated turn


@pytest.mark.slow
def test_server_dies_mid_run(tmp_path, model_dir):
    """One of two servers dies: every sample still finishes. Alone, the dead one's samples fail
    by id, the rest are written, and a rerun against a live server completes exactly the rest."""
    from eagle3kit.data.regenerate import regenerate

    inp, outp = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(inp, 6)
    with (
        FakeOpenAIServer(model_dir) as a,
        FakeOpenAIServer(model_dir, mode="die", die_after=2) as b,
    ):
        res = regenerate(inp, outp, servers=[b.url, a.url], max_tokens=MAX_TOKENS, concurrency=2)
        assert b.chat_requests >= 2
    assert (res.done, res.failed) == (6, [])
    assert len(read_output(outp)) == 6

    out2 = tmp_path / "out2.jsonl"
    with FakeOpenAIServer(model_dir, mode="die", die_after=4) as b:
        res = regenerate(inp, out2, servers=[b.url], max_tokens=MAX_TOKENS, retries=1)
    assert res.failed and res.done + len(res.failed) == 6
    assert set(res.errors) == set(res.failed)
    first = read_output(out2)
    assert len(first) == res.done and not set(first) & set(res.failed)
    with FakeOpenAIServer(model_dir) as a:
        res2 = regenerate(inp, out2, servers=[a.url], max_tokens=MAX_TOKENS)
    assert (res2.done, res2.already_done, res2.failed) == (len(res.failed), res.done, [])
    assert len(read_output(out2)) == 6


def test_sampling_is_seeded_per_sample(tmp_path, target):
    """temperature > 0 samples; the same seed and sample give the same text on a rerun."""

    inp = tmp_path / "in.jsonl"
    write_input(inp, 2)
    outs = []
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        regen_local(
            inp,
            tmp_path / f"{name}.jsonl",
            target,
            max_tokens=MAX_TOKENS,
            temperature=1.5,
            seed=seed,
        )
        outs.append(read_output(tmp_path / f"{name}.jsonl"))
    greedy = tmp_path / "g.jsonl"
    regen_local(inp, greedy, target, max_tokens=MAX_TOKENS)
    assert outs[0] == outs[1]
    assert outs[0] != outs[2] and outs[0] != read_output(greedy)


def test_partial_last_line_is_redone(tmp_path, target):

    inp, outp = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(inp, 3)
    regen_local(inp, outp, target, max_tokens=MAX_TOKENS)
    lines = outp.read_text().splitlines(keepends=True)
    outp.write_text(lines[0] + lines[1][: len(lines[1]) // 2])  # a kill mid-write of line 2
    res = regen_local(inp, outp, target, max_tokens=MAX_TOKENS)
    assert (res.done, res.already_done) == (2, 1)
    assert len(read_output(outp)) == 3


def test_corrupt_middle_line_is_an_error(tmp_path, target):

    inp, outp = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(inp, 2)
    outp.write_text('{"id": "s0"}\nnot json\n')
    with pytest.raises(Eagle3Error, match=r"out\.jsonl:2"):
        regen_local(inp, outp, target, max_tokens=MAX_TOKENS)
    assert outp.read_text() == '{"id": "s0"}\nnot json\n'  # nothing written was lost


def test_malformed_input_lines_are_skipped(tmp_path, target):

    inp, outp = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_input(inp, 1)
    with open(inp, "a") as f:
        f.write("{bad json\n\n")
        # a conversation must start with a user turn (one that ends with a user turn is
        # answered: tests/test_bad_inputs.py)
        f.write(json.dumps({"messages": [{"role": "assistant", "content": "x"}]}) + "\n")
    res = regen_local(inp, outp, target, max_tokens=MAX_TOKENS)
    assert res.done == 1
    assert [s["line"] for s in res.skipped] == [2, 4]


@pytest.mark.slow
@pytest.mark.kill
def test_kill9_then_rerun_loses_and_duplicates_nothing(tmp_path, model_dir):
    inp, outp = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    recs = write_input(inp, 12)
    cmd = [
        sys.executable,
        "-c",
        "from eagle3kit.cli import main; main()",
        "data",
        "regenerate",
        str(inp),
        "-o",
        str(outp),
        "--target",
        model_dir,
        "--max-tokens",
        str(MAX_TOKENS),
        "--json",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    kill_at(cmd, f"after:{outp}#3", tmp_path, env)  # just after the third line (core/stops.py)
    killed_at = outp.read_text().count("\n")
    assert killed_at == 3
    with open(outp, "a") as f:
        f.write('{"id": "s')  # as if the kill had torn the last write
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    from eagle3kit.data.conversations import validate

    ids = {validate(r).id for r in recs}  # 11: repeated OpenAI records share their hash id
    assert (doc["already_done"], doc["done"], doc["failed"]) == (
        killed_at,
        len(ids) - killed_at,
        [],
    )
    got = read_output(outp)  # every line parses, no duplicate id
    assert set(got) == ids


def test_answers_go_where_validate_read_the_turns():
    """A `datasets` row carries every column: an absent one reads as None, as in validate."""
    from eagle3kit.data.conversations import validate
    from eagle3kit.data.regenerate import with_answers

    rec = {
        "conversations": None,
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "old"}],
    }
    assert validate(rec).form == "openai"
    out = with_answers(rec, "s1", ["new"])
    assert out["messages"][1]["content"] == "new" and out["conversations"] is None
    sg = {
        "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "old"}],
        "messages": None,
    }
    assert with_answers(sg, "s2", ["new"])["conversations"][1]["value"] == "new"


def _scripted(cut_ids: set[str]):
    """A generator that says which answers max_tokens cut: every answer of the samples in
    cut_ids ends with finish_reason "length", the others with "stop"."""
    from eagle3kit.data.openai_servers import Answer

    def generate(history, sid):
        return Answer(f"answer to {history[-1]['content']}", "length" if sid in cut_ids else "stop")

    return generate


def test_answers_cut_at_max_tokens_are_counted_and_marked_or_dropped(tmp_path):
    from eagle3kit.data.regenerate import regenerate

    inp = tmp_path / "in.jsonl"
    recs = write_input(inp, 4)  # s0, s2: two answers each; two OpenAI records: one each
    oa = sorted(r["id"] for r in read_output_like(recs) if r["id"].startswith("sha256:"))
    cut = {"s0", oa[0]}
    keep = regenerate(inp, tmp_path / "keep.jsonl", generate=_scripted(cut), max_tokens=7)
    assert (keep.cut_answers, keep.cut_samples, keep.done, keep.dropped) == (3, 2, 4, [])
    got = read_output(tmp_path / "keep.jsonl")
    assert {k: r.get("cut_at_max_tokens") for k, r in got.items()} == {
        "s0": 2,
        "s2": None,
        oa[0]: 1,
        oa[1]: None,
    }
    assert keep.to_json()["cut_at_max_tokens"] == {
        "answers": 3,
        "samples": 2,
        "max_tokens": 7,
        "action": "keep",
        "dropped": [],
    }
    drop_out = tmp_path / "drop.jsonl"
    drop = regenerate(inp, drop_out, generate=_scripted(cut), max_tokens=7, truncated="drop")
    assert (drop.done, sorted(drop.dropped), drop.cut_answers) == (2, sorted(cut), 3)
    assert set(read_output(drop_out)) == {"s2", oa[1]}
    # a rerun (say with a larger --max-tokens, nothing cut now) does the dropped ones
    again = regenerate(inp, drop_out, generate=_scripted(set()), max_tokens=70, truncated="drop")
    assert (again.done, again.already_done, again.cut_answers) == (2, 2, 0)
    assert len(read_output(drop_out)) == 4
    with pytest.raises(Eagle3Error, match=r"--truncated: expected one of keep, drop, found 'x'"):
        regenerate(inp, tmp_path / "x.jsonl", generate=_scripted(cut), truncated="x")


def read_output_like(recs: list[dict]) -> list[dict]:
    """The ids regenerate gives the input records (their own id, else the hash prepare uses)."""
    from eagle3kit.data.conversations import validate

    return [{"id": validate(r).id} for r in recs]


def test_a_server_says_length_and_the_cli_warns_with_the_count(tmp_path, model_dir, target, cli):
    """The fake server answers as vLLM and SGLang do: finish_reason "length" when max_tokens
    ran out (the tiny target emits no end-of-turn within 3 tokens: checked with transformers'
    own greedy generate), and regenerate counts, warns and marks what the local run marks."""
    import urllib.request

    from decode_helpers import hf_greedy_ids

    tok = target.tokenizer
    msgs = [{"role": "user", "content": PROMPTS[1]}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_dict=True)
    assert tok.eos_token_id not in hf_greedy_ids(
        target, list(ids["input_ids"]), 3, tok.eos_token_id
    )
    inp = tmp_path / "in.jsonl"
    write_input(inp, 2)  # 3 answers in 2 samples
    with FakeOpenAIServer(model_dir) as a:
        body = {"model": "zoo-tiny", "messages": msgs, "max_tokens": 3}
        req = urllib.request.Request(
            a.url + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            assert json.loads(r.read())["choices"][0]["finish_reason"] == "length"
        r = cli(
            "data",
            "regenerate",
            inp,
            "-o",
            tmp_path / "srv.jsonl",
            "--server",
            a.url,
            "--max-tokens",
            "3",
            "--concurrency",
            "1",
            "--json",
        )
        bad = cli(
            "data",
            "regenerate",
            inp,
            "-o",
            tmp_path / "b.jsonl",
            "--server",
            a.url,
            "--truncated",
            "some",
        )
    assert r.code == 0, r.err
    assert json.loads(r.out)["cut_at_max_tokens"]["answers"] == 3
    assert (
        "warning: 3 answers in 2 samples stopped at --max-tokens 3 (finish_reason length): "
        "kept, each sample marked cut_at_max_tokens" in r.err
    )
    regen_local(inp, tmp_path / "local.jsonl", target, max_tokens=3)
    assert read_output(tmp_path / "srv.jsonl") == read_output(tmp_path / "local.jsonl")
    assert {r["cut_at_max_tokens"] for r in read_output(tmp_path / "local.jsonl").values()} == {
        1,
        2,
    }
    assert bad.code == 2 and "--truncated: expected one of keep, drop, found 'some'" in bad.err
