"""Small drafters written by the peers' own code, for tests/fixtures/peers/ (issue 47).

Runs INSIDE a peer's venv, never eagle3kit's (the venvs: setup_speculators.sh, setup_dflash.sh):

    SPEC_PY   benchmarks/peers/make_peer_fixtures.py speculators [--only NAME ...]
    DFLASH_PY benchmarks/peers/make_peer_fixtures.py zlab

speculators 0.9.0: each drafter is made by the trainer's own command, `speculators train
--dry-run` (speculators/train/cli.py `main`: `build_draft_model` -> `<Model>.from_training_args`
-> `save_pretrained`), run with its working directory in the zoo's shipped folder so that
`--verifier-name-or-path llama-v1-tiny` is a relative path (it is written into config.json).
Only `config.json` and `model.safetensors` are kept; the JSON beside the folder names the other
files the command wrote (its config class's source `config.py`, `run.yaml`,
`train_command.txt`). The file is then read back by the peer's own `from_pretrained` (as
`--from-pretrained` does) and run forward on a fixed input; the outputs go to
`<name>.forward.safetensors` beside the folder.

z-lab dflash 0.1.0: its package has no trainer or writer of its own; its `DFlashDraftModel` is a
transformers `PreTrainedModel`, so the file is `DFlashDraftModel(Qwen3Config(...))` then
`save_pretrained`, with the fields its code reads (`block_size`, `num_target_layers`,
`dflash_config.{mask_token_id, target_layer_ids}`), in bf16 as z-lab publishes.

Everything is float32 on the CPU; the forward outputs are what each peer's own forward returns
(or hands to its loss, caught by wrapping the loss function: the forwards return no logits).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "src" / "eagle3kit" / "zoo" / "shipped"
OUT = ROOT / "tests" / "fixtures" / "peers"
KEPT = ("config.json", "model.safetensors")
SEED = 1234  # the forward inputs
ANCHORS = (3, 11, 19)  # DFlash/DSpark blocks: the only loss-mask positions, so all are drawn
T = 40  # sequence length of the forward input (B = 16 blocks still fit after anchor 19)
H = 32  # hidden size of the tiny zoo members

# name -> (speculator type, verifier, extra `speculators train` flags, what the variant is)
SPECULATORS = {
    "eagle3-defaults": ("eagle3", "llama-v1-tiny", [], "trainer defaults (bf16)"),
    "eagle3-reduced": (
        "eagle3",
        "llama-v1-tiny",
        ["--draft-vocab-size", "256", "--full-attention-indices", "0"]
        + ["--no-norm-before-fc", "--no-norm-output", "--hidden-states-dtype", "float32"],
        "draft vocab 256 (t2d/d2t), full attention, classic EAGLE-3 norms, float32",
    ),
    "dflash-fullvocab": (
        "dflash",
        "llama-v1-tiny",
        ["--num-layers", "2", "--block-size", "4", "--full-attention-indices", "0", "1"]
        + ["--hidden-states-dtype", "float32"],
        "draft vocab = the target's (no embed_tokens, no lm_head saved), B 4, 2 full layers",
    ),
    "dflash-reduced": (
        "dflash",
        "llama-v1-tiny",
        ["--num-layers", "2", "--block-size", "4", "--full-attention-indices", "0", "1"]
        + ["--draft-vocab-size", "256", "--hidden-states-dtype", "float32"],
        "draft vocab 256 (lm_head, t2d, d2t saved), B 4, 2 full layers",
    ),
    "dflash-defaults": ("dflash", "llama-v1-tiny", [], "trainer defaults: 5 sliding layers, B 16"),
    "dflash-dsv3": (
        "dflash",
        "dsv3-v1-tiny",
        ["--num-layers", "2", "--block-size", "4", "--full-attention-indices", "0", "1"]
        + ["--hidden-states-dtype", "float32"],
        "as dflash-fullvocab, verifier the tiny DeepSeek member (head_dim 8)",
    ),
    "peagle-1layer": (
        "peagle",
        "llama-v1-tiny",
        ["--hidden-states-dtype", "float32"],
        "trainer defaults (Qwen3 layer, sliding, 8 depths), float32",
    ),
    "peagle-2layer": (
        "peagle",
        "llama-v1-tiny",
        ["--num-layers", "2", "--hidden-states-dtype", "float32"],
        "2 layers, otherwise trainer defaults, float32",
    ),
    "dspark-defaults": ("dspark", "llama-v1-tiny", [], "trainer defaults: 5 sliding layers, B 8"),
    "dspark-small": (
        "dspark",
        "llama-v1-tiny",
        ["--num-layers", "2", "--full-attention-indices", "0", "1", "--markov-rank", "32"]
        + ["--hidden-states-dtype", "float32"],
        "2 full layers, Markov rank 32 (vanilla), confidence head, B 8, float32",
    ),
    "dspark-reduced-gated": (
        "dspark",
        "llama-v1-tiny",
        ["--num-layers", "2", "--full-attention-indices", "0", "1", "--markov-rank", "32"]
        + ["--markov-head-type", "gated", "--draft-vocab-size", "256"]
        + ["--hidden-states-dtype", "float32"],
        "draft vocab 256, gated Markov head of rank 32, 2 full layers, float32",
    ),
}


# z-lab drafter: Qwen3 fields at the tiny members' hidden size and vocabulary
ZLAB_SHAPE = {
    "vocab_size": 512,
    "hidden_size": H,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_info(path: Path) -> dict:
    return {"sha256": sha256(path), "bytes": path.stat().st_size}


def header(path: Path) -> dict:
    """{name: {"shape", "dtype"}} of a safetensors file, from its header."""
    with safe_open(str(path), framework="pt") as f:
        out = {}
        for k in sorted(f.keys()):
            s = f.get_slice(k)
            out[k] = {"shape": list(s.get_shape()), "dtype": s.get_dtype()}
        return out


def token_freq(data: Path) -> None:
    """The trainer's token-frequency input (`<data-path>/token_freq.pt`, {id: count}), drawn
    from a seed; from it `speculators train` builds t2d/d2t itself."""
    g = torch.Generator().manual_seed(7)
    counts = torch.randint(1, 1000, (512,), generator=g)
    data.mkdir(parents=True, exist_ok=True)
    torch.save({i: int(c) for i, c in enumerate(counts)}, data / "token_freq.pt")


def dry_run(kind: str, verifier: str, flags: list[str], tmp: Path) -> tuple[list[str], Path]:
    argv = ["speculators", "train", "--speculator-type", kind, "--dry-run"]
    argv += ["--verifier-name-or-path", verifier, *flags]
    paths = ["--data-path", "TMP/data", "--save-path", "TMP/out"]
    cmd = [sys.executable, "-m", *argv, *[p.replace("TMP", str(tmp)) for p in paths]]
    r = subprocess.run(cmd, cwd=ZOO, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{r.stderr[-4000:]}")
    return argv + paths, tmp / "out"


def keep(written: Path, dest: Path) -> dict:
    """Copy the checkpoint files to `dest`; name what else the peer wrote and why it stays out."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in KEPT:
        shutil.copyfile(written / name, dest / name)
    why = {
        "config.py": "the peer's own config class source (auto_map); code, not data",
        "run.yaml": "the trainer's run record (YAML)",
        "train_command.txt": "the trainer's command line (holds absolute paths)",
    }
    others = [p.name for p in written.iterdir() if p.name not in KEPT]
    return {n: why.get(n, "not a checkpoint file") for n in sorted(others)}


WEIGHTS = (
    "the trainable weights re-drawn as a trained drafter's might be (a freshly initialised "
    "one, std 0.02 and norms 1, barely depends on them: a logits test would see nothing): "
    "matrices normal with std fan_in^-0.5, norm weights U(0.5, 1.5), biases std 0.1, "
    "mask_hidden and markov_w1 std 1, torch seed 5; what the verifier owns (embed_tokens, "
    "lm_head) and d2t/t2d kept; then written again by the peer's own save_pretrained in "
    "the dry run's dtype, config.json unchanged (checked)"
)
FROZEN = ("embed_tokens.weight", "lm_head.weight", "verifier_lm_head.weight", "verifier_norm")


def redraw(model) -> None:
    """The stand-in for training (WEIGHTS), in place."""
    torch.manual_seed(5)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.startswith(FROZEN):
                continue
            if n == "mask_hidden" or "markov_w1" in n:
                p.normal_(0.0, 1.0)
            elif p.dim() == 1 and n.endswith("bias"):
                p.normal_(0.0, 0.1)
            elif p.dim() == 1:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, p.shape[-1] ** -0.5)


def resave(model, dest: Path) -> None:
    """`redraw`, then the peer's save_pretrained in the file's dtype; config.json as before."""
    before = json.loads((dest / "config.json").read_text())
    dtype = getattr(torch, before.get("dtype", "float32"))
    redraw(model)
    with tempfile.TemporaryDirectory() as t:
        model.to(dtype).save_pretrained(t)
        after = json.loads((Path(t) / "config.json").read_text())
        assert after == before, "save_pretrained changed config.json"
        shutil.copyfile(Path(t) / "model.safetensors", dest / "model.safetensors")


def load_back(dest: Path, attn: str):
    """The file read by the peer's own loader, as `speculators train --from-pretrained` does
    (train/cli.py `build_draft_model`): its config class, the attention set, then
    `from_pretrained`, which also loads the verifier-owned weights from the verifier."""
    from speculators.model import SpeculatorModel

    cfg = json.loads((dest / "config.json").read_text())
    cls = SpeculatorModel.registry[cfg["speculators_model_type"]]
    config = cls.config_class.from_pretrained(str(dest))
    config.transformer_layer_config._attn_implementation = attn  # noqa: SLF001
    cwd = os.getcwd()
    os.chdir(ZOO)  # the verifier path in config.json is relative to the zoo's folder
    try:
        model = cls.from_pretrained(str(dest), config=config, dtype=torch.float32)
    finally:
        os.chdir(cwd)
    return model.float().eval()


def inputs(n_aux: int) -> dict:
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(1, 511, (1, T), generator=g)
    hidden = torch.randn(1, T, n_aux * H, generator=g)
    last = torch.randn(1, T, H, generator=g)
    return {"input_ids": ids, "hidden_states": hidden, "verifier_last_hidden_states": last}


def forward_block(model, kind: str) -> tuple[dict, dict]:
    """DFlash/DSpark training forward on blocks at ANCHORS (the only loss-mask positions, so
    `select_anchors` draws exactly them); the logits (Markov-corrected for DSpark) and the
    confidence logits are caught where its forward hands them to its metrics."""
    import speculators.models.dflash.core as dcore
    import speculators.models.dspark.core as score
    from speculators.losses import resolve_loss_config

    x = inputs(len(model.target_layer_ids))
    mask = torch.zeros(1, T, dtype=torch.long)
    mask[0, list(ANCHORS)] = 1
    x |= {"loss_mask": mask, "document_ids": torch.zeros(1, T, dtype=torch.long)}
    x["position_ids"] = torch.arange(T)[None]
    seen: dict = {}
    backbone = model._backbone_forward  # noqa: SLF001

    def caught_backbone(*a, **kw):
        out = backbone(*a, **kw)
        seen["hidden"], seen["base_logits"], *_, seen["indices"] = out
        return out

    def caught_metrics(logits, targets, *rest, **kw):
        seen["logits"] = logits
        if kind == "dspark":
            seen["confidence_logits"] = rest[0]
        return metrics(logits, targets, *rest, **kw)

    mod = score if kind == "dspark" else dcore
    metrics = mod.compute_metrics
    model._backbone_forward = caught_backbone  # noqa: SLF001
    mod.compute_metrics = caught_metrics
    kw = {"loss_config": resolve_loss_config("kl_div", "eager"), "max_anchors": len(ANCHORS)}
    if kind == "dspark":
        kw["tv_loss_fn"] = resolve_loss_config("tv", "eager")["tv"][0]
    try:
        with torch.no_grad():
            model(**x, **kw)
    finally:
        mod.compute_metrics = metrics
        del model._backbone_forward  # noqa: SLF001
    b = model.block_size
    drawn = seen.pop("indices")[::b].tolist()
    assert drawn == list(ANCHORS), drawn
    if kind == "dflash":  # no head on top: the logits it scores are the backbone's
        del seen["base_logits"]
    out = {k: v.clone().contiguous() for k, v in seen.items() if v is not None}
    call = f"{type(model).__name__}.forward(**inputs, max_anchors={len(ANCHORS)}, eager KL loss)"
    return x | out, {"call": call, "anchors": list(ANCHORS), "block_size": b}


def forward_eagle3(model, _kind: str) -> tuple[dict, dict]:
    """Eagle3DraftModel.forward, 3 TTT steps, no verifier states: the logits of each step are
    read by a hook on lm_head (its forward returns argmax tokens)."""
    x = inputs(len(model.target_layer_ids))
    x.pop("verifier_last_hidden_states")
    x |= {"document_ids": torch.zeros(1, T, dtype=torch.long)}
    x["position_ids"] = 1 + torch.arange(T)[None]  # its own default
    seen = []
    h = model.lm_head.register_forward_hook(lambda _m, _i, o: seen.append(o.detach().clone()))
    with torch.no_grad():
        model(**x, ttt_steps=3)
    h.remove()
    out = {f"logits_{i}": s.contiguous() for i, s in enumerate(seen)}
    return x | out, {"call": "Eagle3DraftModel.forward(**inputs, ttt_steps=3)", "ttt_steps": 3}


def forward_peagle(model, _kind: str) -> tuple[dict, dict]:
    """PEagleDraftModel.forward with 4 depths: its own COD sampler draws (seeded) the elements,
    which are caught and saved (anchor_pos, depth); the one lm_head call is hooked."""
    import speculators.models.peagle.core as core
    from speculators.losses import resolve_loss_config

    x = inputs(len(model.target_layer_ids))
    x |= {"document_ids": torch.zeros(1, T, dtype=torch.long)}
    # position 0 out of the loss mask, as in chat data: with it in, the sampler's depth-1
    # element at position 0 gets anchor_pos -1 (peagle/data.py: `sampled_idx - d`)
    x |= {"loss_mask": (torch.arange(T) > 0).long()[None]}
    cod, drawn = core.generate_cod_sample_indices, {}

    def caught(**kw):
        drawn["anchor_pos"], drawn["depth"] = cod(**kw)
        return drawn["anchor_pos"], drawn["depth"]

    seen = []
    h = model.lm_head.register_forward_hook(lambda _m, _i, o: seen.append(o.detach().clone()))
    core.generate_cod_sample_indices = caught
    torch.manual_seed(SEED)
    try:
        with torch.no_grad():
            model(**x, num_depths=4, loss_config=resolve_loss_config("kl_div", "eager"))
    finally:
        core.generate_cod_sample_indices = cod
        h.remove()
    out = {"logits": seen[0].contiguous(), **drawn}
    call = "PEagleDraftModel.forward(**inputs, num_depths=4, eager KL loss)"
    return x | out, {"call": call, "num_depths": 4, "cod_seed": SEED}


def speculators_one(name: str) -> None:
    kind, verifier, flags, what = SPECULATORS[name]
    dest = OUT / f"speculators-{version('speculators')}" / name
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        if "--draft-vocab-size" in flags:
            token_freq(tmp / "data")
        argv, written = dry_run(kind, verifier, flags, tmp)
        left_out = keep(written, dest)
    attn = "sdpa" if kind in ("dflash", "dspark") else "eager"
    dry = {f: file_info(dest / f) for f in KEPT}
    resave(load_back(dest, attn), dest)
    model = load_back(dest, attn)
    ignored = set(model._keys_to_ignore_on_save)  # noqa: SLF001
    saved = {k: list(v.shape) for k, v in model.state_dict().items() if k not in ignored}
    tensors = header(dest / "model.safetensors")
    assert {k: v["shape"] for k, v in tensors.items()} == saved, "file differs from the model"
    fwd, about = FORWARD[kind](model, kind)
    made = {
        "command": " ".join(argv),
        "cwd": "src/eagle3kit/zoo/shipped",
        "path": f"speculators/train/cli.py main: build_draft_model -> {type(model).__name__}"
        ".from_training_args -> save_pretrained (--dry-run)",
        "seed": 42,  # `speculators train --seed` default, set before the model is built
        "token_freq": "token_freq.pt: {id: randint(1, 1000)} for ids 0..511, generator seed 7"
        if "--draft-vocab-size" in flags
        else None,
        "dry_run_files": dry,
        "weights": WEIGHTS,
    }
    meta = {"peer": "speculators", "method": kind, "variant": name, "what": what}
    meta |= {"made_by": made, "verifier": verifier_info(verifier), "left_out": left_out}
    write(dest, meta, tensors, fwd, about)


def zlab_one() -> None:
    """z-lab's DFlashDraftModel, built and saved as a transformers model (bf16, as published)."""
    from dflash.model import DFlashDraftModel, build_target_layer_ids
    from transformers import Qwen3Config

    name, layers, block = "dflash-b4", 2, 4
    ids = build_target_layer_ids(8, layers)  # z-lab's default spread for an 8-layer target
    cfg = Qwen3Config(**ZLAB_SHAPE, num_hidden_layers=layers)
    cfg.block_size, cfg.num_target_layers = block, 8
    cfg.dflash_config = {"mask_token_id": 511, "target_layer_ids": ids}
    torch.manual_seed(0)
    model = DFlashDraftModel(cfg)
    redraw(model)  # WEIGHTS (z-lab has no trainer: the constructor, then trained-like values)
    model = model.to(torch.bfloat16)
    dest = OUT / f"dflash-{version('dflash')}" / name
    if dest.exists():
        shutil.rmtree(dest)
    model.save_pretrained(str(dest))
    extra = {p.name: "not a checkpoint file" for p in dest.iterdir() if p.name not in KEPT}
    for p in extra:
        (dest / p).unlink()
    tensors = header(dest / "model.safetensors")
    m, info = DFlashDraftModel.from_pretrained(
        str(dest), output_loading_info=True, dtype=torch.float32
    )
    assert not any(v for k, v in info.items() if k != "error_msgs"), info
    fwd, about = forward_zlab(m.eval(), ids, block)
    made = {
        "command": f"DFlashDraftModel(Qwen3Config(**{ZLAB_SHAPE}, num_hidden_layers={layers}) "
        f"+ block_size={block}, num_target_layers=8, dflash_config={cfg.dflash_config})"
        ".to(bfloat16).save_pretrained(DIR)",
        "path": "dflash/model.py DFlashDraftModel (a transformers Qwen3PreTrainedModel)",
        "seed": 0,
        "token_freq": None,
        "weights": WEIGHTS.split("; what the verifier")[0],
    }
    meta = {"peer": "dflash", "method": "dflash", "variant": name}
    meta |= {"what": "z-lab layout, B 4, 2 layers, bf16", "made_by": made}
    meta |= {"verifier": verifier_info("llama-v1-tiny"), "left_out": extra}
    write(dest, meta, tensors, fwd, about)


def forward_zlab(model, ids: list[int], block: int) -> tuple[dict, dict]:
    """One decoding pass as z-lab's `dflash_generate` runs it: the block
    [anchor, mask x (B-1)] embedded by the target, the context = the target's states at its
    layers' outputs, positions of context then block; then `compute_logits` with the target's
    lm_head on the last B-1 rows. The target is the zoo's llama-v1-tiny (its embedding and
    lm_head, read from its model.safetensors)."""
    target = load_file(str(ZOO / "llama-v1-tiny" / "model.safetensors"))
    embed, head = target["model.embed_tokens.weight"], target["lm_head.weight"]
    g = torch.Generator().manual_seed(SEED)
    c = 12
    context = torch.randn(1, c, len(ids) * H, generator=g)
    block_ids = torch.tensor([[17] + [511] * (block - 1)])
    pos = torch.arange(c + block)[None]
    with torch.no_grad():
        noise = torch.nn.functional.embedding(block_ids, embed)
        hidden = model(position_ids=pos, noise_embedding=noise, target_hidden=context)
        logits = model.compute_logits(hidden[:, 1 - block :, :], lambda h: h @ head.T)
    x = {"target_hidden": context, "block_ids": block_ids, "position_ids": pos}
    out = {"hidden": hidden.contiguous(), "logits": logits.contiguous()}
    call = (
        "DFlashDraftModel.forward(position_ids, noise_embedding=embed(block_ids), "
        "target_hidden) then compute_logits(hidden[:, 1-B:], target lm_head)"
    )
    about = {"call": call, "block_size": block, "context_len": c}
    return x | out, about


def verifier_info(member: str) -> dict:
    """The zoo member the drafter was made for (and whose embedding/lm_head the forward used)."""
    return {"zoo": member, "model.safetensors": file_info(ZOO / member / "model.safetensors")}


def write(dest: Path, meta: dict, tensors: dict, fwd: dict, about: dict) -> None:
    """`<variant>.json` and `<variant>.forward.safetensors` beside the checkpoint folder."""
    side, peer = dest.parent, meta["peer"]
    fwd_path = side / f"{meta['variant']}.forward.safetensors"
    save_file({k: v.contiguous() for k, v in fwd.items()}, str(fwd_path))
    doc = {
        "kind": "eagle3kit.peer_fixture",
        "schema": 1,
        "peer": peer,
        "version": version(peer),
        "versions": {p: version(p) for p in (peer, "torch", "transformers")},
        **meta,
        "made_with": "benchmarks/peers/make_peer_fixtures.py",
        "files": {f: file_info(dest / f) for f in sorted(os.listdir(dest))},
        "tensors": tensors,
        "forward": {
            **about,
            "file": fwd_path.name,
            "sha256": sha256(fwd_path),
            "dtype": "float32",
            "inputs_seed": SEED,
            "tensors": header(fwd_path),
        },
    }
    (side / f"{meta['variant']}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{side.name}/{meta['variant']}: {len(tensors)} tensors, forward {sorted(fwd)}")


FORWARD = {
    "dflash": forward_block,
    "dspark": forward_block,
    "eagle3": forward_eagle3,
    "peagle": forward_peagle,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("peer", choices=("speculators", "zlab"))
    ap.add_argument("--only", nargs="*", default=None)
    a = ap.parse_args()
    if a.peer == "zlab":
        zlab_one()
        return
    for name in a.only or SPECULATORS:
        speculators_one(name)


if __name__ == "__main__":
    main()
