"""Engine capture (`data capture --engine vllm`) through a fake vLLM on loopback.

The fake (tests/fake_vllm_capture.py) runs the zoo tiny target and speaks vLLM's
`extract_hidden_states` + `ExampleHiddenStatesConnector` protocol; it is launched with the
JSON that `data capture --launch-command` prints, so the printed line is what is tested.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch
from fake_vllm_capture import FakeVllmCapture
from test_store import make_data

from eagle3kit.data.store import FeatureStore

TOPK, SHARD = 16, 40


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from eagle3kit import zoo
    from eagle3kit.data.store import capture
    from eagle3kit.model.target import TargetModel

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("engine")
    model_dir = str(zoo.get("llama-v1", size="tiny"))
    tm = TargetModel.from_pretrained(model_dir)
    ids = make_data(tmp / "data", tm.vocab_size)
    capture(tmp / "data", tm, tmp / "inproc", topk=TOPK, shard_tokens=SHARD)
    yield {"model": model_dir, "tmp": tmp, "ids": ids, "tm": tm}
    torch.set_num_threads(n)


def launch_line(cli, env, states: Path, *extra: str):
    """`data capture --target TINY --launch-command --states-dir STATES EXTRA...`."""
    return cli(
        "data",
        "capture",
        "--target",
        env["model"],
        "--launch-command",
        "--states-dir",
        states,
        *extra,
    )


def launch(cli, env, states: Path, *extra: str) -> tuple[dict, dict, str]:
    """(speculative-config, kv-transfer-config, the line) from `--launch-command`."""
    r = cli("data", "capture", "--target", env["model"], "--launch-command")
    assert r.code == 2 and "--states-dir" in r.err  # the shared directory is required
    r = launch_line(cli, env, states)
    assert r.code == 0, r.err
    line = r.out.strip()
    argv = shlex.split(line)
    assert argv[:3] == ["vllm", "serve", env["model"]]
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    return spec, kv, line


def engine_capture(cli, env, url: str, states: Path, out: Path, *extra: str):
    return cli(
        "data",
        "capture",
        env["tmp"] / "data",
        "--target",
        env["model"],
        "--engine",
        "vllm",
        "--url",
        url,
        "--states-dir",
        states,
        "-o",
        out,
        "--topk",
        str(TOPK),
        "--shard-tokens",
        str(SHARD),
        "--timeout",
        "10",
        "--lock-timeout",
        "5",
        *extra,
    )


def test_launch_command(cli, env, tmp_path):
    spec, kv, line = launch(cli, env, tmp_path / "hs")
    # the zoo tiny target: 8 layers, default aux h[2, 4, 5]; vLLM id k = h[k], id 8 = last
    assert spec == {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [2, 4, 5, 8]}},
    }
    assert kv == {
        "kv_connector": "ExampleHiddenStatesConnector",
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": str(tmp_path / "hs")},
    }
    assert "--dtype float32" in line and "--no-enable-chunked-prefill" in line
    r = launch_line(
        cli,
        env,
        tmp_path,
        "--aux-layers",
        "1",
        "3",
        "6",
    )
    assert r.code == 0 and "[1,3,6,8]" in r.out
    r = launch_line(
        cli,
        env,
        tmp_path,
        "--json",
    )
    doc = json.loads(r.out)
    assert doc["kind"] == "eagle3kit.launch_command" and doc["schema"] == 1
    assert doc["layer_ids"] == [2, 4, 5, 8] and doc["h_indices"] == [2, 4, 5]


def compare_stores(a: Path, b: Path) -> None:
    """Tensor by tensor. Tolerances: tokens, masks, target argmax and teacher ids exactly equal;
    teacher log-probs within 1e-3 (stored float16); aux within one float8_e4m3 step of each
    other: |a - b| <= 2^-3 max(|a|, |b|) + 2^-9 s (s = the row's scale; 2^-9 s is the subnormal
    step), since the two sides quantise float32 states that may differ in the last bits."""
    ma, mb = (json.loads((p / "manifest.json").read_text()) for p in (a, b))
    for key in ("format", "aux_layers", "tokens", "samples", "data", "vocab", "quantisation"):
        assert ma[key] == mb[key], key
    assert [(s["tokens"], s["samples"]) for s in ma["shards"]] == [
        (s["tokens"], s["samples"]) for s in mb["shards"]
    ]
    ta, tb = dict(ma["target"]), dict(mb["target"])
    assert tb.pop("capture")["h_indices"] == ma["aux_layers"]
    ta.pop("name_or_path"), tb.pop("name_or_path")  # where the target lives, not what it is
    assert ta == tb
    A, B = FeatureStore(a, verify=True), FeatureStore(b, verify=True)
    assert A.ids == B.ids
    for i in range(len(A)):
        ra, rb = A._read(i), B._read(i)  # noqa: SLF001 - the shard rows themselves
        assert ra.keys() == rb.keys()
        for key in ("input_ids", "loss_mask", "target_argmax", "teacher_ids"):
            assert torch.equal(ra[key], rb[key]), (i, key)
        assert torch.allclose(ra["teacher_logp"].float(), rb["teacher_logp"].float(), atol=1e-3)
    fa, fb = A.get(list(range(len(A)))), B.get(list(range(len(B))))
    s = torch.stack([A._read(i)["aux_scale"] for i in range(len(A))][:1])  # noqa: SLF001
    tol = 2**-3 * torch.maximum(fa.aux.abs(), fb.aux.abs()) + 2**-9 * float(s.max())
    assert ((fa.aux - fb.aux).abs() <= tol).all()


def test_engine_store_equals_inprocess(cli, env, tmp_path):
    states = tmp_path / "hs"
    states.mkdir()
    spec, kv, _ = launch(cli, env, states)
    with FakeVllmCapture(env["model"], spec, kv) as fake:
        r = engine_capture(cli, env, fake.url, states, tmp_path / "eng", "--json")
        assert r.code == 0, r.err
        assert fake.requests == len(env["ids"])
    doc = json.loads(r.out)
    assert doc["engine"]["layer_ids"] == [2, 4, 5, 8] and doc["complete"] is True
    compare_stores(env["tmp"] / "inproc", tmp_path / "eng")
    assert list(states.iterdir()) == []  # every file and lock read, then removed
    # a rerun of the finished store sends nothing
    with FakeVllmCapture(env["model"], spec, kv) as fake:
        r = engine_capture(cli, env, fake.url, states, tmp_path / "eng")
        assert r.code == 0, r.err and fake.requests == 0


FAULTS = [
    # (fault, launched layer ids or None = the printed ones, what the line must say)
    ("n_minus_1", None, "hidden_states has 3 layers, expected 4 (layer ids [2, 4, 5, 8])"),
    ("few_positions", None, "positions in hidden_states and"),
    ("http500", None, "HTTP 500 (EngineCore encountered an issue)"),
    ("stuck", None, "still locked by the writer after 1 s"),
    ("no_file", None, "the writer released its lock without writing the file"),
    (None, [2, 4, 5], "hidden_states has 3 layers, expected 4"),
    (None, [2, 4, 5, 7], "last layer id is not 8"),
]


@pytest.mark.timeout
@pytest.mark.parametrize(("fault", "ids", "says"), FAULTS)
def test_faults_give_one_line(cli, env, tmp_path, fault, ids, says):
    states = tmp_path / "hs"
    states.mkdir()
    spec, kv, _ = launch(cli, env, states)
    if ids is not None:
        spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    with FakeVllmCapture(env["model"], spec, kv, fault=fault, lifetime=30) as fake:
        r = engine_capture(cli, env, fake.url, states, tmp_path / "eng", "--lock-timeout", "1")
    assert r.code == 2
    lines = [x for x in r.err.splitlines() if "error" in x]
    assert len(lines) == 1 and "Traceback" not in r.err, r.err
    assert "sample q" in lines[0] and says in lines[0], lines[0]


@pytest.mark.slow  # waits on timeouts by design (seconds)
@pytest.mark.timeout
def test_a_server_that_never_answers_times_out(cli, env, tmp_path):
    states = tmp_path / "hs"
    states.mkdir()
    spec, kv, _ = launch(cli, env, states)
    with FakeVllmCapture(env["model"], spec, kv, fault="no_answer", lifetime=30) as fake:
        r = engine_capture(cli, env, fake.url, states, tmp_path / "eng", "--timeout", "0.5")
    assert r.code == 2 and "sample q0" in r.err and "no answer within 0.5 s" in r.err, r.err


def test_the_fake_refuses_what_vllm_refuses(env, tmp_path):
    from fake_vllm_capture import check_launch

    kv = {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer"}
    ids = {"draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [2, 8]}}}
    ok = {"method": "extract_hidden_states", "num_speculative_tokens": 1, **ids}
    assert check_launch(ok, kv) == ([2, 8], "/tmp")  # the connector's default path
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        check_launch({**ok, "num_speculative_tokens": 2}, kv)
    with pytest.raises(ValueError, match="method"):
        check_launch({**ok, "method": "eagle3"}, kv)
    with pytest.raises(ValueError, match="kv-transfer-config"):
        check_launch(ok, {**kv, "kv_connector": "ExampleConnector"})


def test_server_down_and_layer_mismatch_before_any_request(cli, env, tmp_path):
    states = tmp_path / "hs"
    states.mkdir()
    spec, kv, _ = launch(cli, env, states)
    fake = FakeVllmCapture(env["model"], spec, kv).start()
    url = fake.url
    # the server runs [2, 4, 5, 8]; the user says it runs ids without the last layer: refused
    r = engine_capture(cli, env, url, states, tmp_path / "a", "--layer-ids", "2,4,5")
    assert r.code == 2 and "teacher needs id 8" in r.err
    r = engine_capture(cli, env, url, states, tmp_path / "b", "--layer-ids", "3,4,5,8")
    assert r.code == 2 and "the drafter reads h[2, 4, 5]" in r.err
    assert fake.requests == 0
    fake.stop()
    r = engine_capture(cli, env, url, states, tmp_path / "c", "--timeout", "2")
    assert r.code == 2 and "cannot reach the server" in r.err and "sample q0" in r.err
    assert len(r.err.strip().splitlines()) <= 2  # the progress bar's last line, and the error


def test_sglang_points_to_vllm(cli, env, tmp_path):
    r = cli(
        "data",
        "capture",
        env["tmp"] / "data",
        "--target",
        env["model"],
        "--engine",
        "sglang",
        "-o",
        tmp_path / "s",
    )
    assert r.code == 2 and "Use --engine vllm" in r.err and "return_hidden_states" in r.err


def test_one_engine_capture_holds_the_probe_layers(cli, env, tmp_path):
    """`--probe-layers` without a drafter: the default ids (2, 4, 5) under both readings, h[X]
    = h[2, 4, 5] and h[X+1] = h[3, 5, 6]; so the server captures ids [2, 3, 4, 5, 6, 8] and
    the store holds h[2, 4, 5, 3, 6], the drafter's first. It equals the in-process capture
    with the same options, and the drafter's columns are picked from it by h-index."""
    states = tmp_path / "hs"
    states.mkdir()
    r = launch_line(
        cli,
        env,
        states,
        "--probe-layers",
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["layer_ids"] == [2, 3, 4, 5, 6, 8] and doc["h_indices"] == [2, 4, 5, 3, 6]
    assert doc["drafter_h_indices"] == [2, 4, 5]
    argv = shlex.split(doc["launch_command"])
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    with FakeVllmCapture(env["model"], spec, kv) as fake:
        r = engine_capture(cli, env, fake.url, states, tmp_path / "eng", "--probe-layers")
        assert r.code == 0, r.err
    r = cli(
        "data",
        "capture",
        env["tmp"] / "data",
        "--target",
        env["model"],
        "-o",
        tmp_path / "inproc",
        "--topk",
        str(TOPK),
        "--shard-tokens",
        str(SHARD),
        "--probe-layers",
    )
    assert r.code == 0, r.err
    compare_stores(tmp_path / "inproc", tmp_path / "eng")
    man = json.loads((tmp_path / "eng" / "manifest.json").read_text())
    assert man["aux_layers"] == [2, 4, 5, 3, 6] and man["drafter_layers"] == [2, 4, 5]
    assert man["target"]["capture"]["drafter_h_indices"] == [2, 4, 5]
    rows = list(range(len(env["ids"])))
    picked = FeatureStore(tmp_path / "eng").get(rows, [2, 4, 5]).aux
    plain = FeatureStore(env["tmp"] / "inproc").get(rows).aux  # the drafter's layers only
    tol = 2**-3 * torch.maximum(picked.abs(), plain.abs()) + 1e-6 * float(plain.abs().max())
    assert picked.shape == plain.shape and ((picked - plain).abs() <= tol).all()


def test_explicit_dtype_sets_the_launch_line_and_the_states_checked(cli, env, tmp_path):
    """--dtype with --engine: the server's dtype in the printed line and the dtype the states
    must arrive in (a float32 deployment of a bf16 checkpoint); the checkpoint's by default."""
    states = tmp_path / "hs"
    states.mkdir()
    r = launch_line(cli, env, states, "--dtype", "bf16")
    assert r.code == 0 and "--dtype bfloat16" in r.out, r.err
    r = launch_line(cli, env, states, "--dtype", "fp99")
    assert r.code == 2 and "--dtype" in r.err and "'fp99'" in r.err, r.err
    spec, kv, _ = launch(cli, env, states)  # the fake serves the tiny target in float32
    with FakeVllmCapture(env["model"], spec, kv, lifetime=60) as fake:
        r = engine_capture(cli, env, fake.url, states, tmp_path / "bf", "--dtype", "bfloat16")
        assert r.code == 2 and "dtype float32, expected bfloat16" in r.err, r.err
        r = engine_capture(cli, env, fake.url, states, tmp_path / "f32", "--dtype", "float32")
        assert r.code == 0, r.err
    compare_stores(env["tmp"] / "inproc", tmp_path / "f32")
