"""eagle3kit.live without a server: Prometheus text, suites, acceptance arithmetic, CLI input.

Expected values are worked by hand from the inputs written here."""

from __future__ import annotations

import json

import pytest

from eagle3kit.core.errors import Eagle3Error
from eagle3kit.live.client import spec_from_sglang, spec_from_vllm, split_url
from eagle3kit.live.server import SpecCounters, parse_prometheus, vllm_counters
from eagle3kit.live.suites import load_conversations, load_suite, load_suites
from eagle3kit.live.summary import acceptance, distinct_n, tau_bound
from eagle3kit.plan.from_file import file_inputs, plan_args_from_file

# Two DP engines, `_created` samples, a HELP line with braces, labels in sorted order.
METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 30.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 90.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 12.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 40.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 25.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 10.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="2"} 5.0
"""


def test_vllm_counters_sum_over_engines_and_ignore_created():
    c = vllm_counters(METRICS)
    assert (c.drafts, c.draft_tokens, c.accepted) == (40.0, 120.0, 52.0)
    assert c.per_pos == [33.0, 13.0, 6.0]
    assert vllm_counters("vllm:num_requests_running 0.0\n") is None


def test_counter_diff_is_the_runs_share():
    before = SpecCounters(40.0, 120.0, 52.0, [33.0, 13.0, 6.0])
    after = SpecCounters(50.0, 150.0, 60.0, [39.0, 15.0, 6.0])
    d = after.minus(before)
    assert (d.drafts, d.accepted, d.per_pos) == (10.0, 8.0, [6.0, 2.0, 0.0])
    acc = acceptance(d, [])
    assert acc["tau_online"] == pytest.approx(1.8)  # 1 + 8 / 10
    assert acc["per_position_acceptance"] == pytest.approx([0.6, 0.2, 0.0])
    assert acc["conditional_acceptance"] == pytest.approx([0.6, 0.2 / 0.6, 0.0])
    assert d.plus(before).drafts == 50.0


def test_prometheus_labels_with_escapes_and_timestamps():
    s = parse_prometheus('x_total{a="b\\"c",d="e"} 3 1700000000000\n# c\n')
    assert s == {"x_total": [({"a": 'b\\"c', "d": "e"}, 3.0)]}


def test_per_request_fields_of_both_engines():
    v = spec_from_vllm(
        {
            "num_spec_steps": 4,
            "num_accepted_draft_tokens": 5,
            "num_draft_tokens": 12,
            "acceptance_histogram": [1, 1, 1, 1],
            "num_spec_tokens": 3,
        }
    )
    s = spec_from_sglang(
        {
            "spec_verify_ct": 4,
            "spec_accepted_drafts": 5,
            "spec_accept_histogram": [1, 1, 1, 1],
            "spec_accept_length": 2.5,
        }
    )
    acc = acceptance(None, [v, s], k=3)
    assert acc["source"] == "per-request"
    assert acc["tau_online"] == pytest.approx(1 + 10 / 8)
    assert acc["per_position_acceptance"] == pytest.approx([6 / 8, 4 / 8, 2 / 8])
    assert spec_from_sglang({"spec_verify_ct": 0}) is None  # keys absent when no verify ran
    first = spec_from_sglang({"spec_verify_ct": 4, "spec_accept_token_num": 6})  # PR #11144
    assert (first["steps"], first["accepted"]) == (4, 6)
    # SGLang's on-demand histogram: at most 1 draft accepted; depth 3 pads positions 2, 3
    short = spec_from_sglang(
        {"spec_verify_ct": 2, "spec_num_correct_drafts": 1, "spec_correct_drafts_histogram": [1, 1]}
    )
    assert acceptance(None, [short], k=3)["per_position_acceptance"] == [0.5, 0.0, 0.0]


def test_tau_bound_and_its_warnings():
    assert tau_bound({"num_steps": 3, "topk": 1, "num_draft_tokens": 4}) == (4.0, [])
    bound, notes = tau_bound({"num_steps": 5, "topk": 1, "num_draft_tokens": 3})
    assert bound == 3.0 and "only 2 drafts" in notes[0]
    assert tau_bound({"num_steps": 5, "topk": 8, "num_draft_tokens": 32}) == (6.0, [])
    assert tau_bound(None) == (None, [])


def test_distinct4():
    assert distinct_n("a b c d a b c d a b c d") == pytest.approx(4 / 9)
    assert distinct_n("one two three") is None


def test_split_url():
    assert split_url("http://h:8000/") == ("h", 8000, "")
    assert split_url("localhost:30000") == ("localhost", 30000, "")
    with pytest.raises(Eagle3Error, match="--url"):
        split_url("https://h:1")


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_suites_from_local_files_of_the_hub_shape(tmp_path):
    mt = _jsonl(
        tmp_path / "q.jsonl",
        [
            {"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Shorter."]},
            {"question_id": 82, "category": "math", "turns": ["2+2?", "Why?"]},
        ],
    )
    ps = load_suite(f"mt-bench={mt}")
    assert [(p.id, p.turns) for p in ps] == [
        ("81", ("Write a poem.", "Shorter.")),
        ("82", ("2+2?", "Why?")),
    ]
    h4 = _jsonl(tmp_path / "h4.json", [])
    h4.write_text(json.dumps([{"prompt": ["a", "b"], "prompt_id": 1}]))
    assert load_suite(f"mt-bench={h4}")[0].turns == ("a", "b")
    gsm = _jsonl(tmp_path / "g.jsonl", [{"question": "Q1", "answer": "#### 1"}])
    he = _jsonl(tmp_path / "h.jsonl", [{"task_id": "HumanEval/0", "prompt": "def f():"}])
    m5 = _jsonl(tmp_path / "m.jsonl", [{"problem": "x^2=4", "unique_id": "u1"}])
    chat = tmp_path / "c.json"
    chat.write_text(json.dumps([{"instruction": "Hi"}]))
    spec = f"gsm8k={gsm},humaneval={he},math-500={m5},chat={chat}"
    got = [(p.suite, p.id, p.turns) for p in load_suites(spec)]
    assert got == [
        ("gsm8k", "0", ("Q1",)),
        ("humaneval", "HumanEval/0", ("def f():",)),
        ("math-500", "u1", ("x^2=4",)),
        ("chat", "0", ("Hi",)),
    ]
    assert len(load_suite(f"mt-bench={mt}", limit=1)) == 1


def test_suite_errors_are_one_line(tmp_path):
    with pytest.raises(Eagle3Error, match="expected one of mt-bench"):
        load_suite("mtbench")
    bad = _jsonl(tmp_path / "b.jsonl", [{"question": "ok"}, {"q": "no"}])
    with pytest.raises(Eagle3Error, match=r"b.jsonl row 2: expected the gsm8k shape"):
        load_suite(f"gsm8k={bad}")
    with pytest.raises(Eagle3Error, match="give a local file as NAME=PATH"):
        load_suite("gsm8k")  # HF_HUB_OFFLINE=1 in tests: the hub path fails in one line
    with pytest.raises(Eagle3Error, match="no such file"):
        load_suite(f"gsm8k={tmp_path / 'none.jsonl'}")


@pytest.mark.timeout
def test_offline_suite_reads_the_hub_cache_and_fails_fast_on_a_miss(
    tmp_path, monkeypatch, network_attempts
):
    """HF_HUB_OFFLINE: a suite already in the huggingface_hub cache loads; one that is not fails
    in one line without touching the network (a retry would take ~45 s)."""
    from huggingface_hub import constants

    # The cache layout huggingface_hub documents: <cache>/datasets--org--name/refs/main holds
    # the commit; snapshots/<commit>/<file> the file.
    repo = tmp_path / "datasets--HuggingFaceH4--MATH-500"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    _jsonl(repo / "snapshots" / commit / "test.jsonl", [{"problem": "1+1?"}, {"problem": "2+2?"}])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert [p.turns for p in load_suite("math-500")] == [("1+1?",), ("2+2?",)]
    with pytest.raises(Eagle3Error, match=r"mt_bench_prompts .*HF_HUB_OFFLINE is set\); give"):
        load_suite("mt-bench")
    assert network_attempts == []


def test_conversations(tmp_path):
    f = _jsonl(
        tmp_path / "c.jsonl",
        [
            {
                "messages": [
                    {"role": "system", "content": "s"},
                    {"role": "user", "content": "u1"},
                    {"role": "assistant", "content": "a"},
                    {"role": "user", "content": "u2"},
                ]
            },
            {"prompt": "raw"},
        ],
    )
    assert [p.turns for p in load_conversations(f)[0]] == [("u1", "u2"), ("raw",)]


SHAREGPT = [
    {
        "id": "a",
        "conversations": [{"from": "human", "value": "u1"}, {"from": "gpt", "value": "a1"}],
    },
    {
        "system": "s",
        "conversations": [
            {"from": "human", "value": "v1"},
            {"from": "gpt", "value": "b1"},
            {"from": "human", "value": "v2"},
            {"from": "gpt", "value": "b2"},
        ],
    },
    {"conversations": [{"from": "user", "value": "w1"}, {"from": "chatgpt", "value": "c1"}]},
    {"conversations": [{"from": "human", "value": "x1"}, {"from": "alien", "value": "?"}]},
]


def test_bench_data_takes_the_sharegpt_rows_prepare_takes(tmp_path):
    """`bench --url --data` reads conversations with prepare's reader: every row prepare
    accepts gives its user turns, in order; the row prepare skips is skipped, and named."""
    from eagle3kit.data.conversations import Conversation, read_conversations

    f = _jsonl(tmp_path / "sg.jsonl", SHAREGPT)
    took = [c for _, _, c in read_conversations([f]) if isinstance(c, Conversation)]
    assert len(took) == 3  # prepare's reader: the unknown speaker 'alien' is malformed
    prompts, skipped = load_conversations(f)
    assert [p.turns for p in prompts] == [("u1",), ("v1", "v2"), ("w1",)]
    assert prompts[0].id == "a"
    assert [(s.line, s.reason) for s in skipped] == [(4, "turn 2: unknown role 'alien'")]
    # the same from a .json array (a ShareGPT dump), and capped by --prompts
    arr = tmp_path / "sg.json"
    arr.write_text(json.dumps(SHAREGPT))
    assert [p.turns for p in load_conversations(arr, limit=2)[0]] == [("u1",), ("v1", "v2")]
    bad = _jsonl(tmp_path / "bad.jsonl", [SHAREGPT[3], {"x": 1}])
    with pytest.raises(Eagle3Error, match=r"bad.jsonl: expected at least one prompt .*2 unusable"):
        load_conversations(bad)


def _bench_doc(tmp_path, **kw):
    doc = {
        "kind": "eagle3kit.bench-live",
        "schema": 1,
        "tau_online": 2.5,
        "depth": 3,
        "cycle_ms": 20.0,
        "decode_ms": 10.0,
        "new_tokens": 100,
        "prefill_ms": 50.0,
    }
    doc.update(kw)
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(doc))
    return p


def test_plan_reads_the_bench_fields_and_options_win(tmp_path):
    p = _bench_doc(tmp_path)
    assert file_inputs(p)["cycle_ms"] == 20.0
    got = plan_args_from_file(p, {"tau": None, "depth": 5, "decode_ms": None, "baseline_tps": 80.0})
    assert got["tau"] == 2.5 and got["depth"] == 5 and got["decode_ms"] is None
    with pytest.raises(Eagle3Error, match="tau_online: expected a number, found none"):
        file_inputs(_bench_doc(tmp_path, tau_online=None))


def test_plan_from_bench_cli(tmp_path, cli):
    r = cli("plan", "--from", str(_bench_doc(tmp_path)), "--json")
    doc = json.loads(r.out)
    assert r.code == 0  # 2.5 tokens per 20 ms cycle = 125 tok/s against 100 plain
    assert doc["throughput_tps"] == pytest.approx(125.0)
    assert doc["baseline_tps"] == pytest.approx(100.0)


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--suite", "gsm8k=G", "--concurrency", "1,a"], "--concurrency"),
        (["--suite", "nope"], "--suite: expected one of"),
        ([], "--suite or --data"),
        (["--suite", "gsm8k=G", "--endpoint", "grpc"], "--endpoint"),
        (["--suite", "gsm8k=G", "--timeout", "0"], "--timeout"),
    ],
)
def test_bench_url_bad_input_exits_2(tmp_path, cli, args, msg):
    g = _jsonl(tmp_path / "g.jsonl", [{"question": "q"}])
    args = [a.replace("=G", f"={g}") for a in args]
    r = cli("bench", "--url", "http://127.0.0.1:9", *args)
    assert r.code == 2 and msg in r.err and "Traceback" not in r.err, r.err


class _Chunked:
    """A loopback server answering one POST with a chunked SSE stream (as uvicorn sends it),
    a `data:` line split across two chunks, and a `/generate` stream of deltas."""

    def __init__(self, chunks: list[bytes]) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler

        from local_server import QuietServer

        body = chunks

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for c in body:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(c), c))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        self.httpd = QuietServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        t = threading.Timer(20, self.httpd.shutdown)
        t.daemon = True
        t.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _sse(doc) -> bytes:
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


def test_chunked_stream_with_a_line_split_across_chunks():
    from eagle3kit.live.client import Deadline, stream

    first = _sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    a = _sse(
        {
            "choices": [{"index": 0, "delta": {"content": "Hello"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
    )
    b = _sse(
        {
            "choices": [{"index": 0, "delta": {"content": " world"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 3},
        }
    )
    last = _sse(
        {
            "choices": [],
            "usage": {"prompt_tokens": 3, "completion_tokens": 3},
            "metrics": {
                "speculative_decoding": {
                    "num_spec_steps": 1,
                    "num_accepted_draft_tokens": 1,
                    "num_draft_tokens": 2,
                    "acceptance_histogram": [0, 1, 0],
                }
            },
        }
    )
    srv = _Chunked([first, a[:20], a[20:] + b, last + b"data: [DONE]\n\n"])
    try:
        s = stream(srv.url, "/v1/chat/completions", {"stream": True}, Deadline(10))
    finally:
        srv.close()
    assert s.text == "Hello world" and s.completion_tokens == 3
    assert len(s.chunk_times) == 2 and s.chunk_tokens == [1, 3]
    assert s.spec == {"steps": 1, "accepted": 1, "drafted": 2, "histogram": [0, 1, 0], "k": None}


def test_generate_stream_of_deltas_or_cumulative_text():
    from eagle3kit.live.client import Deadline, stream

    meta = {"completion_tokens": 1, "finish_reason": None}
    fin = {
        "completion_tokens": 2,
        "finish_reason": {"type": "length"},
        "spec_verify_ct": 1,
        "spec_num_correct_drafts": 1,
        "spec_correct_drafts_histogram": [0, 1],
    }
    for second in ("ab", "b"):  # cumulative, then incremental output
        srv = _Chunked(
            [
                _sse({"text": "a", "meta_info": meta}),
                _sse({"text": second, "meta_info": fin}),
                b"data: [DONE]\n\n",
            ]
        )
        try:
            s = stream(srv.url, "/generate", {"stream": True}, Deadline(10))
        finally:
            srv.close()
        assert s.text == "ab" and s.completion_tokens == 2
        assert s.spec["steps"] == 1 and s.spec["accepted"] == 1 and s.finish_reason == "length"


def test_live_probe_verdicts():
    from eagle3kit.live.probe import verdict

    assert verdict(0.95, None, (2.9, 3.0))[0] == "plug-in"
    assert verdict(0.95, 0.9, (2.9, 3.0))[0] == "fine-tune"  # keeps the gain, loses speed
    assert verdict(0.5, None, (2.0, 3.0))[0] == "fine-tune"
    assert verdict(0.1, None, (1.2, 3.0))[0] == "from-scratch"
    v, why = verdict(None, None, (1.4, 1.0))
    assert v == "unknown" and "no gain to retain" in why[0]
    assert "not measured" in verdict(None, None, (None, 2.0))[1][0]


def test_pick_data_file_prefers_json_of_the_split():
    from eagle3kit.live.suites import pick_data_file

    files = [
        ".gitattributes",
        "README.md",
        "data/train-00000-of-00001.parquet",
        "raw/question.jsonl",
        "data/test-00000.parquet",
        "train.jsonl",
    ]
    assert pick_data_file(files, "train") == "train.jsonl"
    assert pick_data_file(files, "test") == "data/test-00000.parquet"
    assert pick_data_file(["README.md"], "test") is None


def test_hub_path_falls_back_to_the_listing(tmp_path, monkeypatch):
    """The hub calls are replaced by local stand-ins (no network in tests): the file is not in
    the cache, the hub answers (the probe finds it), the named file is missing (a 404: what
    huggingface_hub raises as RemoteEntryNotFoundError), and the listing offers the parquet
    export's JSON twin."""
    import httpx2
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError, RemoteEntryNotFoundError

    from eagle3kit.live import suites

    local = _jsonl(tmp_path / "train.jsonl", [{"prompt": ["t1", "t2"], "prompt_id": 7}])
    asked = []

    def download(repo, filename, repo_type=None, local_files_only=False):
        if local_files_only:
            raise LocalEntryNotFoundError("not in the cache")
        asked.append((repo, filename, repo_type))
        if filename != "data/train.jsonl":
            response = httpx2.Response(404, request=httpx2.Request("HEAD", "https://hub/x"))
            raise RemoteEntryNotFoundError("404", response=response)
        return str(local)

    monkeypatch.delenv("HF_HUB_OFFLINE")  # online, as a user with network runs it
    monkeypatch.setattr(suites, "hub_unreachable", lambda: None)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(
        huggingface_hub,
        "list_repo_files",
        lambda repo, repo_type=None: ["README.md", "data/train.jsonl"],
    )
    ps = load_suite("mt-bench")
    assert [p.turns for p in ps] == [("t1", "t2")]
    assert asked == [
        ("HuggingFaceH4/mt_bench_prompts", "raw/question.jsonl", "dataset"),
        ("HuggingFaceH4/mt_bench_prompts", "data/train.jsonl", "dataset"),
    ]


def _hub_endpoint(kind: str):
    """A local hub endpoint: 'refused' (nothing listens), 'silent' (a socket that takes the
    connection and never answers, as a black-holed network does; its stop() returns how many
    connections it took) or 'answering' (an HTTP server that answers 404 to everything: the
    hub is there, the file is not)."""
    import contextlib
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler

    from local_server import QuietServer

    if kind == "answering":

        class NotFound(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _404(self):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_HEAD = _404

        srv = QuietServer(("127.0.0.1", 0), NotFound)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{srv.server_address[1]}", srv.shutdown
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    if kind == "refused":
        s.close()
        return f"http://127.0.0.1:{port}", lambda: None
    s.listen(8)
    held = []  # the connections taken and never answered: their count is the attempts

    def take():
        with contextlib.suppress(OSError):  # closed by stop()
            while True:
                held.append(s.accept()[0])

    threading.Thread(target=take, daemon=True).start()

    def stop():
        s.close()
        for c in held:
            c.close()
        return len(held)

    return f"http://127.0.0.1:{port}", stop


@pytest.mark.slow  # waits on a timeout by design (seconds)
@pytest.mark.timeout
@pytest.mark.parametrize("kind", ["refused", "silent", "answering"])
def test_a_suite_with_the_hub_unreachable_fails_fast_or_reads_the_cache(tmp_path, kind):
    """HF_HUB_OFFLINE not set and the hub unreachable (the user just is offline):
    huggingface_hub alone retries for ~47 s (or, black-holed, waits without end); one short
    attempt must give the clear error within a few seconds, and a suite already in the cache
    must load without waiting on the network at all. When the hub answers, the run goes on
    to the hub's own answer (here a 404), and the error does not blame the network."""
    import os
    import subprocess
    import sys

    url, stop = _hub_endpoint(kind)
    repo = tmp_path / "datasets--HuggingFaceH4--MATH-500"
    commit = "1" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    _jsonl(repo / "snapshots" / commit / "test.jsonl", [{"problem": "1+1?"}])
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=url, HF_HUB_CACHE=str(tmp_path), HF_HOME=str(tmp_path / "home"))
    code = (
        "from eagle3kit.live.suites import load_suite\n"
        "print([p.turns for p in load_suite('math-500')])\n"
        "try:\n    load_suite('mt-bench')\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n"
    )
    try:  # a bound, not a figure: without its own timeout the silent hub is waited on forever
        run = [sys.executable, "-c", code]
        r = subprocess.run(run, env=env, capture_output=True, text=True, timeout=600)
    finally:
        attempts = stop()
    cached, err = r.stdout.splitlines()
    assert cached == "[('1+1?',)]", r.stderr
    assert err.startswith("Eagle3Error --suite: cannot fetch raw/question.jsonl of the hub")
    assert err.endswith("give a local file as NAME=PATH")
    assert ("cannot reach" in err) == (kind != "answering"), err
    if kind == "silent":  # one short request for both suites, none for the cached one
        assert attempts == 1, attempts
