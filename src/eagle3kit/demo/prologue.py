"""The demo's prologue: the situation in the seed (Kimi-K2.5 under SGLang on 8 GPUs), priced
by `plan` on its measurements, and the two real Kimi drafters' headers (as sparse files, so
nothing is downloaded) through `inspect` and `compat`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The user's measurements: plain decode 82 tok/s, an EAGLE-3 verify cycle of 30 ms, their own
# drafter accepting 64% per step at depth 2, and the speeds they hoped for.
SEED = {
    "baseline_tps": 82.0,
    "cycle_ms": 30.0,
    "acceptance": 0.64,
    "depth": 2,
    "targets": (150.0, 200.0),
}


def k25_target_config(d: Path) -> Path:
    """A Kimi-K2.5-shaped target config (DeepSeek-V3 architecture, 61 layers): headers only."""
    d.mkdir(parents=True, exist_ok=True)
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "num_hidden_layers": 61,
        "hidden_size": 7168,
        "vocab_size": 163840,
        "max_position_embeddings": 262144,
        "n_routed_experts": 384,
        "num_experts_per_tok": 8,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
    }
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    return d


def seed_plan(out: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """`eagle3kit plan` on the seed's numbers, with its PNG."""
    from eagle3kit.plan import plan
    from eagle3kit.plan.plots import plot_plan

    say(
        "Prologue: Kimi-K2.5 under SGLang: plain decode 82 tok/s, EAGLE-3 cycle 30 ms, "
        "own drafter 64%/step."
    )
    res = plan(
        baseline_tps=SEED["baseline_tps"],
        cycle_ms=SEED["cycle_ms"],
        acceptance=SEED["acceptance"],
        depth=SEED["depth"],
        target_tps=SEED["targets"],
    )
    png = plot_plan(res, out / "plan-seed.png")
    say(
        f"   plan: tau {res.tau:.2f} -> {res.throughput_tps:.1f} tok/s "
        f"({res.speedup:.2f}x); break-even needs tau {res.break_even_tau:.2f}; "
        + ", ".join(f"{t.tps:g} tok/s needs tau {t.tau:.2f}" for t in res.targets)
    )
    return {"step": "plan", "result": res.to_json(), "plot": str(png)}


def prologue(out: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The situation in the seed: plan on its numbers; inspect and compat the Kimi drafters."""
    from eagle3kit.checkpoint.compat import compat
    from eagle3kit.checkpoint.eagle3.synthetic import kimi_k2_spec, write_sparse_drafter
    from eagle3kit.checkpoint.findings import trained_on_words
    from eagle3kit.checkpoint.inspection import inspect_checkpoint

    steps = [seed_plan(out, say)]
    k2 = write_sparse_drafter(
        out / "drafters" / "kimi-k2-eagle3",
        kimi_k2_spec(131072),
        config_overrides={"max_window_layers": 48, "transformers_version": "4.51.3"},
    )
    k25 = write_sparse_drafter(
        out / "drafters" / "kimi-k2.5-eagle3",
        kimi_k2_spec(262144),
        config_overrides={"transformers_version": "4.57.1"},
    )
    ins = inspect_checkpoint(str(k2))
    say(
        f"   inspect: the AQ-MedAI Kimi-K2 drafter ({ins['format']} layout, "
        f"{ins['total_bytes'] / 2**30:.2f} GiB, headers only): "
        f"missing {ins['missing'] or 'nothing'}"
    )
    keep = ("format", "missing", "unexpected", "total_bytes")
    steps.append({"step": "inspect", "result": {k: ins[k] for k in keep}})
    c = compat(str(k2), str(k25))
    say(f"   compat K2 drafter vs K2.5 drafter: {c.verdict}")
    steps.append({"step": "compat drafters", "result": c.to_json()})
    c2 = compat(str(k2), str(k25_target_config(out / "targets" / "kimi-k2.5-config")), "both")
    say(f"   compat K2 drafter on the K2.5 target: {c2.verdict}")
    for eng, e in c2.engines.items():
        say(
            f"     {eng} captures HF hidden states {e['captures']}; "
            f"the drafter was trained on {trained_on_words(e['trained_on'])}"
        )
    steps.append({"step": "compat drafter-target", "result": c2.to_json()})
    say(
        "   Will the K2 drafter work on K2.5? Only data can say: "
        "the rest replays the story on the zoo."
    )
    return steps
