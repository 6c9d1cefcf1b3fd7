"""Partial targets are first-class; a target or drafter with missing tensors is never run.

A partial target is what a user of a 1T-parameter model downloads: config, tokenizer,
`model.safetensors.index.json` and only the shard holding the embedding, final norm and lm_head
(here: a zoo tiny member split into three shards, two of them deleted; an MHA/Llama one and an
MLA/DeepSeek one). The commands that need only those tensors accept it and read nothing else
(counted by wrapping `Checkpoint.info`, which every target tensor read goes through); every
in-process command refuses it in one line. The same holds for `target slim`'s output and for a
Hub id whose local Hub cache (HF_HUB_OFFLINE=1) holds only that shard.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
import torch
from test_store import make_data

from eagle3kit.checkpoint.io.safetensors_io import Checkpoint

HEADS = ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight")
SHARDS = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
ARCHS = ("llama-v1", "dsv3-v1")

# one training step of the tiniest shapes, from a store: `train` only has to run
ONE_STEP = (
    *("--steps", "1", "--ttt-steps", "1", "--batch-size", "2", "--max-len", "24"),
    *("--heldout", "0.25", "--eval-samples", "2", "--eval-batch", "2", "--threads", "1", "--json"),
)


def make_partial(src: Path, dst: Path, *, keep_all: bool = False) -> dict[str, str]:
    """`src` re-sharded in three (heads in shard 1), shards 2 and 3 deleted; the weight_map."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.suffix != ".safetensors" and f.name != "zoo.json":
            shutil.copy(f, dst / f.name)
    with safe_open(str(src / "model.safetensors"), "pt") as f:
        full = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no iter)
    rest = sorted(k for k in full if k not in HEADS)
    parts = [HEADS, rest[: len(rest) // 2], rest[len(rest) // 2 :]]
    wmap = {k: SHARDS[i] for i, names in enumerate(parts) for k in names}
    for i, names in enumerate(parts):
        if i == 0 or keep_all:
            save_file({k: full[k] for k in names}, str(dst / SHARDS[i]), {"format": "pt"})
    index = {"metadata": {"total_size": 0}, "weight_map": wmap}
    (dst / "model.safetensors.index.json").write_text(json.dumps(index))
    return wmap


def make_drafter(target_dir: Path, out: Path) -> None:
    from eagle3kit.core.spec import spec_for_target
    from eagle3kit.model.drafter import Eagle3Drafter
    from eagle3kit.train.outputs import save_servable

    spec = spec_for_target(json.loads((target_dir / "config.json").read_text()))
    torch.manual_seed(0)
    save_servable(out, spec, Eagle3Drafter(spec).canonical_state(), None)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Per arch: the tiny member, its partial copy, a slim copy, a drafter, DATA, a store."""
    from eagle3kit import zoo
    from eagle3kit.checkpoint.target_slim import slim_target
    from eagle3kit.data.store import capture
    from eagle3kit.model.target import TargetModel

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("partial")
    out = {}
    for arch in ARCHS:
        full = Path(zoo.get(arch, size="tiny"))
        d = tmp / arch
        wmap = make_partial(full, d / "partial")
        slim_target(str(full), d / "slim")
        make_drafter(full, d / "drafter")
        tm = TargetModel.from_pretrained(full)
        make_data(d / "data", tm.vocab_size, n=8)
        capture(d / "data", tm, d / "store", topk=8, shard_tokens=64)
        out[arch] = {"full": full, "dir": d, "wmap": wmap}
    yield out
    torch.set_num_threads(n)


@pytest.fixture
def reads(monkeypatch):
    """The names of the target tensors read (every read goes through Checkpoint.info)."""
    seen: list[str] = []
    real = Checkpoint.info

    def info(self, name):
        seen.append(name)
        return real(self, name)

    monkeypatch.setattr(Checkpoint, "info", info)
    return seen


def _target(env, arch: str, kind: str) -> Path:
    return env[arch]["dir"] / kind


# ---------------------------------------------------------------- accepted, reading only heads


@pytest.mark.parametrize("kind", ["partial", "slim"])
@pytest.mark.parametrize("arch", ARCHS)
def test_inspect_and_compat_accept(cli, env, arch, kind):
    t = _target(env, arch, kind)
    r = cli("inspect", t, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["role"] == "target" and {x["name"] for x in doc["tensors"]} == set(HEADS)
    if kind == "partial":
        absent = len(env[arch]["wmap"]) - len(HEADS)
        assert doc["partial"] == {"tensors": absent, "shards": SHARDS[1:]}
        assert "partial: " in cli("inspect", t).out
    else:
        assert doc["partial"] is None
    r = cli("compat", env[arch]["dir"] / "drafter", t, "--json")
    assert r.code in (0, 1) and r.err == "", r.err  # the check ran (1: an engine's finding)
    assert json.loads(r.out)["mode"] == "drafter-target"


@pytest.mark.parametrize("kind", ["partial", "slim"])
@pytest.mark.parametrize("arch", ARCHS)
def test_capture_launch_command_accepts(cli, env, arch, kind, tmp_path):
    t = _target(env, arch, kind)
    r = cli("data", "capture", "--target", t, "--launch-command", "--states-dir", tmp_path)
    assert r.code == 0, r.err
    argv = shlex.split(r.out.strip())
    assert argv[:3] == ["vllm", "serve", str(t)]


@pytest.mark.parametrize("arch", ARCHS)
def test_output_head_reads_only_norm_and_lm_head(env, arch, reads):
    """What engine capture builds from the target: the norm and lm_head, equal to the full
    model's, and no other tensor read."""
    from safetensors.torch import load_file

    from eagle3kit.checkpoint.io.hub_files import open_target
    from eagle3kit.live.heads import OutputHead

    head = OutputHead(open_target(str(_target(env, arch, "partial"))))
    assert reads == ["model.norm.weight", "lm_head.weight"]
    full = load_file(str(env[arch]["full"] / "model.safetensors"))
    assert torch.equal(head.norm_weight, full["model.norm.weight"])
    assert torch.equal(head.lm_head, full["lm_head.weight"])


@pytest.mark.parametrize("kind", ["partial", "slim"])
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.slow
def test_train_features_reads_only_the_embedding(cli, env, arch, kind, reads, tmp_path):
    d = env[arch]["dir"]
    r = cli(
        "train",
        "--target",
        _target(env, arch, kind),
        "--features",
        d / "store",
        "-o",
        tmp_path / "run",
        *ONE_STEP,
    )
    assert r.code == 0, r.err
    assert set(reads) == {"model.embed_tokens.weight"}, reads
    assert (tmp_path / "run" / "best" / "model.safetensors").is_file()


@pytest.mark.parametrize("arch", ARCHS)
def test_eval_features_and_convert_read_only_the_embedding(cli, env, arch, reads, tmp_path):
    """The drafter carries no embedding: eval --features and convert --embed-from read the
    partial target's, and nothing else of it."""
    d, t = env[arch]["dir"], _target(env, arch, "partial")
    r = cli("eval", "--features", d / "store", "--target", t, "--drafter", d / "drafter", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["kind"] == "eagle3kit.eval"
    assert set(reads) == {"model.embed_tokens.weight"}, reads
    reads.clear()
    out = tmp_path / "conv"
    r = cli("convert", d / "drafter", "--to", "vllm", "--embed-from", t, "-o", out, "--json")
    assert r.code == 0, r.err
    assert set(reads) == {"model.embed_tokens.weight"}
    from safetensors.torch import load_file

    emb = load_file(str(env[arch]["full"] / "model.safetensors"))["model.embed_tokens.weight"]
    assert torch.equal(load_file(str(out / "model.safetensors"))["embed_tokens.weight"], emb)


@pytest.mark.parametrize("arch", ARCHS)
def test_engine_capture_from_a_partial_target(cli, env, arch, reads, tmp_path):
    """`data capture --engine vllm` through the fake vLLM (which runs the whole member) with
    `--target` the partial directory: the store equals the in-process one, and of the target
    only the final norm and lm_head were read."""
    from fake_vllm_capture import FakeVllmCapture
    from test_engine_capture import compare_stores

    d, t, states = env[arch]["dir"], _target(env, arch, "partial"), tmp_path / "hs"
    states.mkdir()
    r = cli("data", "capture", "--target", t, "--launch-command", "--states-dir", states)
    argv = shlex.split(r.out)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
    reads.clear()
    with FakeVllmCapture(str(env[arch]["full"]), spec, kv) as fake:
        r = cli(
            "data",
            "capture",
            d / "data",
            "--target",
            t,
            "--engine",
            "vllm",
            "--url",
            fake.url,
            "--states-dir",
            states,
            "-o",
            tmp_path / "store",
            "--topk",
            "8",
            "--shard-tokens",
            "64",
            "--timeout",
            "10",
            "--lock-timeout",
            "5",
        )
    assert r.code == 0, r.err
    assert set(reads) == {"model.norm.weight", "lm_head.weight"}, reads
    compare_stores(d / "store", tmp_path / "store")


def test_a_needed_tensor_in_an_absent_shard_names_it(env):
    from eagle3kit.checkpoint.io.hub_files import open_target
    from eagle3kit.checkpoint.io.tensor_read import read_tensor
    from eagle3kit.core.errors import Eagle3Error

    ckpt = open_target(str(_target(env, "llama-v1", "partial")))
    name = next(n for n, s in env["llama-v1"]["wmap"].items() if s == SHARDS[2])
    with pytest.raises(Eagle3Error) as e:
        read_tensor(ckpt, name)
    assert f"tensor {name!r} is in shard {SHARDS[2]!r}, which is not here" in str(e.value)


def test_a_drafter_is_still_read_whole(env, tmp_path, cli):
    """A sharded drafter missing a shard is refused as before (its tensors are all needed)."""
    from safetensors.torch import load_file, save_file

    src = env["llama-v1"]["dir"] / "drafter"
    d = tmp_path / "drafter"
    d.mkdir()
    shutil.copy(src / "config.json", d / "config.json")
    t = load_file(str(src / "model.safetensors"))
    names = sorted(t)
    save_file({k: t[k] for k in names[:3]}, str(d / "a.safetensors"))
    wmap = {k: ("a.safetensors" if i < 3 else "b.safetensors") for i, k in enumerate(names)}
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    r = cli("inspect", d)
    assert r.code == 2 and "shard 'b.safetensors' listed in weight_map is missing" in r.err


# ---------------------------------------------------------------- refused in process


def _commands(d: Path, t: Path, tmp: Path) -> dict[str, list]:
    dr, data = d / "drafter", d / "data"
    return {
        "eval": ["eval", "--target", t, "--drafter", dr, "--data", data],
        "probe": ["probe", "--target", t, "--drafter", dr, "--data", data],
        "bench": ["bench", "--target", t, "--drafter", dr, "--max-new-tokens", "4"],
        "generate": ["generate", "--target", t, "--drafter", dr, "--prompt", "def f"],
        "train": ["train", "--target", t, "--data", data, "-o", tmp / "run", "--steps", "1"],
    }


def _refused(r, *words: str) -> None:
    lines = r.err.strip().splitlines()
    assert r.code == 2 and len(lines) == 1, (r.code, r.err)
    assert all(w in lines[0] for w in words), lines[0]
    assert "--url" in lines[0] and "--features" in lines[0]
    assert "LOAD REPORT" not in r.err and "MISSING" not in r.err
    assert r.out == ""  # no tau, verdict or speed


@pytest.mark.parametrize("kind", ["partial", "slim"])
@pytest.mark.parametrize("arch", ARCHS)
def test_every_in_process_command_refuses(cli, env, arch, kind, tmp_path):
    d, t = env[arch]["dir"], _target(env, arch, kind)
    n_layers = json.loads((t / "config.json").read_text())["num_hidden_layers"]
    absent = len(env[arch]["wmap"]) - len(HEADS)
    says = (
        (f"{absent} tensor(s) missing", SHARDS[1])
        if kind == "partial"
        else (f"no tensors for {n_layers} of its {n_layers} decoder layers",)
    )
    for argv in _commands(d, t, tmp_path).values():
        _refused(cli(*argv), str(t), *says)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("change", ["missing", "extra"])
@pytest.mark.parametrize("arch", ARCHS)
def test_one_missing_or_extra_tensor_is_refused(cli, env, arch, change, tmp_path):
    """Every layer has tensors; one is gone (Llama: a plain weight, caught by transformers'
    account after loading; DeepSeek: one expert's part of a fused MoE weight, caught from the
    headers, since transformers can only fail on it), or one is there the model lacks."""
    from safetensors.torch import load_file, save_file

    full, t = env[arch]["full"], tmp_path / "holey"
    shutil.copytree(full, t)
    w = load_file(str(full / "model.safetensors"))
    mlp = "model.layers.1.mlp."
    gone = mlp + ("down_proj.weight" if arch == "llama-v1" else "experts.2.up_proj.weight")
    if change == "missing":
        del w[gone]
        want = f"1 tensor(s) missing ({gone})"
    else:
        w["model.layers.0.extra.weight"] = w["model.norm.weight"].clone()
        want = "1 unexpected tensor(s) (model.layers.0.extra.weight)"
    save_file(w, str(t / "model.safetensors"), {"format": "pt"})
    d = env[arch]["dir"]
    _refused(cli("bench", "--target", t, "--drafter", d / "drafter"), str(t), want)


def test_a_drafter_with_an_extra_tensor_is_refused(env, tmp_path):
    from safetensors.torch import load_file, save_file

    from eagle3kit.core.errors import Eagle3Error
    from eagle3kit.model.loading import load_drafter

    src, d = env["llama-v1"]["dir"] / "drafter", tmp_path / "drafter"
    shutil.copytree(src, d)
    w = load_file(str(d / "model.safetensors"))
    w["midlayer.extra.weight"] = w["norm.weight"].clone()
    save_file(w, str(d / "model.safetensors"))
    with pytest.raises(Eagle3Error) as e:
        load_drafter(str(d))
    assert f"{d}: 1 unexpected tensor(s) (midlayer.extra.weight)" in str(e.value)


# ---------------------------------------------------------------- a Hub id, offline, local cache

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub(env, tmp_path, monkeypatch):
    """A local Hub cache (huggingface_hub's layout: refs/main -> snapshots/COMMIT) holding
    org/k25: the DeepSeek tiny member's config, tokenizer, index and the heads' shard only;
    org/k25-all holds every shard. HF_HUB_OFFLINE=1: hf_hub_download reads the cache only."""
    import huggingface_hub.constants as C

    root = tmp_path / "hub"
    for repo, keep_all in (("k25", False), ("k25-all", True)):
        folder = root / f"models--org--{repo}"
        make_partial(env["dsv3-v1"]["full"], folder / "snapshots" / COMMIT, keep_all=keep_all)
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(COMMIT)
    monkeypatch.setattr(C, "HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # no local folder named org/
    return root


def test_hub_id_reads_only_the_shards_it_needs(env, hub, reads):
    """A shard in the cache is read by header; one that is not is fetched (hf_hub_download)
    only when a tensor in it is read, and named in one line when it cannot be."""
    from safetensors.torch import load_file

    from eagle3kit.checkpoint.io.hub_files import open_target
    from eagle3kit.checkpoint.io.tensor_read import read_tensor
    from eagle3kit.core.errors import Eagle3Error

    wmap = env["dsv3-v1"]["wmap"]
    layer = next(n for n, s in wmap.items() if s == SHARDS[2])
    full = load_file(str(env["dsv3-v1"]["full"] / "model.safetensors"))
    ckpt = open_target("org/k25")
    assert set(ckpt.tensors) == set(HEADS) and ckpt.missing_shards() == SHARDS[1:]
    assert torch.equal(read_tensor(ckpt, "lm_head.weight"), full["lm_head.weight"])
    with pytest.raises(Eagle3Error) as e:
        read_tensor(ckpt, layer)
    msg = str(e.value)
    assert f"org/k25/{SHARDS[2]}: not in the local Hub cache" in msg
    assert f"hf download org/k25 {SHARDS[2]}" in msg
    # the shard arrives in the cache (as a download would put it): read on first use
    snap = hub / "models--org--k25-all" / "snapshots" / COMMIT
    shutil.copy(snap / SHARDS[2], hub / "models--org--k25" / "snapshots" / COMMIT / SHARDS[2])
    assert torch.equal(read_tensor(ckpt, layer), full[layer])
    assert [Path(f).name for f in ckpt.files] == [SHARDS[0], SHARDS[2]]
    assert SHARDS[1] in ckpt.missing_shards()  # never fetched: nothing read from it
    every = open_target("org/k25-all")
    assert not every.absent and set(every.tensors) == set(wmap)


def test_hub_id_through_the_commands(cli, env, hub, reads, tmp_path):
    r = cli("inspect", "org/k25", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["partial"]["shards"] == SHARDS[1:] and doc["has_tokenizer"] is True
    r = cli("data", "capture", "--target", "org/k25", "--launch-command", "--states-dir", tmp_path)
    assert r.code == 0 and shlex.split(r.out)[:3] == ["vllm", "serve", "org/k25"], r.err
    r = cli("target", "slim", "org/k25", "-o", tmp_path / "slim", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["shards_read"] == [SHARDS[0]]
    local = env["dsv3-v1"]["dir"] / "slim"
    for f in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (tmp_path / "slim" / f).read_bytes() == (local / f).read_bytes(), f
    reads.clear()
    r = cli(
        "train",
        "--target",
        "org/k25",
        "--features",
        env["dsv3-v1"]["dir"] / "store",
        "-o",
        tmp_path / "run",
        *ONE_STEP,
    )
    assert r.code == 0, r.err
    assert set(reads) == {"model.embed_tokens.weight"}
    r = cli("inspect", "org/missing")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert "org/missing: no such local path; as a Hub repo id (offline)" in r.err


# ---------------------------------------------------------------- target slim


def test_target_slim_writes_only_the_heads_and_refuses_a_full_dir(cli, env, tmp_path):
    from safetensors.torch import load_file

    full = env["llama-v1"]["full"]
    r = cli("target", "slim", env["llama-v1"]["dir"] / "partial", "-o", tmp_path / "s", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["kind"] == "eagle3kit.target_slim" and doc["shards_read"] == [SHARDS[0]]
    got = load_file(str(tmp_path / "s" / "model.safetensors"))
    want = load_file(str(full / "model.safetensors"))
    assert set(got) == set(HEADS) and all(torch.equal(got[k], want[k]) for k in HEADS)
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "s" / f).read_bytes() == (full / f).read_bytes()
    r = cli("target", "slim", full, "-o", tmp_path / "s")
    assert r.code == 2 and "not empty" in r.err and "--overwrite" in r.err
    assert load_file(str(tmp_path / "s" / "model.safetensors")).keys() == got.keys()
    r = cli("target", "slim", full, "-o", tmp_path / "s", "--overwrite")
    assert r.code == 0 and "lm_head" in r.out, r.err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left
