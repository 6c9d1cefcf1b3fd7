"""Golden outputs of `inspect`, `compat`, `plan` and `convert` on inputs built here.

    python tests/golden/make_golden.py OUT_DIR [--subprocess]

Builds small drafters and targets (sparse synthetic weights, no zoo, no network) in a
temporary directory, runs a fixed list of CLI commands and writes one text file per command
under OUT_DIR: the command, its exit code, its stdout, the first line of its stderr and, for
`convert`, the sha256 of every output file and the config.json written. Paths are replaced by
placeholders (<TMP>); JSON documents are re-dumped without their top-level "kind"/"schema"
keys. tests/test_golden.py regenerates these files and compares them byte for byte with the
committed ones (tests/golden/outputs/), so a refactoring that changes what a user sees fails.

Each command goes through `eagle3kit.cli.main(argv)`, the function `python -m eagle3kit ARGS`
calls, in this one process (a process per command costs seconds each); `--subprocess` runs
`python -m eagle3kit` instead. Only the CLI and the synthetic-checkpoint writer are used, so
the script also runs on older package layouts (the writer is looked up under both names).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

COLUMNS = "120"


def _synthetic():
    try:
        from eagle3kit.checkpoint.eagle3 import synthetic
    except ImportError:  # the layout before the checkpoint/ package
        from eagle3kit.formats import synthetic  # type: ignore[no-redef]
    return synthetic


def _spec(**kw):
    try:
        from eagle3kit.core.spec import DraftSpec
    except ImportError:
        from eagle3kit.spec import DraftSpec  # type: ignore[no-redef]
    base = dict(
        hidden_size=64,
        intermediate_size=160,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=512,
        draft_vocab_size=128,
        target_hidden_size=64,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        max_position_embeddings=1024,
        aux_layers=(2, 5, 9),
        dtype="float32",
    )
    base.update(kw)
    return DraftSpec(**base)


MLA = dict(
    hidden_size=32,
    intermediate_size=48,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=12,
    vocab_size=96,
    draft_vocab_size=40,
    target_hidden_size=24,
    max_position_embeddings=2560,
    aux_layers=(2, 4, 6),
    attention="mla",
    q_lora_rank=16,
    kv_lora_rank=12,
    qk_nope_head_dim=8,
    qk_rope_head_dim=4,
    v_head_dim=10,
    architecture="Eagle3DeepseekV2ForCausalLM",
    model_type="kimi_k2",
)
YARN = {
    "type": "yarn",
    "factor": 40.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 64,
    "beta_fast": 32,
    "beta_slow": 1,
}


def _target(d: Path, **kw) -> str:
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 12,
        "hidden_size": 64,
        "vocab_size": 512,
        "max_position_embeddings": 1024,
        "intermediate_size": 256,
        "num_attention_heads": 4,
    }
    cfg.update(kw)
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def build_inputs(tmp: Path) -> dict[str, str]:
    """Every checkpoint the commands use, by name."""
    syn = _synthetic()
    w = syn.write_sparse_drafter
    nested = {"eagle_aux_hidden_state_layer_ids": [2, 5, 9]}
    p = {
        "tgt": _target(tmp / "tgt"),
        "tgt_ds": _target(
            tmp / "tgt_ds",
            architectures=["DeepseekV3ForCausalLM"],
            model_type="deepseek_v3",
            num_hidden_layers=8,
            hidden_size=24,
            vocab_size=96,
            max_position_embeddings=2560,
        ),
        "d_sg": w(tmp / "d_sg", _spec(), "sglang"),
        "d_vl": w(tmp / "d_vl", _spec(), "vllm"),
        "d_ea": w(tmp / "d_ea", _spec(), "eagle"),
        "d_big": w(tmp / "d_big", _spec(hidden_size=96, intermediate_size=192), "sglang"),
        "d_unknown": w(
            tmp / "d_unknown", _spec(), config_overrides={"eagle_config": nested, "eagle3kit": None}
        ),
        "d_noids": w(tmp / "d_noids", _spec(aux_layers=None), "sglang"),
        "d_not2d": w(tmp / "d_not2d", _spec(), "vllm", omit=("embed_tokens.weight", "t2d")),
        "d_badlm": w(tmp / "d_badlm", _spec(), shape_overrides={"lm_head.weight": (100, 64)}),
        "d_full": w(tmp / "d_full", _spec(draft_vocab_size=512), "sglang"),
        "d_mla": w(tmp / "d_mla", _spec(**MLA), "sglang"),
        "d_mla_yarn": w(tmp / "d_mla_yarn", _spec(**MLA, rope_scaling=dict(YARN)), "sglang"),
    }
    return {k: str(v) for k, v in p.items()}


def commands(p: dict[str, str], o: str) -> list[tuple[str, list[str]]]:
    """(case name, argv); `o` is the directory convert writes under."""
    cases: list[tuple[str, list[str]]] = []
    for name in ("d_sg", "d_vl", "d_ea", "d_mla", "d_badlm", "d_not2d", "tgt"):
        cases.append((f"inspect_{name}", ["inspect", p[name]]))
    for name in ("d_sg", "d_mla", "d_badlm", "tgt_ds"):
        cases.append((f"inspect_{name}_json", ["inspect", p[name], "--json"]))
    cases += [
        ("compat_sg_vl", ["compat", p["d_sg"], p["d_vl"]]),
        ("compat_sg_big", ["compat", p["d_sg"], p["d_big"]]),
        ("compat_vl_unknown_json", ["compat", p["d_vl"], p["d_unknown"], "--json"]),
        ("compat_sg_tgt", ["compat", p["d_sg"], p["tgt"]]),
        ("compat_tgt_sg_json", ["compat", p["tgt"], p["d_sg"], "--json"]),
        ("compat_vl_tgt", ["compat", p["d_vl"], p["tgt"]]),
        ("compat_sg_tgt_sglang", ["compat", p["d_sg"], p["tgt"], "--engine", "sglang"]),
        ("compat_sg_tgt_vllm021", ["compat", p["d_sg"], p["tgt"], "--engine", "vllm@0.21"]),
        ("compat_sg_tgt_sg0512", ["compat", p["d_sg"], p["tgt"], "--engine", "sglang@0.5.12"]),
        ("compat_unknown_tgt", ["compat", p["d_unknown"], p["tgt"]]),
        ("compat_unknown_tgt_json", ["compat", p["d_unknown"], p["tgt"], "--json"]),
        ("compat_noids_tgt", ["compat", p["d_noids"], p["tgt"], "--engine", "vllm"]),
        ("compat_not2d_tgt", ["compat", p["d_not2d"], p["tgt"]]),
        ("compat_not2d_tgt_json", ["compat", p["d_not2d"], p["tgt"], "--json"]),
        ("compat_badlm_tgt", ["compat", p["d_badlm"], p["tgt"]]),
        ("compat_mla_tgt", ["compat", p["d_mla"], p["tgt_ds"]]),
        ("compat_mla_tgt_json", ["compat", p["d_mla"], p["tgt_ds"], "--json"]),
        ("compat_tgt_tgt", ["compat", p["tgt"], p["tgt_ds"]]),
        ("compat_bad_engine", ["compat", p["d_sg"], p["tgt"], "--engine", "trt"]),
    ]
    return cases + _plan_cases() + _convert_cases(p, o)


def _plan_cases() -> list[tuple[str, list[str]]]:
    base = ["plan", "--baseline-tps", "82", "--draft-ms", "2.5", "--verify-ms", "4:14"]
    return [
        ("plan_basic", [*base, "--acceptance", "0.7"]),
        ("plan_json", [*base, "--acceptance", "0.7", "--json"]),
        ("plan_tau", ["plan", "--decode-ms", "12", "--cycle-ms", "20", "--accept-len", "2.4"]),
        (
            "plan_fit_json",
            ["plan", "--baseline-tps", "60", "--draft-ms", "1.5", "--verify-fit", "10,0.5"]
            + ["--accept-len", "3.1", "--target-tps", "100", "150", "--json"],
        ),
        (
            "plan_request",
            [*base, "--verify-ms", "8:16", "--acceptance", "0.6", "--depth", "5"]
            + ["--new-tokens", "256", "--prefill-ms", "40"],
        ),
        ("plan_bad", ["plan", "--baseline-tps", "82", "--acceptance", "1.5", "--cycle-ms", "9"]),
    ]


def _convert_cases(p: dict[str, str], o: str) -> list[tuple[str, list[str]]]:
    missing = os.path.join(os.path.dirname(p["tgt"]), "no-such-target")
    conv = [
        ("sg_vllm", "d_sg", "vllm", []),
        ("sg_eagle", "d_sg", "eagle", []),
        ("vl_sglang", "d_vl", "sglang", []),
        ("ea_vllm", "d_ea", "vllm", []),
        ("sg_vllm_verifier_json", "d_sg", "vllm", ["--verifier", "org/target", "--json"]),
        ("full_vllm", "d_full", "vllm", []),
        ("mla_vllm", "d_mla", "vllm", []),
        ("mla_sglang_json", "d_mla", "sglang", ["--json"]),
        ("refused_badlm", "d_badlm", "vllm", []),
        ("refused_mla_eagle", "d_mla_yarn", "eagle", []),
        ("refused_to", "d_sg", "trt", []),
        ("verifier_missing", "d_sg", "vllm", ["--verifier", missing]),
    ]
    return [
        (f"convert_{name}", ["convert", p[src], "--to", to, "-o", os.path.join(o, name), *extra])
        for name, src, to, extra in conv
    ]


def _run_inproc(argv: list[str]) -> tuple[int, str, str]:
    from eagle3kit.cli import main

    so, se = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
        try:
            main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return code, so.getvalue(), se.getvalue()


def _run_sub(argv: list[str]) -> tuple[int, str, str]:
    r = subprocess.run(
        [sys.executable, "-m", "eagle3kit", *argv], capture_output=True, text=True, check=False
    )
    return r.returncode, r.stdout, r.stderr


def _normal_json(text: str) -> str | None:
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if isinstance(doc, dict):
        doc.pop("kind", None)
        doc.pop("schema", None)
    return json.dumps(doc, indent=2) + "\n"


def _files(out: Path, tmp: Path) -> str:
    """sha256 of every file written (the temporary directory's name replaced, so a path the
    file records does not change its digest), and the config.json written."""
    if not out.exists():
        return "files: none written\n"
    lines = ["files:"]
    for f in sorted(out.rglob("*")):
        if f.is_file():
            data = f.read_bytes().replace(str(tmp).encode(), b"<TMP>")
            lines.append(f"  {f.relative_to(out)} {len(data)} {hashlib.sha256(data).hexdigest()}")
    cfg = out / "config.json"
    if cfg.exists():
        lines.append("config.json:")
        lines.append(json.dumps(json.loads(cfg.read_text()), indent=2))
    return "\n".join(lines) + "\n"


def record(
    argv: list[str], code: int, stdout: str, stderr: str, out: Path | None, tmp: Path
) -> str:
    """The text of one golden file (paths not yet normalised)."""
    body = _normal_json(stdout) if "--json" in argv else None
    first = stderr.splitlines()[0] if stderr.strip() else ""
    text = (
        f"$ eagle3kit {' '.join(argv)}\nexit: {code}\nstderr[0]: {first}\n"
        f"stdout:\n{body if body is not None else stdout}"
    )
    return text + (_files(out, tmp) if out is not None else "")


def make(dest: Path, subprocess_mode: bool = False) -> list[str]:
    """Write every golden file under `dest`; returns their names."""
    dest.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = COLUMNS
    try:
        _make(dest, subprocess_mode, names)
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
    return names


def _make(dest: Path, subprocess_mode: bool, names: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="e3k-golden-") as t:
        tmp = Path(t).resolve()
        p = build_inputs(tmp / "in")
        conv = tmp / "out"
        conv.mkdir()
        run = _run_sub if subprocess_mode else _run_inproc
        for name, argv in commands(p, str(conv)):
            code, so, se = run(argv)
            out = conv / name.removeprefix("convert_") if argv[0] == "convert" else None
            text = record(argv, code, so, se, out, tmp).replace(str(tmp), "<TMP>")
            (dest / f"{name}.txt").write_text(text)
            names.append(f"{name}.txt")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--subprocess"]
    if len(args) != 1:
        sys.exit("usage: make_golden.py OUT_DIR [--subprocess]")
    made = make(Path(args[0]), "--subprocess" in sys.argv)
    print(f"{len(made)} golden files in {args[0]}")
