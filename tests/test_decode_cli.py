"""`eagle3kit generate` end to end on a tiny zoo target with a drafter dir on disk; `eval`'s
refusals and its `--config FILE` (cli/decode_options.py EvalOptions)."""

from __future__ import annotations

import json

import pytest
import torch
from decode_helpers import hf_greedy_ids, new_drafter, save_drafter_dir


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from eagle3kit import zoo
    from eagle3kit.model.target import TargetModel

    torch.set_num_threads(1)
    path = zoo.get("llama-v1", size="tiny")
    tm = TargetModel.from_pretrained(path)
    d = save_drafter_dir(new_drafter(tm, seed=1), tmp_path_factory.mktemp("gen") / "drafter")
    return str(path), d, tm


def test_generate_json_is_the_target_greedy_output(cli, pair):
    path, d, tm = pair
    r = cli(
        "generate",
        "--target",
        path,
        "--drafter",
        d,
        "--prompt",
        "def main(",
        "--max-new-tokens",
        "16",
        "--depth",
        "3",
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert set(doc) >= {"prompt_ids", "tokens", "text", "tau_online", "tokens_per_s"}
    assert doc["prompt_ids"] == tm.tokenizer("def main(")["input_ids"]
    eos = tm.tokenizer.eos_token_id
    want = hf_greedy_ids(tm, doc["prompt_ids"], 16, eos)
    assert doc["tokens"] == [t for t in want if t != eos]
    assert doc["text"] == tm.tokenizer.decode(doc["tokens"])
    assert doc["tau_online"] >= 1.0 and doc["tokens_per_s"] > 0


def test_generate_chat_tree_streams_text(cli, pair):
    path, d, tm = pair
    r = cli(
        "generate",
        "--target",
        path,
        "--drafter",
        d,
        "--prompt",
        "Write `f`.",
        "--chat",
        "--tree",
        "--topk",
        "2",
        "--budget",
        "6",
        "--max-new-tokens",
        "12",
    )
    assert r.code == 0, r.err
    msgs = [{"role": "user", "content": "Write `f`."}]
    ids = tm.tokenizer.apply_chat_template(
        msgs, add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    eos = tm.tokenizer.eos_token_id
    want = [t for t in hf_greedy_ids(tm, ids, 12, eos) if t != eos]
    assert r.out == tm.tokenizer.decode(want)  # streamed pieces add up to the text
    assert "tau_online" in r.err and "tok/s" in r.err


def test_generate_sampling_runs_and_is_seeded(cli, pair):
    path, d, _ = pair
    args = (
        "generate",
        "--target",
        path,
        "--drafter",
        d,
        "--prompt",
        "x = ",
        "--temperature",
        "0.8",
        "--top-p",
        "0.9",
        "--max-new-tokens",
        "10",
        "--json",
    )
    a, b = cli(*args, "--seed", "3"), cli(*args, "--seed", "3")
    assert a.code == 0, a.err
    assert json.loads(a.out)["tokens"] == json.loads(b.out)["tokens"]


def test_generate_bad_input(cli, pair, tmp_path):
    path, d, _ = pair
    r = cli("generate", "--target", path, "--drafter", str(tmp_path / "nope"), "--prompt", "x")
    assert r.code == 2 and "nope" in r.err and "Traceback" not in r.err
    r = cli("generate", "--target", path, "--drafter", d, "--prompt", "x", "--depth", "0")
    assert r.code == 2 and "depth" in r.err
    other = new_drafter(
        type(
            "T",
            (),
            {
                "hidden_size": 32,
                "vocab_size": 300,
                "aux_layers": (1, 2, 3),
                "embed_tokens": torch.nn.Embedding(300, 32),
            },
        )()
    )
    bad_dir = save_drafter_dir(other, tmp_path / "wrong_vocab")
    r = cli("generate", "--target", path, "--drafter", bad_dir, "--prompt", "x")
    assert r.code == 2 and "vocab_size" in r.err and "512" in r.err


def test_generate_empty_prompt_is_one_line(cli, pair):
    """An empty prompt: one line naming --prompt, exit 2, no traceback (issue 21)."""
    path, d, _ = pair
    r = cli("generate", "--target", path, "--drafter", d, "--prompt", "")
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert "--prompt" in r.err and len(r.err.strip().splitlines()) == 1, r.err


@pytest.mark.parametrize("depth", ["0", "-1"])
def test_eval_depth_below_one_is_refused(cli, pair, tmp_path, depth):
    """`eval --depth 0` used to run; now one line naming --depth, exit 2, nothing written."""
    from decode_helpers import chat_jsonl

    path, d, _ = pair
    data = chat_jsonl(tmp_path / "c.jsonl", n=1)
    before = sorted(p.name for p in tmp_path.iterdir())
    r = cli("eval", "--target", path, "--drafter", d, "--data", data, "--depth", depth)
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert "--depth" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_eval_reads_a_config_file_and_a_flag_given_wins(cli, pair, tmp_path):
    """`eval --config FILE` (TOML) runs what the file says; a flag given on the command line
    wins over the file's key, one left at its default does not."""
    from decode_helpers import chat_jsonl

    path, d, _ = pair
    data = chat_jsonl(tmp_path / "c.jsonl", n=2)
    f = tmp_path / "eval.toml"
    f.write_text(
        f'target = "{path}"\ndrafter = "{d}"\ndata = "{data}"\ndepth = 2\nheldout = 1\n'
        "json = true\n"
    )
    by_file = cli("eval", "--config", f)
    assert by_file.code == 0, by_file.err
    doc = json.loads(by_file.out)
    assert doc["kind"] == "eagle3kit.eval" and doc["mode"] == "offline"
    assert doc["depth"] == 2 and len(doc["per_position_acceptance"]) == 2  # the file's, not 3
    flags = ("--target", path, "--drafter", d, "--data", data, "--depth", "2", "--heldout", "1")
    by_flags = cli("eval", *flags, "--json")
    assert by_flags.code == 0, by_flags.err
    assert json.loads(by_flags.out) == doc  # the file is the flags (offline eval is exact)
    over = cli("eval", "--config", f, "--depth", "4")
    assert over.code == 0, over.err
    assert json.loads(over.out)["depth"] == 4
    assert len(json.loads(over.out)["per_position_acceptance"]) == 4


@pytest.mark.parametrize(
    ("verb", "line", "says"),
    [
        ("eval", "depht = 3\n", "key 'depht': expected an option of this verb; the closest is"),
        ("eval", "repeats = 0\n", "key 'repeats': expected an integer >= 1, found 0"),
        ("bench", "concurency = '1,4'\n", "the closest is 'concurrency'"),
        ("probe", "reference = 'x'\n", "key 'reference': expected an option of this verb"),
        ("probe", "baseline-tps = 0\n", "key 'baseline-tps': expected a number > 0, found 0"),
    ],
)
def test_a_bad_eval_bench_probe_config_is_one_line_exit_2(cli, tmp_path, verb, line, says):
    """An unknown key (with the closest option) or a bad value in `--config FILE`: one line
    naming the file and the key, exit 2, before anything is loaded."""
    f = tmp_path / "c.toml"
    f.write_text(line)
    r = cli(verb, "--config", f)
    assert r.code == 2, (r.code, r.err)
    assert len(r.err.strip().splitlines()) == 1 and str(f) in r.err and says in r.err, r.err
