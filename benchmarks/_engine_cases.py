"""The cases of benchmarks/engine_check.py: drafters as eagle3kit's `convert` writes them.

Each case is a directory

    CASE/case.json   {"name", "engine", "target_family", "drafter_attention", "layout",
                      "flags", "aux_layers", "draft_vocab", "written_by", "launch"}
    CASE/drafter/    config.json + model.safetensors, as `convert --to LAYOUT` writes them
    CASE/target/     config.json only (no weights)

Drafters are tiny synthetic DraftSpecs (zero weights written sparse, real d2t/t2d), so an
engine builds and loads each in a second on a CPU. Every file is the output of
`checkpoint.convert.convert` from a source in the speculators layout, except where convert
refuses the combination (a flag the destination does not implement): that drafter is written
with the same writer plus the flag forced on, `written_by: "forced"`, to see what the engine
does with a file some other tool wrote.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from eagle3kit.checkpoint.eagle3.convert import convert, launch_command
from eagle3kit.checkpoint.eagle3.synthetic import write_sparse_drafter, write_target_config
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.spec import NORM_FLAGS, DraftSpec, default_aux_layers

L = 8  # target layers
H, HEADS, HEAD_DIM, INTER, V, VD = 64, 4, 16, 128, 256, 64
MLA = dict(q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
YARN = {
    "type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 512,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}
FAMILIES = ("llama", "deepseek_v3", "kimi_k2")
AUX = {"default": tuple(default_aux_layers(L)), "custom": (3, 4, 6)}  # h-indices
SWA_WINDOW = 64  # the "swa" cases' sliding window (config: layer_types + sliding_window)


def target_config(family: str) -> dict[str, Any]:
    """A tiny target's config.json of `family` (L layers, hidden H, vocabulary V)."""
    base = dict(
        hidden_size=H,
        intermediate_size=INTER,
        num_hidden_layers=L,
        num_attention_heads=HEADS,
        vocab_size=V,
        rms_norm_eps=1e-6,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
        bos_token_id=1,
        eos_token_id=2,
    )
    if family == "llama":
        return dict(
            architectures=["LlamaForCausalLM"],
            model_type="llama",
            num_key_value_heads=2,
            head_dim=HEAD_DIM,
            rope_theta=10000.0,
            hidden_act="silu",
            **base,
        )
    moe = dict(
        moe_intermediate_size=32,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        moe_layer_freq=1,
        n_group=1,
        topk_group=1,
        topk_method="noaux_tc",
        scoring_func="sigmoid",
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
        num_key_value_heads=HEADS,
        hidden_act="silu",
        rope_theta=50000.0,
        rope_scaling=dict(YARN) if family == "kimi_k2" else None,
        **MLA,
    )
    return dict(architectures=["DeepseekV3ForCausalLM"], model_type=family, **moe, **base)


def drafter_spec(family: str, attention: str, aux: tuple[int, ...], vocab: str) -> DraftSpec:
    common = dict(
        hidden_size=H,
        intermediate_size=INTER,
        num_attention_heads=HEADS,
        vocab_size=V,
        draft_vocab_size=V if vocab == "full" else VD,
        target_hidden_size=H,
        rms_norm_eps=1e-6,
        max_position_embeddings=2048,
        aux_layers=aux,
        dtype="bfloat16",
    )
    if attention == "mha":
        return DraftSpec(num_key_value_heads=2, head_dim=HEAD_DIM, rope_theta=10000.0, **common)
    return DraftSpec(
        num_key_value_heads=HEADS,
        head_dim=MLA["qk_nope_head_dim"] + MLA["qk_rope_head_dim"],
        rope_theta=50000.0,
        rope_scaling=dict(YARN) if family == "kimi_k2" else None,
        architecture="Eagle3DeepseekV2ForCausalLM",
        attention="mla",
        model_type=family if family != "llama" else None,
        **MLA,
        **common,
    )


def plan() -> list[dict[str, Any]]:
    """Every case (without the engine): layout x target x attention (MHA drafters on Llama and
    DeepSeek-V3 targets, MLA drafters on DeepSeek-V3 and Kimi-K2 targets; the EAGLE layout,
    MHA only, on the Llama target), then one variation at a time: each norm flag alone, the
    non-default aux ids, the full draft vocabulary, a sliding window."""
    combos = [("llama", "mha", layout) for layout in ("sglang", "vllm", "eagle")]
    combos += [("deepseek_v3", "mha", layout) for layout in ("sglang", "vllm")]
    combos += [
        (f, "mla", layout) for f in ("deepseek_v3", "kimi_k2") for layout in ("sglang", "vllm")
    ]
    cases = []
    for family, attention, layout in combos:
        variants: list[tuple[str, dict[str, bool], str, str]] = [
            ("plain", {}, "default", "reduced")
        ]
        variants += [(f, {f: True}, "default", "reduced") for f in NORM_FLAGS]
        variants += [("aux_custom", {}, "custom", "reduced"), ("vocab_full", {}, "default", "full")]
        variants += [("swa", {}, "default", "reduced")]  # sliding window SWA_WINDOW
        for tag, flags, aux, vocab in variants:
            cases.append(
                dict(
                    name=f"{family}-{attention}-{layout}-{tag}",
                    target_family=family,
                    drafter_attention=attention,
                    layout=layout,
                    flags={f: bool(flags.get(f)) for f in NORM_FLAGS},
                    aux_layers=list(AUX[aux]),
                    aux_choice=aux,
                    draft_vocab=vocab,
                    sliding_window=SWA_WINDOW if tag == "swa" else None,
                )
            )
    return cases


def _forced(out: Path, spec: DraftSpec, layout: str) -> None:
    """The writer's file for `spec` with its flags forced on where config_for refuses them."""
    on = {f: True for f in NORM_FLAGS if getattr(spec, f)}
    base = replace(spec, **{f: False for f in on})
    extra = {n: s for n, s in spec.expected_shapes().items() if n not in base.expected_shapes()}
    write_sparse_drafter(out, base, layout, config_overrides=on, extra_tensors=extra)


def file_record(case_dir: Path) -> dict[str, Any]:
    """What the engine was given, enough to write the same files again: both configs, every
    tensor's dtype and shape, and the index tensors' values (the weights are all zero)."""
    from safetensors import safe_open

    path = case_dir / "drafter" / "model.safetensors"
    header = read_header(path)
    with safe_open(str(path), framework="np") as f:
        index = {n: f.get_tensor(n) for n in ("d2t", "t2d") if n in header}
    return {
        "drafter_config": json.loads((case_dir / "drafter" / "config.json").read_text()),
        "tensors": {n: {"dtype": v["dtype"], "shape": v["shape"]} for n, v in header.items()},
        "index": {n: index[n].astype("int64").tolist() for n in ("d2t", "t2d") if n in index},
        "metadata": header_metadata(case_dir / "drafter" / "model.safetensors"),
        "target_config": json.loads((case_dir / "target" / "config.json").read_text()),
    }


def _raw_header(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n))


def read_header(path: Path) -> dict[str, Any]:
    return {k: v for k, v in _raw_header(path).items() if k != "__metadata__"}


def header_metadata(path: Path) -> dict[str, str]:
    return _raw_header(path).get("__metadata__") or {}


def write_case(root: Path, case: dict[str, Any], engine: str) -> Path:
    """Write one case directory under `root` (replacing an old one); returns it."""
    d = root / case["name"]
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    target = write_target_config(d / "target", target_config(case["target_family"]))
    spec = drafter_spec(
        case["target_family"],
        case["drafter_attention"],
        tuple(case["aux_layers"]),
        case["draft_vocab"],
    )
    spec = replace(spec, **case["flags"], sliding_window=case.get("sliding_window"))
    src = d / "source"
    # the source, every flag as the spec says: speculators' layout for MHA drafters,
    # SpecForge's (model_type deepseek_v3 / kimi_k2, midlayer.* names) for MLA ones
    _forced(src, spec, "sglang" if spec.is_mla else "vllm")
    try:
        res = convert(str(src), case["layout"], str(d / "drafter"), verifier=str(target))
        written_by, launch, notes = "convert", res.launch, res.notes
    except Eagle3Error as e:
        shutil.rmtree(d / "drafter", ignore_errors=True)
        _forced(d / "drafter", spec, case["layout"])
        written_by, notes = "forced", [f"convert refused: {e}"]
        launch = launch_command(case["layout"], str(d / "drafter"), str(target))
    shutil.rmtree(src, ignore_errors=True)
    doc = {**case, "engine": engine, "written_by": written_by, "launch": launch, "notes": notes}
    doc["files"] = file_record(d)
    text = json.dumps(doc, indent=1).replace(str(root.resolve()) + "/", "CASES/")
    (d / "case.json").write_text(text.replace(str(root) + "/", "CASES/") + "\n")
    return d


def rebuild(case: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """The drafter and target directories a result's case was run on, written again from its
    `files` record (zero weights, the same names, dtypes, shapes and index values)."""
    import math

    import numpy as np

    from eagle3kit.checkpoint.io.safetensors_io import DTYPE_SIZES
    from eagle3kit.checkpoint.io.safetensors_write import write_with_holes

    files = case["files"]
    drafter, target = out / case["name"] / "drafter", out / case["name"] / "target"
    drafter.mkdir(parents=True)
    write_target_config(target, files["target_config"])
    header: dict[str, Any] = {"__metadata__": files.get("metadata") or {}}
    blobs, offset = [], 0
    for name, t in sorted(files["tensors"].items()):
        size = math.prod(t["shape"]) * DTYPE_SIZES[t["dtype"]]
        header[name] = {
            "dtype": t["dtype"],
            "shape": t["shape"],
            "data_offsets": [offset, size + offset],
        }
        if name in files["index"]:
            np_dtype = {"I64": np.int64, "I32": np.int32, "BOOL": np.bool_}[t["dtype"]]
            blobs.append((offset, np.asarray(files["index"][name], dtype=np_dtype).tobytes()))
        offset += size
    write_with_holes(drafter / "model.safetensors", header, offset, blobs)
    (drafter / "config.json").write_text(json.dumps(files["drafter_config"], indent=1))
    return drafter, target


# ---------------------------------------------------------------- files the peers wrote

PEERS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "peers"


def peer_plan() -> list[dict[str, Any]]:
    """Every drafter the peers' own code wrote (tests/fixtures/peers/, made by
    benchmarks/peers/make_peer_fixtures.py in each peer's venv): one case each, served on the
    zoo member it was made for, as the launch line eagle3kit gives for its method."""
    out = []
    for meta_path in sorted(PEERS.glob("*/*.json")):
        folder, variant = meta_path.parent.name, meta_path.stem
        meta = json.loads(meta_path.read_text())
        out.append(
            dict(
                name=f"peer-{folder}-{variant}",
                peer=folder,
                fixture=f"{folder}/{variant}",
                method=meta["method"],
                verifier=meta["verifier"]["zoo"],
                target_family="llama" if "llama" in meta["verifier"]["zoo"] else "deepseek_v3",
            )
        )
    return out


def peer_tokens(config: dict[str, Any]) -> int:
    """The draft tokens the file asks for: speculators' `speculative_tokens` (what vLLM
    reads as num_speculative_tokens), else a z-lab block's B - 1."""
    methods = (config.get("speculators_config") or {}).get("proposal_methods") or [{}]
    k = methods[0].get("speculative_tokens")
    if isinstance(k, int):
        return k
    block = (config.get("dflash_config") or {}).get("block_size", config.get("block_size"))
    return int(block) - 1


def peer_launch(method: str, k: int, target: str, drafter: str) -> str:
    """The vLLM line eagle3kit gives for `method` (core/registry.py); a method it has no
    record of is named as the file's own (vLLM's `method` is speculators' algorithm name)."""
    from eagle3kit.core import registry

    if registry.find(method) is not None:
        return registry.launch_lines(method, k, target, drafter)["vllm"]
    doc = {"method": method, "model": drafter, "num_speculative_tokens": k}
    return f"vllm serve {target} --speculative-config '{json.dumps(doc)}'"


def write_peer_case(root: Path, case: dict[str, Any], engine: str) -> Path:
    """One case directory: the peer's files as written (copied), the zoo member's config.json
    as the target, case.json with the method eagle3kit detects and its launch line."""
    from eagle3kit import zoo
    from eagle3kit.checkpoint.methods import detect_method

    d = root / case["name"]
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    shutil.copytree(PEERS / case["fixture"], d / "drafter")
    member = zoo.get(case["verifier"].removesuffix("-tiny"), size="tiny")
    write_target_config(d / "target", json.loads((member / "config.json").read_text()))
    cfg = json.loads((d / "drafter" / "config.json").read_text())
    detected = detect_method(cfg, read_header(d / "drafter" / "model.safetensors"))
    k = peer_tokens(cfg)
    launch = peer_launch(detected, k, str(d / "target"), str(d / "drafter"))
    doc = {**case, "engine": engine, "detected": detected, "k": k, "launch": launch}
    doc["files"] = {n: _sha256(d / "drafter" / n) for n in ("config.json", "model.safetensors")}
    text = json.dumps(doc, indent=1).replace(str(root.resolve()) + "/", "CASES/")
    (d / "case.json").write_text(text.replace(str(root) + "/", "CASES/") + "\n")
    return d


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()
