"""`eagle3kit demo`: replay the Kimi-K2 -> K2.5 story with the verbs that exist, offline.

Each step is one library call, the same as the CLI verb it names. Large drafters are written as
sparse files whose headers, byte spans and vocab maps are exactly those of the real
checkpoints (FORMATS.md shapes), so nothing is downloaded and almost nothing touches the disk.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The seed's measurements (FORMATS.md "Numbers from the seeds").
SEED = {
    "baseline_tps": 82.0,
    "cycle_ms": 30.0,
    "acceptance": 0.64,
    "depth": 2,
    "targets": (150.0, 200.0),
}
NOT_BUILT = ("bench", "probe", "train --init-from", "eval", "report")


def _k25_target_config(d: Path) -> Path:
    """A Kimi-K2.5-shaped target config (DeepSeek-V3 architecture, 61 layers): headers only."""
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": 61,
           "hidden_size": 7168, "vocab_size": 163840, "max_position_embeddings": 262144,
           "n_routed_experts": 384, "num_experts_per_tok": 8, "kv_lora_rank": 512, "q_lora_rank": 1536}  # fmt: skip
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    return d


def run_demo(
    out: str | Path,
    say: Callable[[str], None] = print,
    *,
    size: str = "full",
    progress: bool = True,
) -> dict[str, Any]:
    """Run the story into directory `out`; `say` receives the narration. Returns a summary.

    `size="tiny"` uses the zoo's reduced members (seconds to build; for tests)."""
    from eagle3kit.compat import compat
    from eagle3kit.formats.synthetic import kimi_k2_spec, write_sparse_drafter
    from eagle3kit.inspection import inspect_checkpoint
    from eagle3kit.plan import plan
    from eagle3kit.plots import plot_plan

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"out": str(out), "steps": []}

    say("1. bench: the team re-measured: plain decode 82 tok/s (12 ms/step), EAGLE-3 cycle 30 ms.")
    say("   (`eagle3kit bench` is not built yet; the demo uses the seed's measurements.)")

    say("2. plan: does it pay, and what would it take?")
    res = plan(
        baseline_tps=SEED["baseline_tps"],
        cycle_ms=SEED["cycle_ms"],
        acceptance=SEED["acceptance"],
        depth=SEED["depth"],
        target_tps=SEED["targets"],
    )
    png = plot_plan(res, out / "plan.png")
    say(f"   own drafter p={SEED['acceptance']:.2f} at depth {SEED['depth']}: tau {res.accept_len:.2f} -> "
        f"{res.throughput_tps:.1f} tok/s ({res.speedup:.2f}x): break-even needs tau {res.break_even_accept_len:.2f}")  # fmt: skip
    for t in res.targets:
        say(
            f"   {t.tps:g} tok/s needs tau {t.accept_len:.2f} = {t.per_step_acceptance:.1%} per step (k -> inf)"
        )
    say(f"   plot: {png}")
    summary["steps"].append({"step": "plan", "result": res.to_json(), "plot": str(png)})

    say("3. inspect: the public Kimi-K2 drafter (AQ-MedAI shapes, 1.4M samples), headers only.")
    k2 = write_sparse_drafter(out / "drafters" / "kimi-k2-eagle3", kimi_k2_spec(131072),
                              config_overrides={"max_window_layers": 48, "transformers_version": "4.51.3"})  # fmt: skip
    k25 = write_sparse_drafter(out / "drafters" / "kimi-k2.5-eagle3", kimi_k2_spec(262144),
                               config_overrides={"transformers_version": "4.57.1"})  # fmt: skip
    ins = inspect_checkpoint(str(k2))
    gib = ins["total_bytes"] / 2**30
    say(
        f"   {ins['format']} layout, {len(ins['tensors'])} tensors, {gib:.2f} GiB; missing: {ins['missing'] or 'none'}"
    )
    for t in ins["tensors"][:1] + [x for x in ins["tensors"] if x["name"] == "lm_head.weight"]:
        say(f"   {t['name']} {t['shape']}: {t['role']}")
    summary["steps"].append(
        {
            "step": "inspect",
            "result": {k: ins[k] for k in ("format", "missing", "unexpected", "total_bytes")},
        }
    )

    say("4. compat: can the K2 drafter be fine-tuned as a K2.5 drafter?")
    c = compat(str(k2), str(k25))
    for f in c.findings:
        say(f"   {f.severity}: {f.message}")
    say(f"   verdict: {c.verdict}")
    summary["steps"].append({"step": "compat drafters", "result": c.to_json()})

    say("5. compat: will each engine serve the K2 drafter on the K2.5 target correctly?")
    tgt = _k25_target_config(out / "targets" / "kimi-k2.5-config")
    c2 = compat(str(k2), str(tgt), "both")
    for eng, e in c2.engines.items():
        say(f"   {eng}: captures HF hidden states {e['captures']}; trained on {e['trained_on']}")
    for f in c2.findings:
        if f.severity != "info":
            say(f"   {f.severity}: {f.message}")
    say(f"   verdict: {c2.verdict}")
    summary["steps"].append({"step": "compat drafter-target", "result": c2.to_json()})

    summary["steps"].append(_zoo_steps(out, say, size, progress))

    say(f"not built yet: {', '.join(NOT_BUILT)}.")
    summary["not_built"] = list(NOT_BUILT)
    return summary


def _zoo_steps(out: Path, say: Callable[[str], None], size: str, progress: bool) -> dict[str, Any]:
    """The K2 -> K2.5 pair in miniature: build, inspect, check a drafter against v2, decode."""
    import torch
    from transformers.utils import logging as hf_logging

    from eagle3kit import zoo
    from eagle3kit.compat import compat
    from eagle3kit.formats.synthetic import write_sparse_drafter
    from eagle3kit.inspection import inspect_checkpoint
    from eagle3kit.model.target import TargetModel
    from eagle3kit.spec import DraftSpec

    hf_logging.disable_progress_bar()  # our own progress bars are enough
    v1, v2 = "dsv3-v1", "dsv3-v2"
    say(
        f"6. zoo: the K2 -> K2.5 pair in miniature ({v1} -> {v2}: DeepSeek-V3 architecture, MLA + MoE,"
    )
    say("   built from the Python standard library on first use, cached afterwards).")
    p1 = zoo.get(v1, size=size, progress=progress)
    p2 = zoo.get(v2, size=size, progress=progress)
    t = inspect_checkpoint(str(p2))["target"]
    say(f"   {p2.name}: {t['architecture']}, {t['num_layers']} layers, hidden {t['hidden_size']}, "
        f"vocab {t['vocab_size']}, default aux layers {t['default_aux_layers']}")  # fmt: skip
    spec = DraftSpec(
        hidden_size=t["hidden_size"], intermediate_size=2 * t["hidden_size"], num_attention_heads=4,
        num_key_value_heads=2, head_dim=t["hidden_size"] // 4, vocab_size=t["vocab_size"],
        draft_vocab_size=t["vocab_size"] // 2, target_hidden_size=t["hidden_size"],
        aux_layers=tuple(t["default_aux_layers"]), dtype="float32",
    )  # fmt: skip
    d = write_sparse_drafter(out / "drafters" / f"{v1}-eagle3", spec, "sglang")
    c = compat(str(d), str(p2), "sglang")
    say(f"   compat (a drafter shaped for {v1}) vs {v2} under SGLang: {c.verdict}")
    target = TargetModel.from_pretrained(p2, dtype=torch.float32)
    prompt = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    '
    ids = target.tokenizer(prompt)["input_ids"] if target.tokenizer is not None else [1, 2, 3]
    new = target.generate_greedy(ids, 32)
    text = target.tokenizer.decode(new) if target.tokenizer is not None else str(new)
    say(f"   {v2} continues {prompt!r} with {text!r}")
    aux = target.forward(torch.tensor([ids])).aux
    say(
        f"   aux hidden states captured at layers {list(target.aux_layers)}: shape {list(aux.shape)} = [B, T, 3H]"
    )
    return {"step": "zoo", "result": {"v1": str(p1), "v2": str(p2), "target": t, "compat": c.to_json(),
                                      "continuation": text, "aux_shape": list(aux.shape)}}  # fmt: skip
