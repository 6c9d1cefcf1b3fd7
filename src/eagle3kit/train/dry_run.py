"""`eagle3kit train --dry-run`: the plan of a run, nothing written (docs/train.md "Dry run").

Everything is resolved as `train` resolves it, from headers (train/dry_run_inputs.py): the
method and the drafter's shape, its parameters, the split, the steps and tokens, the
optimizer state, the memory per rank by part (train/dry_run_memory.py, with this process's
own baseline measured), and the time: a short measured step on this device
(train/dry_run_step.py) where the drafter's step fits in a share of the memory here (the
target's forward too, when it is small enough to load), else an estimate from the step's
floating-point work at this machine's measured matmul rate, said as such.

    {"kind": "eagle3kit.train_plan", "schema": 1, "method", "source", "device", "world_size",
     "target": {...}, "drafter": {...}, "parameters": {...}, "data": {...}, "schedule": {...},
     "memory": {"baseline", ..., "peak", "available"}, "time": {...}, "warnings": [...]}
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import statistics
import time
from typing import Any

from eagle3kit.core import registry
from eagle3kit.core.artifacts import stamp
from eagle3kit.core.errors import bad
from eagle3kit.train.config import from_options
from eagle3kit.train.dry_run_inputs import BATCH_DRAWS, Inputs, config_params, read_inputs
from eagle3kit.train.dry_run_memory import Batch, Where, memory, trainable_params

MEASURE_SHARE = 0.5  # measure a step only when it needs at most this share of free memory
TARGET_SHARE = 0.25  # load the target for its forward only within this share


def plan(options: Any, *, measure: bool = True) -> dict[str, Any]:
    """The plan of the run `options` (a TrainOptions) describes; `measure=False` skips the
    measured step (the time is then estimated)."""
    t0 = time.perf_counter()
    cfg = from_options(dataclasses.asdict(options))
    cfg.validate()
    method = _method(cfg)
    inp = read_inputs(cfg, method)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    sched = schedule(inp, cfg, world)
    cpu = not cfg.device.startswith("cuda")
    probe = _Probe(inp, cfg, sched, world, cpu)
    probe.threads = getattr(options, "threads", None)
    if measure and probe.fits():  # torch is imported for the step: the run's own batches
        sched = probe.sched = schedule(inp, cfg, world, exact=True)
    timing = probe.run(measure)
    mem = memory(inp, cfg, sched["batch"], sched["eval"], sched["lengths"], probe.where)
    doc = {
        "method": method,
        "source": inp.source,
        "device": cfg.device,
        "world_size": world,
        "target": _target(inp, cfg),
        "drafter": _drafter(inp, cfg),
        "parameters": _parameters(inp, cfg),
        "data": _data(inp, cfg, sched),
        "schedule": _public(sched),
        "memory": {**mem, "available": probe.available, "fits": mem["peak"] <= probe.available},
        "time": _time(timing, sched, inp),
        "warnings": _warnings(mem, probe.available, timing),
        "plan_seconds": time.perf_counter() - t0,
    }
    return stamp(doc, "train_plan")


def _method(cfg: Any) -> str:
    """--method, else a warm start's own (its checkpoint says), else the default; refused in
    one line when `train` unrolls it in a way the plan does not count."""
    method = cfg.method
    if method is None and cfg.init_from:
        from eagle3kit.checkpoint.io.safetensors_io import load_checkpoint
        from eagle3kit.checkpoint.methods import detect_method

        ck = load_checkpoint(cfg.init_from)
        method = detect_method(ck.config, ck.names())
    method = method or registry.DEFAULT
    if not registry.get(method).train_unroll:
        planned = [m for m in registry.names(can="train") if registry.get(m).train_unroll]
        raise bad(
            "--dry-run",
            f"expected a method the plan counts ({', '.join(planned)}), found {method}, "
            "which trains in its own loop",
        )
    return method


def schedule(inp: Inputs, cfg: Any, world: int, *, exact: bool = False) -> dict[str, Any]:
    """Steps, tokens and padded lengths. `exact`: the run's own batches (train/loop.py
    `batch_indices`, torch's seeded permutation; the first BATCH_DRAWS steps), else
    BATCH_DRAWS batches of B samples drawn here with the run's seed. A rank's batch is B /
    ranks rows at the longest padded length of those batches (the peak)."""
    capped = [min(n, cfg.max_len) for n in inp.lengths]
    train = [capped[i] for i in inp.train_idx]
    n = min(inp.steps, BATCH_DRAWS)
    if exact:
        from eagle3kit.train.loop import batch_indices

        idx = inp.train_idx
        draws = [
            max(capped[i] for i in batch_indices(s, idx, cfg.batch_size, cfg.seed))
            for s in range(n)
        ]
    else:
        rng = random.Random(cfg.seed)
        b = min(cfg.batch_size, len(train))
        draws = [max(rng.sample(train, b)) for _ in range(n)]
    held = inp.held_idx[: cfg.eval_samples]
    evals = [
        Batch(len(ch), max(capped[i] for i in ch))
        for ch in (held[j : j + cfg.eval_batch] for j in range(0, len(held), cfg.eval_batch))
    ]
    every = cfg.eval_every or max(1, inp.steps // 10)
    n_eval = 1 + sum(1 for s in range(1, inp.steps + 1) if s % every == 0 or s == inp.steps)
    per_step = cfg.batch_size * statistics.fmean(train)
    return {
        "steps": inp.steps,
        "batch_size": cfg.batch_size,
        "rows_per_rank": math.ceil(cfg.batch_size / world),
        "epochs": inp.steps * cfg.batch_size / len(train),
        "tokens_per_step": per_step,
        "total_tokens": per_step * inp.steps,
        "padded_length": {"mean": statistics.fmean(draws), "peak": max(draws)},
        "evaluations": n_eval,
        "eval_every": every,
        "eval_batches": len(evals),
        "batch": Batch(math.ceil(cfg.batch_size / world), max(draws)),
        "eval": evals,
        "lengths": draws + [e.length for e in evals],
        "train_lengths": draws,
    }


def _public(sched: dict[str, Any]) -> dict[str, Any]:
    hidden = ("batch", "eval", "lengths", "train_lengths")
    return {k: v for k, v in sched.items() if k not in hidden}


class _Probe:
    """This machine: its free memory, this process's baseline, and the measured step (or the
    matmul rate the estimate uses)."""

    def __init__(self, inp: Inputs, cfg: Any, sched: dict[str, Any], world: int, cpu: bool):
        self.inp, self.cfg, self.sched, self.cpu = inp, cfg, sched, cpu
        self.threads: int | None = None  # torch CPU threads (--threads)
        self.held: list[Any] = []  # what the run holds besides tensors (`_run_imports`)
        self.available = available_memory(cfg.device)
        # a GPU's memory per rank starts from nothing (a run reports max_memory_allocated)
        self.where = Where(world, cpu, rss() if cpu else 0)

    def step_bytes(self) -> int:
        """What the measured step allocates: the drafter with its gradients and AdamW state,
        its embedding, one batch's features and activations (the plan's own counts)."""
        m = memory(self.inp, self.cfg, self.sched["batch"], [], [], Where(1, self.cpu, 0))
        keep = ("drafter_weights", "gradients", "optimizer_state", "embedding")
        return sum(m[k] for k in keep) + m["batch_features"] + m["activations"]

    def fits(self) -> bool:
        return self.step_bytes() <= MEASURE_SHARE * self.available

    def run(self, measure: bool) -> dict[str, Any]:
        if not (measure and self.fits()):
            why = "not asked" if not measure else "the drafter's step does not fit a short test"
            return {"measured": False, "why": why, **self._estimate()}
        import torch  # the run's own imports, before the baseline is read
        import transformers  # noqa: F401

        if self.threads:
            torch.set_num_threads(self.threads)
        self.held = _run_imports(self.inp, self.cfg)
        self.where = Where(self.where.world, self.cpu, rss() if self.cpu else 0)
        from eagle3kit.train.dry_run_step import measure as measure_step

        b, e = self.sched["batch"], self.sched["eval"]
        shapes = {
            "rows": b.rows,
            "lengths": self.sched["train_lengths"],
            "eval_rows": e[0].rows,
            "eval_length": round(statistics.fmean(x.length for x in e)),
        }
        weights = self.inp.target_params * 4
        with_target = weights <= TARGET_SHARE * self.available
        out = measure_step(self.inp, self.cfg, shapes, with_target=with_target)
        shapes = {k: v for k, v in shapes.items() if k != "lengths"}
        return {"measured": True, "shapes": shapes, **out}

    def _estimate(self) -> dict[str, Any]:
        """The step's floating-point work at the matmul rate measured here (CPU), said as an
        estimate: the drafter 6 x params x tokens x k, the target's forward 2 x its active
        params x tokens (a mixture of experts: the routed experts a token uses, as its config
        counts them)."""
        rate = matmul_rate()
        inp, b = self.inp, self.sched["batch"]
        tokens = b.rows * self.sched["padded_length"]["mean"]
        cod = registry.get(inp.method).train_unroll == "cod"
        p = trainable_params(inp.spec, cod)
        drafter = 6 * p * tokens * self.cfg.ttt_steps
        try:
            share = config_params(inp.target_config, active=True) / config_params(inp.target_config)
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            share = 1.0
        target = 2 * inp.target_params * share * tokens if inp.source == "online" else 0
        return {
            "flop_rate": rate,
            "drafter_step_s": drafter / rate,
            "target_forward_s": target / rate if target else None,
            "eval_batch_s": 2 * p * self.sched["eval"][0].rows * tokens / b.rows / rate,
        }


def _run_imports(inp: Inputs, cfg: Any) -> list[Any]:
    """What a run holds besides its tensors, so that the baseline read after it is the run's:
    the target's model class and its tokenizer (online), matplotlib with a figure drawn (the
    run draws RUN/curves.png; here into memory). Returns them, to keep them alive."""
    import importlib
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].plot([0, 1], [1, 2])
    fig.savefig(io.BytesIO(), format="png")
    kept: list[Any] = [fig]
    mtype = inp.target_config.get("model_type")
    if inp.source == "online" and isinstance(mtype, str):
        name = mtype.replace("-", "_")
        try:
            importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        except ImportError:
            pass
        kept.append(_tokenizer(inp.target, cfg.trust_remote_code))
    return kept


def _tokenizer(target: str, trust_remote_code: bool) -> Any:
    """The target's tokenizer, as a run loads it (None where it cannot be loaded here)."""
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(target, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        return None


def rss() -> int:
    """This process's resident memory now (bytes; Linux /proc, else the peak so far)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def available_memory(device: str) -> int:
    """Free memory of the device: MemAvailable on the CPU, free CUDA memory on a GPU."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def matmul_rate(n: int = 384, repeats: int = 3) -> float:
    """FLOP/s of an n x n float32 matmul here (numpy; the best of `repeats`)."""
    import numpy as np

    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / max(best, 1e-9)


def _target(inp: Inputs, cfg: Any) -> dict[str, Any]:
    c = inp.target_config
    return {
        "path": inp.target,
        "params": inp.target_params,
        "params_from": inp.target_params_from,
        "dtype": cfg.target_dtype,
        "hidden_size": c.get("hidden_size"),
        "vocab_size": c.get("vocab_size"),
        "layers": c.get("num_hidden_layers"),
    }


def _drafter(inp: Inputs, cfg: Any) -> dict[str, Any]:
    s = inp.spec
    out = {
        "init": inp.init,
        "attention": s.attention,
        "hidden_size": s.hidden_size,
        "intermediate_size": s.intermediate_size,
        "heads": s.num_attention_heads,
        "kv_heads": s.num_key_value_heads,
        "head_dim": s.head_dim,
        "vocab_size": s.vocab_size,
        "draft_vocab_size": s.draft_vocab_size,
        "aux_layers": list(s.aux_layers),
        "ttt_steps": cfg.ttt_steps,
    }
    if s.is_mla:
        keys = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim")
        out.update({k: getattr(s, k) for k in (*keys, "v_head_dim")})
    return out


def _parameters(inp: Inputs, cfg: Any) -> dict[str, Any]:
    cod = registry.get(inp.method).train_unroll == "cod"
    p = trainable_params(inp.spec, cod)
    return {
        "trainable": p,
        "frozen_embedding": inp.spec.vocab_size * inp.spec.hidden_size,
        "optimizer": "AdamW (2 float32 moments per parameter)",
        "optimizer_state_bytes": 8 * p,
    }


def _data(inp: Inputs, cfg: Any, sched: dict[str, Any]) -> dict[str, Any]:
    capped = [min(n, cfg.max_len) for n in inp.lengths]
    return {
        "path": cfg.features or cfg.data,
        "samples": len(inp.lengths),
        "tokens": sum(inp.lengths),
        "train_samples": len(inp.train_idx),
        "heldout_samples": len(inp.held_idx),
        "eval_samples": min(cfg.eval_samples, len(inp.held_idx)),
        "max_len": cfg.max_len,
        "mean_length": statistics.fmean(capped),
        "loss_fraction": inp.loss_fraction,
        "teacher_columns": inp.teacher_cols,
    }


def _time(t: dict[str, Any], sched: dict[str, Any], inp: Inputs) -> dict[str, Any]:
    """Seconds per step (drafter + the target's forward online), per evaluation (every
    held-out batch; online its features are computed once, at the start), and in all."""
    fwd = t.get("target_forward_s")
    step = t["drafter_step_s"] + (fwd or 0.0)
    evaluation = t["eval_batch_s"] * sched["eval_batches"]
    setup = (fwd or 0.0) * sched["eval_batches"]
    total = setup + sched["steps"] * step + sched["evaluations"] * evaluation
    out = {**t, "step_s": step, "evaluation_s": evaluation, "total_s": total}
    if t.get("drafter_step_cpu_s") is not None:  # the work, whatever else the host runs
        out["step_cpu_s"] = t["drafter_step_cpu_s"] + (t.get("target_forward_cpu_s") or 0.0)
    if inp.source == "online" and fwd is None:
        out["note"] = "the target's forward is not in the step time (too large to load here)"
    return out


def _warnings(mem: dict[str, int], available: int, t: dict[str, Any]) -> list[str]:
    out = []
    if mem["peak"] > available:
        out.append(
            f"the run needs {_gib(mem['peak'])} per rank, more than the {_gib(available)} free here"
        )
    if not t["measured"]:
        out.append(f"time per step estimated, not measured ({t['why']})")
    return out


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _count(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n:.0f}"


def _secs(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 60:.1f} min" if s >= 120 else f"{s:.2f} s"


MEMORY_LINES = (
    ("baseline", "this process (measured)"),
    ("target_weights", "target weights"),
    ("drafter_weights", "drafter weights"),
    ("gradients", "gradients"),
    ("optimizer_state", "optimizer state"),
    ("embedding", "frozen embedding + vocab maps"),
    ("data", "DATA in memory"),
    ("heldout_features", "held-out features"),
    ("masks", "unroll masks"),
    ("batch_features", "one batch's features"),
    ("activations", "TTT unroll activations"),
    ("target_forward", "target forward (online)"),
    ("evaluation", "an evaluation's logits"),
)


def plan_lines(doc: dict[str, Any]) -> list[str]:
    """The plan for a person (cli/ prints it)."""
    d, p, s, m, t = doc["drafter"], doc["parameters"], doc["schedule"], doc["memory"], doc["time"]
    data, tg = doc["data"], doc["target"]
    shape = f"{d['attention']} H={d['hidden_size']} I={d['intermediate_size']} "
    shape += f"heads={d['heads']}/{d['kv_heads']} Vd={d['draft_vocab_size']} k={d['ttt_steps']}"
    out = [
        f"plan ({doc['source']}, {doc['device']}, {doc['world_size']} rank(s)): {doc['method']} "
        f"drafter, {d['init']}, {shape}",
        f"target {tg['path']}: {_count(tg['params'])} parameters (from its {tg['params_from']})",
        f"parameters: {_count(p['trainable'])} trained, {_count(p['frozen_embedding'])} frozen "
        f"(embedding); optimizer state {_gib(p['optimizer_state_bytes'])}",
        f"data: {data['train_samples']} training / {data['heldout_samples']} held-out samples, "
        f"mean {data['mean_length']:.0f} tokens (max {data['max_len']})",
        f"steps: {s['steps']} of {s['batch_size']} samples ({s['epochs']:.2f} epochs), "
        f"{_count(s['tokens_per_step'])} tokens/step, {_count(s['total_tokens'])} in all; "
        f"padded length mean {s['padded_length']['mean']:.0f}, peak {s['padded_length']['peak']}",
        "memory per rank:",
    ]
    out += [f"  {label:32s} {_gib(m[key])}" for key, label in MEMORY_LINES if m.get(key)]
    out.append(
        f"  {'peak':32s} {_gib(m['peak'])} (the largest of the last three counted; free "
        f"here: {_gib(m['available'])})"
    )
    how = "measured here" if t["measured"] else "estimated"
    if t.get("at_lengths"):
        how += f" at lengths {', '.join(map(str, t['at_lengths']))}"
    fwd = t.get("target_forward_s")
    out.append(
        f"time per step ({how}): {_secs(t['step_s'])} (drafter {_secs(t['drafter_step_s'])}"
        + (f", target forward {_secs(fwd)})" if fwd is not None else ")")
        + f"; {s['evaluations']} evaluations of {_secs(t['evaluation_s'])}; "
        f"total {_secs(t['total_s'])}"
    )
    return out + [f"warning: {w}" for w in doc["warnings"]]
