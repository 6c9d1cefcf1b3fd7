"""`data prepare` / `data vocab` and the DATA format (eagle3kit.data.prepared), on the zoo's tiny
Llama target. Expected counts, line numbers and masked texts are written by hand."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.data.prepared import PreparedWriter, collate, load_prepared, split_ids


@pytest.fixture(scope="module")
def target():
    from eagle3kit import zoo

    return str(zoo.get("llama-v1", size="tiny"))


@pytest.fixture(scope="module")
def tok(target):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(target)


def _sg(*pairs, **extra):
    turns = []
    for u, a in pairs:
        turns += [{"from": "human", "value": u}, {"from": "gpt", "value": a}]
    return json.dumps({**extra, "conversations": turns})


def _oa(*msgs, **extra):
    return json.dumps({**extra, "messages": [{"role": r, "content": c} for r, c in msgs]})


# line -> content; the comment says what prepare must do with it
LINES = [
    _sg(("What does len do?", "It counts items."), id="g1"),  # 1 ok
    '{"messages": [',  # 2 bad JSON
    "",  # 3 blank: not a record
    _oa(("user", "Hi"), ("tool", "x")),  # 4 unknown role
    _oa(("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello.")),  # 5 ok
    _oa(("user", "a"), ("user", "b"), ("assistant", "c")),  # 6 not alternating
    _oa(("system", "s"), ("user", "Hi")),  # 7 no assistant turn
    _oa(("user", "Hi"), ("assistant", "  ")),  # 8 empty content
    "[1, 2]",  # 9 not an object
    json.dumps(
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Sum?"}]},
                {"role": "assistant", "content": "Two."},
            ]
        }
    ),  # 10 ok (content parts)
    _sg(("Again?", "Yes."), id="g1"),  # 11 duplicate id
    _oa(("user", "Hi"), ("assistant", "Yo."), ("user", "More?")),  # 12 ends with user
]
SKIPPED = {
    2: "bad JSON",
    4: "turn 2: unknown role 'tool'",
    6: "turn 2: expected role assistant",
    7: "no assistant turn",
    8: "turn 2: empty content",
    9: "expected a JSON object, found list",
    11: "duplicate id 'g1' (first at",
    12: "turn 3: the last turn must be assistant",
}
ANSWERS = ["It counts items.</s>", "Hello.</s>", "Two.</s>"]


def _write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _masked(tok, s) -> str:
    return tok.decode(s.input_ids[s.loss_mask].tolist())


def test_malformed_lines_skipped_with_line_numbers(cli, tmp_path, target, tok):
    src = _write_jsonl(tmp_path / "in.jsonl", LINES)
    r = cli("data", "prepare", src, "--target", target, "-o", tmp_path / "DATA", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["samples"] == 3 and doc["truncated"] == 0
    assert [s["line"] for s in doc["skipped"]] == sorted(SKIPPED)
    for s in doc["skipped"]:
        assert s["file"] == str(src)
        assert s["reason"].startswith(SKIPPED[s["line"]]), s
    data = load_prepared(tmp_path / "DATA")
    assert len(data) == 3 and data.ids[0] == "g1"
    assert [_masked(tok, data[i]) for i in range(3)] == ANSWERS
    # the first sample, whole: the zoo template's render, tokenised as the server would
    full = "<s><|user|>\nWhat does len do?</s>\n<|assistant|>\nIt counts items.</s>\n"
    assert data[0].input_ids.tolist() == tok(full, add_special_tokens=False)["input_ids"]
    assert doc["tokens"] == sum(len(data[i].input_ids) for i in range(3)) == data.meta["tokens"]
    assert doc["loss_tokens"] == sum(int(data[i].loss_mask.sum()) for i in range(3))
    assert data.meta["format"] == "eagle3kit-data/1" and data.meta["skipped"] == doc["skipped"]
    assert data.meta["target"]["vocab_size"] == 512


def test_strict_stops_at_the_first_bad_line_and_keeps_old_data(cli, tmp_path, target):
    good = _write_jsonl(tmp_path / "good.jsonl", [LINES[0]])
    out = tmp_path / "DATA"
    assert cli("data", "prepare", good, "--target", target, "-o", out).code == 0
    before = (out / "data.json").read_bytes()
    src = _write_jsonl(tmp_path / "in.jsonl", LINES)
    r = cli("data", "prepare", src, "--target", target, "-o", out, "--strict", "--json")
    assert r.code == 2 and r.out == ""
    assert r.err.strip().splitlines() == [
        f"eagle3kit: error: {src}:2: bad JSON: Expecting value at column 1"
    ]
    assert (out / "data.json").read_bytes() == before and len(load_prepared(out)) == 1


def test_truncation(cli, tmp_path, target, tok):
    long_answer = "word " * 40
    lines = [
        _oa(("user", "Hi"), ("assistant", long_answer)),  # truncated inside the answer
        _oa(("user", "x " * 40), ("assistant", "Late.")),  # the answer lies beyond max-length
    ]
    src = _write_jsonl(tmp_path / "in.jsonl", lines)
    r = cli(
        "data",
        "prepare",
        src,
        "--target",
        target,
        "-o",
        tmp_path / "D",
        "--max-length",
        "12",
        "--json",
    )
    doc = json.loads(r.out)
    assert (doc["samples"], doc["truncated"]) == (1, 1)
    assert doc["skipped"] == [
        {
            "file": str(src),
            "line": 2,
            "reason": "no assistant token within the first 12 tokens (--max-length)",
        }
    ]
    s = load_prepared(tmp_path / "D")[0]
    assert len(s.input_ids) == 12 and long_answer.startswith(_masked(tok, s))


def test_sharegpt_system_field_and_bad_inputs(cli, tmp_path, target, tok):
    src = _write_jsonl(tmp_path / "in.jsonl", [_sg(("Hi", "Yo."), system="Be brief.")])
    r = cli("data", "prepare", src, "--target", target, "-o", tmp_path / "D")
    assert r.code == 0, r.err
    s = load_prepared(tmp_path / "D")[0]
    assert tok.decode(s.input_ids.tolist()).startswith("<s><|system|>\nBe brief.</s>\n<|user|>\nHi")
    missing = cli(
        "data", "prepare", tmp_path / "nope.jsonl", "--target", target, "-o", tmp_path / "E"
    )
    assert missing.code == 2 and "nope.jsonl: no such file or directory" in missing.err
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "precious.txt").write_text("x")
    r = cli("data", "prepare", src, "--target", target, "-o", tmp_path / "keep")
    assert r.code == 2 and "not a DATA directory" in r.err
    assert (tmp_path / "keep" / "precious.txt").read_text() == "x"
    r = cli(
        "data", "prepare", src, "--target", target, "-o", tmp_path / "F", "--template-kwargs", "[1]"
    )
    assert r.code == 2 and "--template-kwargs: expected a JSON object" in r.err


def test_json_array_input_and_bom(tmp_path):
    """A `.json` file holding one array (ShareGPT dumps) is numbered by record; a BOM is fine."""
    from eagle3kit.data.conversations import read_conversations

    arr = tmp_path / "dump.json"
    arr.write_text(json.dumps([json.loads(LINES[0]), {"neither": 1}], indent=1))
    got = [(line, type(x).__name__) for _, line, x in read_conversations([arr])]
    assert got == [(1, "Conversation"), (2, "Problem")]
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + LINES[0].encode() + b"\n")
    assert [type(x).__name__ for _, _, x in read_conversations([bom])] == ["Conversation"]


def _hand_data(path: Path) -> None:
    """Four samples; loss tokens: 5 x3, 7 x2, 9 x1, 3 x1 (and 11 only outside the mask)."""
    w = PreparedWriter(path, shard_tokens=6)  # several shards
    w.add("a", [1, 5, 5, 11], [0, 1, 1, 0])
    w.add("b", [1, 7, 9], [0, 1, 1])
    w.add("c", [11, 11, 5, 7], [0, 0, 1, 1])
    w.add("d", [3], [1])
    w.finish({"target": {"vocab_size": 16}, "truncated": 0, "skipped": []})


def test_vocab_from_loss_tokens(cli, tmp_path):
    from eagle3kit.core.vocab import load_vocab

    _hand_data(tmp_path / "D")
    r = cli(
        "data",
        "vocab",
        tmp_path / "D",
        "--draft-vocab-size",
        "2",
        "-o",
        tmp_path / "v.safetensors",
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["draft_vocab_size"] == 2
    # top-2 of {5: 3, 7: 2, 3: 1, 9: 1} = {5, 7}; coverage at N/2, N, 2N, 4N (N/4 = 0 left out)
    assert doc["coverage"] == {"1": 3 / 7, "2": 5 / 7, "4": 1.0, "8": 1.0}
    d2t, t2d = load_vocab(tmp_path / "v.safetensors")
    assert d2t.tolist() == [5, 6] and t2d.nonzero().flatten().tolist() == [5, 7]
    # ties (3 and 9 both once): the lower id wins
    cli(
        "data",
        "vocab",
        tmp_path / "D",
        "--draft-vocab-size",
        "3",
        "-o",
        tmp_path / "v3.safetensors",
    )
    assert load_vocab(tmp_path / "v3.safetensors")[1].nonzero().flatten().tolist() == [3, 5, 7]
    r = cli("data", "vocab", tmp_path / "D", "--draft-vocab-size", "17", "-o", tmp_path / "x")
    assert r.code == 2 and "--draft-vocab-size: expected 1..16" in r.err


def test_loader_split_and_collate(tmp_path):
    _hand_data(tmp_path / "D")
    data = load_prepared(tmp_path / "D")
    assert len(data.meta["shards"]) == 2 and len(data) == 4 and data.ids == ["a", "b", "c", "d"]
    assert data[2].input_ids.tolist() == [11, 11, 5, 7]
    assert data[2].loss_mask.tolist() == [False, False, True, True]
    ids, att, loss = collate([data[3], data[1]], pad_id=0)
    assert ids.tolist() == [[3, 0, 0], [1, 7, 9]]
    assert att.tolist() == [[True, False, False], [True, True, True]]
    assert loss.tolist() == [[True, False, False], [False, True, True]]
    train, held = data.split(0.25, seed=0)
    assert len(held) == 1 and sorted(train + held) == [0, 1, 2, 3]
    # by id, not by position: the reversed list holds out the same sample
    train_r, held_r = split_ids(list(reversed(data.ids)), 0.25, seed=0)
    assert [data.ids[i] for i in held] == [list(reversed(data.ids))[i] for i in held_r]
    assert len(split_ids(data.ids, 2)[1]) == 2 and split_ids(data.ids, 0.0)[1] == []
    with pytest.raises(Eagle3Error):
        split_ids(data.ids, 1.5)
    with pytest.raises(Eagle3Error):
        split_ids(data.ids, 4)


def test_loader_refuses_a_corrupt_shard(tmp_path):
    _hand_data(tmp_path / "D")
    shard = tmp_path / "D" / "shard-00000.safetensors"
    blob = bytearray(shard.read_bytes())
    blob[-1] ^= 0xFF
    shard.write_bytes(bytes(blob))
    with pytest.raises(Eagle3Error, match="shard-00000.safetensors: sha256"):
        load_prepared(tmp_path / "D")
    with pytest.raises(Eagle3Error, match="format: expected 'eagle3kit-data/1'"):
        (tmp_path / "E").mkdir()
        (tmp_path / "E" / "data.json").write_text('{"format": "other"}')
        load_prepared(tmp_path / "E")


def test_dataset_directory_needs_datasets_or_pyarrow(tmp_path):
    from eagle3kit.data.conversations import read_conversations

    ds = tmp_path / "ds"
    ds.mkdir()
    try:
        import pyarrow as pa
    except ImportError:
        with pytest.raises(Eagle3Error, match="install 'datasets'"):
            list(read_conversations([ds]))
        return
    # datasets unify columns: a row lacking one holds None there
    rows = [
        {
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Yo."},
            ],
            "conversations": None,
        },
        {"messages": [], "conversations": None},
        {
            "messages": None,
            "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo."}],
        },
    ]
    table = pa.Table.from_pylist(rows)
    with (
        pa.OSFile(str(ds / "data-00000-of-00001.arrow"), "wb") as f,
        pa.ipc.new_stream(f, table.schema) as w,
    ):
        w.write_table(table)
    (ds / "state.json").write_text(
        json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]})
    )
    got = list(read_conversations([ds]))
    assert [(line, type(x).__name__) for _, line, x in got] == [
        (1, "Conversation"),
        (2, "Problem"),
        (3, "Conversation"),
    ]


# Where the kill lands (core/stops.py): mid-build (a shard of the new DATA written in its temp
# folder), the new DATA complete beside the old one, and just after the swap (the old one not
# yet deleted). DATA must be the old data whole before the swap, the new data whole after it.
KILL_POINTS = [
    ("before:*/.DATA.*.tmp/shard-*", "old"),
    ("before:*/DATA", "old"),
    ("after:*/DATA", "new"),
]


@pytest.mark.slow
@pytest.mark.kill
@pytest.mark.parametrize(("at", "finds"), KILL_POINTS)
def test_kill9_during_prepare_leaves_old_or_new_data_whole(tmp_path, target, at, finds):
    """SIGKILL at each point of writing the new DATA over an old one: DATA is the old data
    whole or the new data whole, never a mix and never missing; a rerun finishes."""
    from kill_helpers import eagle3kit, kill_at

    out = tmp_path / "DATA"
    _hand_data(out)
    big = _write_jsonl(
        tmp_path / "big.jsonl",
        [_oa(("user", f"Q{i}?"), ("assistant", "A " * 50)) for i in range(1500)],
    )
    cmd = eagle3kit("data", "prepare", big, "--target", target, "-o", out, "--json")
    where = kill_at(cmd, at, tmp_path)
    assert where.split()[1] == at.split(":")[0], where
    got = load_prepared(out)  # every shard checked against data.json on load
    if finds == "old":
        assert got.ids == ["a", "b", "c", "d"]
    else:
        assert len(got) == 1500 and got.meta["samples"] == 1500
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["samples"] == 1500 and len(load_prepared(out)) == 1500
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".DATA")] == []
