"""convert: lossless round trips between layouts (tensors and drafter logits), refusals, launch
lines."""

from __future__ import annotations

import json

import pytest
import torch
from ckpt_helpers import random_drafter, tiny_spec
from conftest import run_cli
from safetensors.torch import load_file

from eagle3kit.checkpoint.eagle3.reader import read_drafter
from eagle3kit.core.spec import NORM_FLAGS
from eagle3kit.model.drafter import Eagle3Drafter


def _logits(path) -> torch.Tensor:
    torch.manual_seed(123)
    m = Eagle3Drafter.from_pretrained(path)
    spec = m.spec
    ids = torch.randint(0, spec.vocab_size, (2, 7))
    aux = torch.randn(2, 7, spec.fc_in_features)
    with torch.no_grad():
        first = m(ids, aux)
        second = m(ids, first.hidden)  # a later draft step
    return torch.cat([first.logits, second.logits], dim=-1)


@pytest.mark.parametrize("via", ["vllm", "eagle"])
def test_round_trip_sglang(tmp_path, via):
    src = random_drafter(tmp_path / "src", tiny_spec(), "sglang")
    r1 = run_cli("convert", src, "--to", via, "-o", tmp_path / "mid", "--json")
    assert r1.code == 0, r1.err
    r2 = run_cli("convert", tmp_path / "mid", "--to", "sglang", "-o", tmp_path / "back", "--json")
    assert r2.code == 0, r2.err
    a = load_file(src / "model.safetensors")
    b = load_file(tmp_path / "back" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
    mid = load_file(tmp_path / "mid" / "model.safetensors")
    if via == "vllm":
        assert any(k.startswith("layers.0.") for k in mid) and not any(
            k.startswith("midlayer.") for k in mid
        )
    assert torch.equal(_logits(src), _logits(tmp_path / "mid"))
    assert torch.equal(_logits(src), _logits(tmp_path / "back"))
    # the spec survives, aux layers included
    s0, _, _ = read_drafter(str(src))
    s2, _, _ = read_drafter(str(tmp_path / "back"))
    assert s0.replace(tensors=()) == s2.replace(tensors=())


def test_vllm_config_is_explicit(tmp_path):
    src = random_drafter(tmp_path / "src", tiny_spec(), "sglang")
    r = run_cli(
        "convert", src, "--to", "vllm", "-o", tmp_path / "v", "--verifier", "org/target", "--json"
    )
    doc = json.loads(r.out)
    assert (
        "vllm serve org/target" in doc["launch_command"]
        and '"method": "eagle3"' in doc["launch_command"]
    )
    cfg = json.loads((tmp_path / "v" / "config.json").read_text())
    for flag in NORM_FLAGS:
        assert cfg[flag] is False
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 5, 9]  # HF indices
    assert cfg["speculators_config"]["verifier"]["name_or_path"] == "org/target"
    sg = json.loads((src / "config.json").read_text())
    assert sg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 4, 8]  # SGLang adds 1


def test_sglang_launch_command_printed(tmp_path):
    src = random_drafter(tmp_path / "src", tiny_spec(), "vllm")
    r = run_cli("convert", src, "--to", "sglang", "-o", tmp_path / "s", "--verifier", "org/t")
    assert r.code == 0, r.err
    assert "--speculative-algorithm EAGLE3" in r.out and "--speculative-num-draft-tokens 4" in r.out


def test_refuses_lossy_conversion(tmp_path):
    src = random_drafter(tmp_path / "src", tiny_spec(norm_before_residual=True), "vllm")
    r = run_cli("convert", src, "--to", "sglang", "-o", tmp_path / "out")
    assert r.code == 2 and "lossy" in r.err and "norm_before_residual" in r.err
    assert not (tmp_path / "out").exists()
    # vLLM implements it, so this direction is fine
    assert run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "ok").code == 0


def test_refuses_unknown_tensors(tmp_path):
    from eagle3kit.checkpoint.io.safetensors_write import write_safetensors

    src = random_drafter(tmp_path / "src", tiny_spec(), "sglang")
    t = load_file(src / "model.safetensors")
    t["midlayer.extra_gate.weight"] = torch.zeros(3)
    write_safetensors(src / "model.safetensors", t)
    r = run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "out")
    assert r.code == 2 and "midlayer.extra_gate.weight" in r.err


def test_existing_output_is_not_touched(tmp_path):
    src = random_drafter(tmp_path / "src", tiny_spec(), "sglang")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    r = run_cli("convert", src, "--to", "vllm", "-o", out)
    assert r.code == 2 and "not empty" in r.err
    assert (out / "keep.txt").read_text() == "precious" and len(list(out.iterdir())) == 1


def test_bad_layout_name(tmp_path):
    src = random_drafter(tmp_path / "src", tiny_spec(), "sglang")
    r = run_cli("convert", src, "--to", "tgi", "-o", tmp_path / "o")
    assert r.code == 2 and "--to" in r.err


# ---------------------------------------------------------------- refusals (issue 9)


def _bad_drafter(tmp_path, spec=None, **kw):
    from eagle3kit.checkpoint.eagle3.synthetic import write_sparse_drafter

    return write_sparse_drafter(tmp_path / "src", spec or tiny_spec(), "sglang", **kw)


def _vocab():
    from eagle3kit.checkpoint.eagle3.synthetic import default_vocab_map

    return default_vocab_map(tiny_spec())  # d2t int64 [128], t2d bool [512]: every 4th id


def _refused(tmp_path, src, *expect, to=("sglang", "vllm", "eagle")):
    """Every layout: exit 2, one line naming file, field, expected and found; nothing written."""
    for layout in to:
        out = tmp_path / f"out-{layout}"
        r = run_cli("convert", src, "--to", layout, "-o", out)
        assert r.code == 2, (layout, r.err)
        assert len(r.err.strip().splitlines()) == 1 and r.err.startswith("eagle3kit: error: "), (
            r.err
        )
        for e in expect:
            assert e in r.err, (e, r.err)
        assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["src"], layout


def test_refuses_lm_head_rows_not_draft_vocab_size(tmp_path):
    src = _bad_drafter(tmp_path, shape_overrides={"lm_head.weight": (100, 64)})
    _refused(
        tmp_path,
        src,
        "model.safetensors: lm_head.weight: expected 128 rows",
        "draft_vocab_size=128",
        "found 100",
    )


def test_refuses_fc_width_not_target_hidden_size(tmp_path):
    src = _bad_drafter(tmp_path, shape_overrides={"fc.weight": (64, 256)})
    _refused(tmp_path, src, "fc.weight: expected 192 columns", "target_hidden_size=64", "found 256")


def test_one_defect_is_told_once(tmp_path):
    """compat's finding of the same defect is not counted as another problem."""
    src = _bad_drafter(tmp_path, shape_overrides={"fc.weight": (64, 256)})
    r = run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "out")
    assert r.code == 2 and "fc.weight" in r.err and "more problem" not in r.err, r.err


def test_refuses_missing_lm_head(tmp_path):
    src = _bad_drafter(tmp_path, omit=("embed_tokens.weight", "lm_head.weight"))
    _refused(tmp_path, src, "model.safetensors: lm_head.weight: expected a tensor", "found none")


def test_refuses_other_shape_mismatch(tmp_path):
    src = _bad_drafter(tmp_path, shape_overrides={"midlayer.mlp.up_proj.weight": (100, 64)})
    _refused(
        tmp_path, src, "midlayer.mlp.up_proj.weight: expected shape [160, 64]", "found [100, 64]"
    )


def test_refuses_d2t_out_of_range(tmp_path):
    d2t, t2d = _vocab()
    d2t = d2t.copy()
    d2t[-1] += 4  # draft id 127 -> target id 508 + 4 = 512 = vocab_size
    src = _bad_drafter(tmp_path, d2t=d2t, t2d=t2d)
    _refused(tmp_path, src, "d2t: expected target ids < 512", "found 1 beyond", "..512")


def test_refuses_negative_d2t(tmp_path):
    d2t, t2d = _vocab()
    d2t = d2t.copy()
    d2t[1] = -2  # draft id 1 -> target id -1
    src = _bad_drafter(tmp_path, d2t=d2t, t2d=t2d)
    _refused(tmp_path, src, "d2t: expected target ids >= 0, found 1 negative")


def test_refuses_duplicate_d2t(tmp_path):
    d2t, t2d = _vocab()
    d2t = d2t.copy()
    d2t[2] = d2t[1] - 1  # draft id 2 -> 1 + d2t[1] = target id 4, like draft id 1
    src = _bad_drafter(tmp_path, d2t=d2t, t2d=t2d)
    _refused(tmp_path, src, "d2t: expected distinct target ids, found 1")


def test_refuses_float_d2t(tmp_path):
    from eagle3kit.core.atomic import save_safetensors

    src = random_drafter(tmp_path / "src", tiny_spec(), "sglang")
    t = load_file(src / "model.safetensors")
    t["d2t"] = t["d2t"].float()
    save_safetensors(src / "model.safetensors", t)
    _refused(tmp_path, src, "d2t: expected an integer dtype (int64), found float32")


def test_inspect_fails_on_bad_d2t(tmp_path):
    d2t, t2d = _vocab()
    d2t = d2t.copy()
    d2t[-1] += 4
    src = _bad_drafter(tmp_path, d2t=d2t, t2d=t2d)
    r = run_cli("inspect", src)
    assert r.code == 1 and "d2t: expected target ids < 512" in r.out
    r = run_cli("inspect", src, "--json")
    assert r.code == 1 and json.loads(r.out)["vocab_map"]["problems"][0]["code"] == "d2t-range"


def test_eagle_refuses_scaled_rope_and_odd_head_dim(tmp_path):
    rope = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    src = _bad_drafter(tmp_path, tiny_spec(rope_scaling=rope))
    _refused(
        tmp_path,
        src,
        "config.json: refusing a conversion the EAGLE code cannot load",
        "rope_scaling: expected none",
        "llama3",
        to=("eagle",),
    )
    assert run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "v").code == 0


def test_eagle_refuses_heads_times_head_dim_not_hidden(tmp_path):
    src = _bad_drafter(tmp_path, tiny_spec(head_dim=32))  # 4 heads x 32 = 128 != 64
    _refused(
        tmp_path,
        src,
        "num_attention_heads x head_dim: expected hidden_size=64",
        "found 4 x 32 = 128",
        to=("eagle",),
    )
    assert run_cli("convert", src, "--to", "sglang", "-o", tmp_path / "s").code == 0


def _eagle_loads_target_embedding(cfg: dict) -> bool:
    """SafeAILab EAGLE-3 cnets.py: `if load_emb and not hasattr(config, "target_hidden_size")`
    (re-derived, EaModel passes load_emb=True): the target's embedding is loaded only then."""
    return "target_hidden_size" not in cfg


def test_to_eagle_omits_target_hidden_size_when_equal(tmp_path):
    src = _bad_drafter(tmp_path)  # no embed_tokens, target_hidden_size == hidden_size == 64
    r = run_cli("convert", src, "--to", "eagle", "-o", tmp_path / "e")
    assert r.code == 0, r.err
    cfg = json.loads((tmp_path / "e" / "config.json").read_text())
    assert _eagle_loads_target_embedding(cfg) and "target_hidden_size" not in cfg
    # reading the EAGLE file back gives the same target width and aux layers
    s0, _, _ = read_drafter(str(src))
    s1, _, _ = read_drafter(str(tmp_path / "e"))
    assert s1.target_hidden_size == 64 and s1.aux_layers == s0.aux_layers == (2, 5, 9)


def test_to_eagle_other_target_width_needs_own_embedding(tmp_path):
    spec = tiny_spec(target_hidden_size=96)
    src = _bad_drafter(tmp_path, spec)  # no embed_tokens
    _refused(
        tmp_path,
        src,
        "embed_tokens.weight: expected in the drafter when target_hidden_size=96",
        to=("eagle",),
    )
    with_emb = random_drafter(tmp_path / "emb", spec, "sglang")  # carries embed_tokens
    assert run_cli("convert", with_emb, "--to", "eagle", "-o", tmp_path / "e").code == 0
    cfg = json.loads((tmp_path / "e" / "config.json").read_text())
    assert cfg["target_hidden_size"] == 96 and not _eagle_loads_target_embedding(cfg)


def test_vllm_verifier_from_source_or_note(tmp_path):
    src = _bad_drafter(tmp_path)
    r = run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "v")
    assert r.code == 0 and "speculators' own tooling then cannot load the target" in r.err
    cfg = json.loads((tmp_path / "v" / "config.json").read_text())
    assert cfg["speculators_config"]["verifier"]["name_or_path"] is None
    # a verifier recorded in the source is carried over
    r = run_cli("convert", src, "--to", "sglang", "-o", tmp_path / "s", "--verifier", "org/t")
    r = run_cli("convert", tmp_path / "s", "--to", "vllm", "-o", tmp_path / "v2", "--json")
    assert r.code == 0 and json.loads(r.out)["verifier"] == "org/t"
    cfg = json.loads((tmp_path / "v2" / "config.json").read_text())
    assert cfg["speculators_config"]["verifier"]["name_or_path"] == "org/t"


def test_embed_from_target(tmp_path):
    from eagle3kit.core.atomic import atomic_write_json, save_safetensors

    tgt = tmp_path / "target"
    emb = torch.randn(512, 64, generator=torch.Generator().manual_seed(5))  # [V, H]
    save_safetensors(tgt / "model.safetensors", {"model.embed_tokens.weight": emb})
    atomic_write_json(
        tgt / "config.json", {"architectures": ["LlamaForCausalLM"], "hidden_size": 64}
    )
    src = random_drafter(tmp_path / "src", tiny_spec(), "sglang")
    r = run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "v", "--embed-from", tgt)
    assert r.code == 0, r.err
    got = load_file(tmp_path / "v" / "model.safetensors")["embed_tokens.weight"]
    assert torch.equal(got, emb)
    wrong = tmp_path / "wrong"
    save_safetensors(
        wrong / "model.safetensors", {"model.embed_tokens.weight": torch.zeros(512, 32)}
    )
    atomic_write_json(wrong / "config.json", {"hidden_size": 32})
    r = run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "w", "--embed-from", wrong)
    assert r.code == 2 and "expected shape [512, 64]" in r.err and "found [512, 32]" in r.err
    assert not (tmp_path / "w").exists()


def test_sparse_source_stays_sparse_and_umask_respected(tmp_path):
    import os

    from eagle3kit.checkpoint.eagle3.convert import convert

    spec = tiny_spec(
        hidden_size=256,
        intermediate_size=1024,
        head_dim=64,
        target_hidden_size=256,
        vocab_size=4096,
        draft_vocab_size=1024,
    )
    src = _bad_drafter(tmp_path, spec)  # zero weights, ~6 MiB
    old = os.umask(0o022)
    try:
        convert(str(src), "vllm", str(tmp_path / "v"))
    finally:
        os.umask(old)
    f = tmp_path / "v" / "model.safetensors"
    assert f.stat().st_mode & 0o777 == 0o644 and (tmp_path / "v").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "v" / "config.json").stat().st_mode & 0o777 == 0o644
    size = f.stat().st_size
    assert size > 4 << 20 and f.stat().st_blocks * 512 < size // 4, (size, f.stat().st_blocks)
    a, b = load_file(src / "model.safetensors"), load_file(f)
    assert {k.replace("layers.0.", "midlayer.") for k in b} == set(a)
    assert all(torch.equal(a[k.replace("layers.0.", "midlayer.")], v) for k, v in b.items())


def test_refuses_what_compat_alone_fails(tmp_path):
    import numpy as np

    spec = tiny_spec(draft_vocab_size=512)  # full vocab: d2t not required
    t2d = np.zeros(512, dtype=bool)
    t2d[:10] = True  # marks 10 ids, the config says 512
    src = _bad_drafter(tmp_path, spec, omit=("embed_tokens.weight", "d2t"), t2d=t2d)
    _refused(tmp_path, src, "model.safetensors: t2d: expected 512 target ids marked", "found 10")


def test_vllm_full_vocab_omits_identity_maps(tmp_path):
    """Issue 21: speculators registers no d2t/t2d when draft_vocab_size == vocab_size
    (vllm-project/speculators src/speculators/model.py `_init_vocab`, c05b95b), so a strict
    load of ours would report them as unexpected keys: convert --to vllm leaves them out."""
    spec = tiny_spec(draft_vocab_size=512)
    src = random_drafter(tmp_path / "src", spec, "sglang")
    assert {"d2t", "t2d"} <= set(load_file(src / "model.safetensors"))  # ours carries both
    r = run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "v")
    assert r.code == 0, r.err
    names = set(load_file(tmp_path / "v" / "model.safetensors"))
    assert not names & {"d2t", "t2d"}, names
    assert torch.equal(_logits(src), _logits(tmp_path / "v"))  # nothing changes what it drafts
    # the other layouts keep them (SGLang/SpecForge read an identity map the same way)
    assert run_cli("convert", src, "--to", "sglang", "-o", tmp_path / "s").code == 0
    assert {"d2t", "t2d"} <= set(load_file(tmp_path / "s" / "model.safetensors"))


def test_vllm_full_vocab_permuted_map_reorders_lm_head(tmp_path):
    """A full-vocab d2t that permutes ids: the lm_head rows move to their target ids, so the
    map can be left out without changing a drafted token."""
    spec = tiny_spec(draft_vocab_size=512)
    src = random_drafter(tmp_path / "src", spec, "sglang")
    t = load_file(src / "model.safetensors")
    perm = torch.randperm(512, generator=torch.Generator().manual_seed(0))  # draft i -> perm[i]
    t["d2t"] = perm - torch.arange(512)
    from safetensors.torch import save_file

    save_file(t, src / "model.safetensors", metadata={"format": "pt"})
    assert run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "v").code == 0
    out = load_file(tmp_path / "v" / "model.safetensors")
    assert "d2t" not in out
    assert torch.equal(out["lm_head.weight"][perm], t["lm_head.weight"])  # row i moved to perm[i]


def test_verifier_path_that_does_not_exist(tmp_path):
    """Issue 21: --verifier naming a local path that is not there: one line, exit 2, nothing
    written (a Hub id of the form org/name is still accepted as a name)."""
    src = _bad_drafter(tmp_path)
    for missing in (tmp_path / "no-such-target", "./nope", "a/b/c"):
        out = tmp_path / "out"
        r = run_cli("convert", src, "--to", "vllm", "-o", out, "--verifier", missing)
        assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
        assert "--verifier" in r.err and str(missing) in r.err, r.err
        assert not out.exists()
    r = run_cli("convert", src, "--to", "vllm", "-o", tmp_path / "ok", "--verifier", "org/t")
    assert r.code == 0, r.err
