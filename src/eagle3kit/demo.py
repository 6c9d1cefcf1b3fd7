"""`eagle3kit demo`: the user's whole story, offline, on built-in data.

Prologue: the Kimi-K2 -> K2.5 situation as it was (the seed's measurements; the real
drafters' headers as sparse files, so nothing is downloaded): plan, inspect, compat.

Then the same story replayed for real on the zoo's DeepSeek-V3-architecture pair (v1 = "K2",
v2 = "K2.5": same shapes and tokenizer, weights moved by further training on shifted data):

 1. build both targets and "the K2 drafter": an EAGLE-3 drafter trained on v1 (cached under
    $EAGLE3KIT_HOME/drafters like a zoo member);
 2. bench plain vs speculative decoding on v2 with that stale drafter;
 3. plan from those measurements; inspect and compat the drafter against v2; probe it;
 4. fine-tune it on v2 data, and train one from scratch on the same data and steps;
 5. eval (offline, the same held-out v2 samples) and bench both; write the report.

Each step is the library call behind the CLI verb it names. Conversations are the standard
library's own functions (user: "write `name` from `module`"; assistant: its source); a real
run would regenerate the answers with the target (`eagle3kit data regenerate`) first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3kit.core.progress import Progress, emit

# The seed's measurements (FORMATS.md "Numbers from the seeds").
SEED = {
    "baseline_tps": 82.0,
    "cycle_ms": 30.0,
    "acceptance": 0.64,
    "depth": 2,
    "targets": (150.0, 200.0),
}


@dataclass(frozen=True)
class Recipe:
    """Sizes of the zoo story (full: the default; tiny: tests)."""

    v1_samples: int  # conversations for the K2 drafter (from the stdlib library slice)
    v2_samples: int  # conversations of "K2.5 data" (the stdlib test slice)
    max_len: int
    batch: int
    k2_steps: int
    tune_steps: int  # fine-tune and scratch alike
    draft_vocab: int
    ttt_steps: int
    depth: int  # chain depth for bench and plan
    bench_prompts: int
    bench_repeats: int
    bench_tokens: int
    probe_samples: int
    lr: float = 3e-3  # from scratch; a warm start uses lr / 3


RECIPES = {
    "full": Recipe(
        v1_samples=1000,
        v2_samples=600,
        max_len=128,
        batch=8,
        k2_steps=240,
        tune_steps=80,
        draft_vocab=1024,
        ttt_steps=3,
        depth=3,
        bench_prompts=4,
        bench_repeats=2,
        bench_tokens=96,
        probe_samples=16,
    ),
    "tiny": Recipe(
        v1_samples=160,
        v2_samples=96,
        max_len=96,
        batch=8,
        k2_steps=200,
        tune_steps=12,
        draft_vocab=256,
        ttt_steps=3,
        depth=3,
        bench_prompts=2,
        bench_repeats=1,
        bench_tokens=24,
        probe_samples=6,
    ),
}
PAIR = ("dsv3-v1", "dsv3-v2")


def default_out() -> Path:
    """$EAGLE3KIT_HOME/demo (default ~/.cache/eagle3kit/demo): never the working directory."""
    from eagle3kit.zoo import home

    return home() / "demo"


def _k25_target_config(d: Path) -> Path:
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


def _prologue(out: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The situation in the seed: plan on its numbers; inspect and compat the Kimi drafters."""
    from eagle3kit.checkpoint.compat import compat
    from eagle3kit.checkpoint.inspection import inspect_checkpoint
    from eagle3kit.checkpoint.synthetic import kimi_k2_spec, write_sparse_drafter
    from eagle3kit.plan import plan
    from eagle3kit.plan.plots import plot_plan

    steps: list[dict[str, Any]] = []
    say(
        "Prologue: Kimi-K2.5 under SGLang: plain decode 82 tok/s, EAGLE-3 cycle 30 ms, own drafter 64%/step."
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
        f"   plan: tau {res.accept_len:.2f} -> {res.throughput_tps:.1f} tok/s ({res.speedup:.2f}x); "
        f"break-even needs tau {res.break_even_accept_len:.2f}; "
        + ", ".join(f"{t.tps:g} tok/s needs tau {t.accept_len:.2f}" for t in res.targets)
    )
    steps.append({"step": "plan", "result": res.to_json(), "plot": str(png)})
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
        f"   inspect: the AQ-MedAI Kimi-K2 drafter ({ins['format']} layout, {ins['total_bytes'] / 2**30:.2f} GiB, "
        f"headers only): missing {ins['missing'] or 'nothing'}"
    )
    steps.append(
        {
            "step": "inspect",
            "result": {k: ins[k] for k in ("format", "missing", "unexpected", "total_bytes")},
        }
    )
    c = compat(str(k2), str(k25))
    say(f"   compat K2 drafter vs K2.5 drafter: {c.verdict}")
    steps.append({"step": "compat drafters", "result": c.to_json()})
    c2 = compat(str(k2), str(_k25_target_config(out / "targets" / "kimi-k2.5-config")), "both")
    say(f"   compat K2 drafter on the K2.5 target: {c2.verdict}")
    for eng, e in c2.engines.items():
        say(
            f"     {eng} captures HF hidden states {e['captures']}; the drafter was trained on {e['trained_on']}"
        )
    steps.append({"step": "compat drafter-target", "result": c2.to_json()})
    say(
        "   Will the K2 drafter work on K2.5? Only data can say: the rest replays the story on the zoo."
    )
    return steps


def run_demo(
    out: str | Path | None = None,
    say: Callable[[str], None] = print,
    *,
    size: str = "full",
    progress: Progress | None = None,
    threads: int = 1,
) -> dict[str, Any]:
    """Run the whole story into directory `out` (default `default_out()`); `say` receives the
    narration, `progress` the progress events. Returns the summary (also DIR/story.json).

    `size="tiny"` (`demo --quick`) uses the zoo's reduced members and a small recipe (tests).
    torch runs on `threads` threads meanwhile (restored after)."""
    if size not in RECIPES:
        from eagle3kit.core.errors import Eagle3Error

        raise Eagle3Error(f"--size: expected one of {', '.join(RECIPES)}, found {size!r}")
    import torch

    t0 = time.perf_counter()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)  # batch-1 decoding of small models: 1 thread is fastest
    try:
        return _run_demo(out, say, size, progress, t0)
    finally:
        torch.set_num_threads(before)


def _run_demo(
    out: str | Path | None,
    say: Callable[[str], None],
    size: str,
    progress: Progress | None,
    t0: float,
) -> dict[str, Any]:
    from eagle3kit.core.atomic import atomic_write_json

    out = Path(out) if out is not None else default_out()
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"out": str(out), "size": size, "steps": _prologue(out, say)}
    story = _Story(out, say, size, RECIPES[size], progress)
    summary["steps"] += story.run()
    summary["headline"] = story.headline
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    summary["report"] = story.report_paths
    atomic_write_json(out / "story.json", summary)
    return summary


def _conversations(slice_name: str, n: int, path: Path) -> Path:
    """``n`` stdlib conversations (evenly spaced over the slice's functions) as OpenAI JSONL."""
    from eagle3kit.core.atomic import atomic_write_text
    from eagle3kit.zoo import corpus as corpus

    # about 30 functions per file: read only as many files as the samples need
    files = corpus.files(slice_name, limit=max(8, n // 10))
    convs = corpus.spaced(corpus.chat_samples(files), n)
    atomic_write_text(path, "".join(json.dumps(c) + "\n" for c in convs))
    return path


class _Story:
    """The zoo story, step by step; each method is one verb (see the module docstring)."""

    def __init__(
        self, out: Path, say: Callable[[str], None], size: str, r: Recipe, progress: Progress | None
    ) -> None:
        self.out, self.say, self.size, self.r, self.progress = out, say, size, r, progress
        self.headline: list[dict[str, Any]] = []
        self.report_paths: dict[str, Any] = {}
        self.n = 0

    def step(self, text: str) -> None:
        self.n += 1
        self.say(f"{self.n}. {text}")
        emit(self.progress, "demo", self.n, 8, "steps", at=text.split(":")[0])

    def run(self) -> list[dict[str, Any]]:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        steps = [self.build()]
        steps.append(self.bench_stale())
        steps.append(self.plan())
        steps.append(self.inspect_compat())
        steps.append(self.probe())
        steps.append(self.train_both())
        steps.append(self.eval_bench())
        steps.append(self.report())
        self.what_next()
        return steps

    # -- 1. targets and the K2 drafter -------------------------------------------------------
    def build(self) -> dict[str, Any]:
        from eagle3kit import zoo
        from eagle3kit.model.target import TargetModel

        v1, v2 = PAIR
        self.step(
            f"zoo: the K2 -> K2.5 pair in miniature: {v1} -> {v2} (DeepSeek-V3 architecture, "
            "MLA + MoE; built from the Python standard library on first use, then cached)"
        )
        self.p1 = zoo.get(v1, size=self.size, progress=self.progress)
        self.p2 = zoo.get(v2, size=self.size, progress=self.progress)
        self.v2 = TargetModel.from_pretrained(self.p2)
        self.say(
            f"   {self.p2}: {self.v2.num_layers} layers, hidden {self.v2.hidden_size}, vocab {self.v2.vocab_size}"
        )
        self.k2 = self.k2_drafter()
        self.say(f"   the K2 drafter (trained on {v1}): {self.k2}")
        self.v2_data = self._prepare("test", self.r.v2_samples, self.out / "data", self.p2)
        return {
            "step": "zoo",
            "result": {
                "v1": str(self.p1),
                "v2": str(self.p2),
                "k2_drafter": str(self.k2),
                "v2_data": str(self.v2_data),
            },
        }

    def _prepare(self, slice_name: str, n: int, folder: Path, target: Path) -> Path:
        from eagle3kit.data.prepare import prepare

        data = folder / f"{slice_name}-prepared"
        if (data / "data.json").is_file():
            return data
        folder.mkdir(parents=True, exist_ok=True)
        src = _conversations(slice_name, n, folder / f"{slice_name}.jsonl")
        prepare([src], target, data, max_length=self.r.max_len, progress=self.progress)
        return data

    def k2_key(self) -> dict[str, Any]:
        """What the K2 drafter depends on (a change rebuilds it)."""
        fields = ("v1_samples", "max_len", "batch", "k2_steps", "draft_vocab", "ttt_steps", "lr")
        return {
            "recipe": {f: getattr(self.r, f) for f in fields},
            "target": str(self.p1),
            "version": 1,
        }

    def k2_drafter(self) -> Path:
        """$EAGLE3KIT_HOME/drafters/dsv3-v1-eagle3[-tiny]: trained once, then reused."""
        from eagle3kit.core.atomic import atomic_dir, atomic_write_json
        from eagle3kit.zoo import home

        name = "dsv3-v1-eagle3" + ("" if self.size == "full" else f"-{self.size}")
        final = home() / "drafters" / name
        key = self.k2_key()
        done = final / "demo-drafter.json"
        if done.is_file() and json.loads(done.read_text()) == key:
            return final / "run" / "best"
        self.say(f"   training the K2 drafter on {PAIR[0]} (once; cached in {final})")
        final.parent.mkdir(parents=True, exist_ok=True)
        with atomic_dir(final) as tmp:
            data = self._prepare("lib", self.r.v1_samples, tmp / "data", self.p1)
            self._train(tmp / "run", self.p1, data, self.r.k2_steps, None)
            atomic_write_json(tmp / "demo-drafter.json", key)
        return final / "run" / "best"

    def _train(
        self, run: Path, target: Path, data: Path, steps: int, init: Path | None
    ) -> dict[str, Any]:
        from eagle3kit.train.loop import TrainConfig, train

        cfg = TrainConfig(
            out=str(run),
            target=str(target),
            data=str(data),
            init_from=str(init) if init else None,
            draft_vocab_size=None if init else self.r.draft_vocab,
            ttt_steps=self.r.ttt_steps,
            steps=steps,
            batch_size=self.r.batch,
            max_len=self.r.max_len,
            lr=self.r.lr / 3 if init else self.r.lr,
            eval_every=max(1, steps // 6),
            eval_samples=32,
        )
        return train(cfg, progress=self.progress)

    # -- 2. bench: plain vs the stale drafter -----------------------------------------------
    def _prompts(self) -> list[list[int]]:
        from eagle3kit.data.prepared import load_prepared

        data = load_prepared(self.v2_data)
        _, held = data.split()
        out = []
        for i in held[: self.r.bench_prompts]:
            s = data[i]
            first = int(s.loss_mask.nonzero()[0]) if s.loss_mask.any() else len(s.input_ids)
            out.append(s.input_ids[:first].tolist())
        return out

    def _drafter(self, path: Path) -> Any:
        from eagle3kit.model.drafter import Eagle3Drafter

        d = Eagle3Drafter.from_pretrained(path).eval().requires_grad_(False)
        d.set_embedding(self.v2.embed_tokens.weight)
        return d

    def bench(self, path: Path, label: str, role: str, run: str | None) -> dict[str, Any]:
        """`eagle3kit bench` (greedy and chain, interleaved, `bench_repeats` repeats) with the
        drafter at `path` on v2; its document plus the demo's summary keys."""
        from eagle3kit.core.atomic import atomic_write_json
        from eagle3kit.measure.bench import bench

        r = self.r
        doc = bench(
            self.v2,
            self._drafter(path),
            self._prompts(),
            repeats=r.bench_repeats,
            max_new_tokens=r.bench_tokens,
            depth=r.depth,
            methods=("greedy", "chain"),
            progress=self.progress,
        )
        rows = {m["name"]: m for m in doc["methods"]}
        g, c = rows["greedy"], rows["chain"]
        doc.update(
            {
                "label": label,
                "role": role,
                "run": run,
                "depth": r.depth,
                "baseline_tps": round(g["tokens_per_s"]["median"], 3),
                "spec_tps": round(c["tokens_per_s"]["median"], 3),
                "speedup": round(c["speedup"], 4),
                "accept_len": round(c["tau"], 4),
                "cycle_ms": round(c["cycle_ms"], 3),
                "draft_ms": round(c["draft_ms"], 3),
                "verify_ms": round(c["verify_ms"], 3),
                "per_position_acceptance": [round(x, 4) for x in c["per_position_acceptance"]],
                "lossless": c.get("same_tokens_as_greedy"),
            }
        )
        atomic_write_json(self.out / f"bench-{role}.json", doc)
        self.say(
            f"   {label}: {doc['spec_tps']:.1f} tok/s vs plain {doc['baseline_tps']:.1f} "
            f"({doc['speedup']:.2f}x), tau {doc['accept_len']:.2f}, cycle {doc['cycle_ms']:.1f} ms "
            f"(draft {doc['draft_ms']:.1f} + verify {doc['verify_ms']:.1f}); medians of {r.bench_repeats}; "
            f"output identical to plain greedy: {doc['lossless']}; the target's distinct-4 "
            f"{doc['target_distinct4']:.2f} (a looping target is easy to predict) [bench-{role}.json]"
        )
        return doc

    def bench_stale(self) -> dict[str, Any]:
        self.step(f"bench: plain vs speculative decoding on {PAIR[1]} with the stale K2 drafter")
        self.stale = self.bench(self.k2, "stale K2 drafter", "stale", None)
        self.headline.append(
            {
                "name": "baseline (plain)",
                "tps": self.stale["baseline_tps"],
                "plain": self.stale["baseline_tps"],
                "speedup": 1.0,
                "accept_len": 1.0,
                "source": "bench-stale.json",
            }
        )
        self.headline.append(self._row("stale K2 drafter", self.stale, "bench-stale.json"))
        return {"step": "bench stale", "result": self.stale}

    @staticmethod
    def _row(name: str, b: dict[str, Any], src: str) -> dict[str, Any]:
        return {
            "name": name,
            "tps": b["spec_tps"],
            "plain": b["baseline_tps"],
            "speedup": b["speedup"],
            "accept_len": b["accept_len"],
            "source": src,
        }

    # -- 3. plan, inspect, compat, probe -----------------------------------------------------
    def plan(self) -> dict[str, Any]:
        from eagle3kit.core.atomic import atomic_write_json
        from eagle3kit.plan import plan
        from eagle3kit.plan.plots import plot_plan

        self.step("plan: what does the measured cycle need?")
        b = self.stale
        res = plan(
            baseline_tps=b["baseline_tps"],
            cycle_ms=b["cycle_ms"],
            accept_len=min(b["accept_len"], b["depth"] + 1),
            depth=b["depth"],
        )
        atomic_write_json(self.out / "plan.json", res.to_json())
        plot_plan(res, self.out / "plan.png")
        self.say(
            f"   cycle {b['cycle_ms']:.1f} ms, plain {b['baseline_tps']:.1f} tok/s: break-even tau "
            f"{res.break_even_accept_len:.2f}; the stale drafter's {b['accept_len']:.2f} gives "
            f"{res.throughput_tps:.1f} tok/s modelled ({res.speedup:.2f}x) [plan.json]"
        )
        return {"step": "plan zoo", "result": res.to_json()}

    def inspect_compat(self) -> dict[str, Any]:
        from eagle3kit.checkpoint.compat import compat
        from eagle3kit.checkpoint.inspection import inspect_checkpoint
        from eagle3kit.core.atomic import atomic_write_json

        self.step(f"inspect and compat: the K2 drafter against {PAIR[1]}")
        ins = inspect_checkpoint(str(self.k2))
        c = compat(str(self.k2), str(self.p2), "both")
        atomic_write_json(self.out / "compat.json", c.to_json())
        self.say(
            f"   {ins['format']} layout, {len(ins['tensors'])} tensors, missing {ins['missing'] or 'nothing'}"
        )
        for eng, e in c.engines.items():
            self.say(
                f"   {eng}: captures HF hidden states {e['captures']}; trained on {e['trained_on']}"
            )
        self.say(f"   verdict: {c.verdict} [compat.json]")
        return {"step": "compat zoo", "result": c.to_json()}

    def probe(self) -> dict[str, Any]:
        from eagle3kit.core.atomic import atomic_write_json
        from eagle3kit.measure.probe import probe

        self.step(f"probe: plug the K2 drafter into {PAIR[1]} and measure (Phase 0)")
        r = probe(
            str(self.k2),
            str(self.p2),
            str(self.p1),
            str(self.v2_data),
            bench=str(self.out / "bench-stale.json"),
            depth=self.r.depth,
            samples=self.r.probe_samples,
            max_len=self.r.max_len,
            online_prompts=min(2, self.r.bench_prompts),
            online_tokens=self.r.bench_tokens,
            progress=self.progress,
        )
        atomic_write_json(self.out / "probe.json", r)
        s = r["similarity"]
        self.say(
            "   similarity v1 vs v2 at "
            + ", ".join(f"h[{x['layer']}] cos {x['cosine_mean']:.3f} CKA {x['cka']:.3f}" for x in s)
            + f"; fc(aux) cos {r['fc_similarity']['cosine_mean']:.3f}"
        )
        ch = r["aux"]["chosen"]
        self.say(
            f"   trained on h{ch['layers']} ({ch['reading']}; margin {ch['margin_accept_len']} in tau)"
        )
        al = r["accept_len"]
        self.say(f"   offline tau: v2 {al['target']:.3f}, v1 {al['reference']:.3f}")
        for why in r["reasons"]:
            self.say(f"   - {why}")
        self.say(f"   verdict: {r['verdict']} [probe.json]")
        return {
            "step": "probe",
            "result": {k: r[k] for k in ("verdict", "accept_len", "similarity", "reasons")},
        }

    # -- 4. fine-tune and from scratch; 5. eval, bench, report -------------------------------
    def _run(self, name: str, init: Path | None) -> dict[str, Any]:
        """A training run in DIR/runs/NAME: reused when complete with this recipe, resumed
        when a previous demo was killed in it, else started fresh."""
        import shutil

        from eagle3kit.train.loop import TrainConfig, train

        run = self.out / "runs" / name
        state = run / "state" / "state.json"
        if state.is_file():
            cfg = json.loads(state.read_text()).get("config", {})
            same = cfg.get("steps") == self.r.tune_steps and cfg.get("init_from") == (
                str(init) if init else None
            )
            if same and (run / "summary.json").is_file():
                self.say(f"   {name}: complete run reused [runs/{name}/summary.json]")
                return json.loads((run / "summary.json").read_text())
            if same:
                self.say(f"   {name}: resuming an interrupted run")
                return train(
                    TrainConfig.from_json({**cfg, "out": str(run)}),
                    resume=True,
                    progress=self.progress,
                )
        if run.exists():
            shutil.rmtree(run)  # a previous demo's run with another recipe
        return self._train(run, self.p2, self.v2_data, self.r.tune_steps, init)

    def train_both(self) -> dict[str, Any]:
        self.step(
            f"train: fine-tune the K2 drafter on {PAIR[1]} data, and one from scratch on the same data"
        )
        t = time.perf_counter()
        self.tuned = self._run("finetune", self.k2)
        t_tune = time.perf_counter() - t
        self.scratch = self._run("scratch", None)
        t_scratch = time.perf_counter() - t - t_tune
        for name, s, secs in (
            ("finetune", self.tuned, t_tune),
            ("scratch", self.scratch, t_scratch),
        ):
            self.say(
                f"   {name}: best held-out simulated tau {s['sim_accept_len']:.3f} at step {s['best_step']}"
                f"/{s['steps']} ({secs:.0f} s) [runs/{name}/summary.json]"
            )
        return {"step": "train", "result": {"finetune": self.tuned, "scratch": self.scratch}}

    def eval_bench(self) -> dict[str, Any]:
        from eagle3kit.core.atomic import atomic_write_json
        from eagle3kit.measure.probe import _features, data_batch, offline_acceptance

        self.step(
            "eval and bench: stale, fine-tuned and scratch drafters on the same held-out v2 samples"
        )
        batch = data_batch(str(self.v2_data), 32, self.r.max_len)
        paths = {
            "stale K2 drafter": self.k2,
            "fine-tuned": self.out / "runs" / "finetune" / "best",
            "from scratch": self.out / "runs" / "scratch" / "best",
        }
        ev: dict[str, Any] = {
            "kind": "eval",
            "target": str(self.p2),
            "data": batch.source,
            "depth": self.r.depth,
            "sequences": int(batch.input_ids.shape[0]),
            "drafters": {},
        }
        for label, p in paths.items():
            d = self._drafter(p)
            ev["drafters"][label] = {
                "path": str(p),
                **offline_acceptance(d, _features(self.v2, batch, d), self.r.depth),
            }
            self.say(
                f"   {label}: offline tau {ev['drafters'][label]['accept_len']:.3f}, "
                f"acc {ev['drafters'][label]['acc']} [eval.json]"
            )
        atomic_write_json(self.out / "eval.json", ev)
        tuned = self.bench(paths["fine-tuned"], "fine-tuned", "finetuned", "finetune")
        scratch = self.bench(paths["from scratch"], "from scratch", "scratch", "scratch")
        self.headline.append(self._row("fine-tuned", tuned, "bench-finetuned.json"))
        self.headline.append(self._row("from scratch", scratch, "bench-scratch.json"))
        return {"step": "eval", "result": ev}

    def report(self) -> dict[str, Any]:
        from eagle3kit.report import report

        self.step("report: report.md and report.html from the JSON artefacts")
        self.report_paths = report(
            [self.out], self.out, title=f"eagle3kit demo: {PAIR[0]} -> {PAIR[1]}"
        )
        self.say("")
        self.say(f"{'':22} {'tok/s':>8} {'plain':>8} {'speedup':>8} {'tau':>6}   source")
        for h in self.headline:
            self.say(
                f"{h['name']:22} {h['tps']:8.1f} {h['plain']:8.1f} {h['speedup']:7.2f}x "
                f"{h['accept_len']:6.2f}   {h['source']}"
            )
        self.say("(speedup: against plain decoding measured in the same bench run, interleaved)")
        self.say(f"report: {self.report_paths['report_html']}")
        return {"step": "report", "result": {"headline": self.headline, **self.report_paths}}

    def what_next(self) -> None:
        k2, out = self.k2, self.out
        self.say("")
        self.say("what next:")
        self.say(
            f"  serve the fine-tuned drafter on vLLM: eagle3kit convert {out}/runs/finetune/best --to vllm "
            f"-o {out}/finetune-vllm --verifier {self.p2}  (prints the vllm serve command)"
        )
        self.say(
            "  on your own drafter and target: eagle3kit compat DRAFTER TARGET; eagle3kit probe --drafter DRAFTER "
            "--target NEW --reference-target OLD --baseline-tps X --cycle-ms Y"
        )
        self.say(
            "    then: eagle3kit data prepare CONVERSATIONS.jsonl --target NEW -o DATA; "
            "eagle3kit train --target NEW --data DATA --init-from DRAFTER -o RUN; eagle3kit report RUN -o OUT"
        )
        self.say(
            f"  vLLM reads the K2 drafter's ids differently (compat.json): eagle3kit convert {k2} --to vllm "
            f"-o {out}/k2-vllm --verifier {self.p2}"
        )
        from eagle3kit.decode import greedy_generate

        ids = greedy_generate(self.v2, self._prompts()[0], max_new_tokens=32).tokens
        text = self.v2.tokenizer.decode(ids) if self.v2.tokenizer is not None else str(ids)
        self.say(f"  {PAIR[1]} answered the first bench prompt with: {text[:160]!r}")
        self.say(
            "  why the zoo's text reads oddly: its targets are a few million parameters trained for minutes "
            "on the standard library's source; they continue code plausibly but are not assistants "
            "(docs/zoo.md). Acceptance, speed and every verb work the same as on a real model."
        )


def k2_drafter(size: str = "full", progress: Progress | None = None) -> Path:
    """The demo's "K2 drafter" (trained on dsv3-v1), built once and cached; its servable dir."""
    from eagle3kit import zoo

    st = _Story(zoo.home(), lambda s: None, size, RECIPES[size], progress)
    st.p1 = zoo.get(PAIR[0], size=size, progress=progress)
    return st.k2_drafter()
