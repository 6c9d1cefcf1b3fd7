"""The demo's story, top to bottom (`run_demo` -> `story`): every value a local variable,
every step one function of what the earlier steps returned."""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import Any

from eagle3kit.core.artifacts import stamp
from eagle3kit.core.atomic import atomic_write_json
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.core.progress import Progress, emit
from eagle3kit.demo.prologue import prologue
from eagle3kit.demo.steps import (
    PAIR,
    RECIPES,
    Recipe,
    bench_drafter,
    default_out,
    drop_stale,
    headline_row,
    held_out_prompts,
    k2_drafter,
    load_drafter,
    lookup_row,
    lookup_verdict,
    predict_headline,
    prepare_data,
    train_run,
)

Say = Callable[[str], None]
STEPS = 8


def run_demo(
    out: str | Path | None = None,
    say: Say = print,
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
        raise Eagle3Error(f"--size: expected one of {', '.join(RECIPES)}, found {size!r}")
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)  # batch-1 decoding of small models: 1 thread is fastest
    try:
        return story(Path(out) if out is not None else default_out(), say, size, progress)
    finally:
        torch.set_num_threads(before)


def story(out: Path, say: Say, size: str, progress: Progress | None) -> dict[str, Any]:
    """The prologue, then the zoo story's eight steps; writes OUT/story.json."""
    from transformers.utils import logging as hf_logging

    t0, r = time.perf_counter(), RECIPES[size]
    out.mkdir(parents=True, exist_ok=True)
    hf_logging.disable_progress_bar()
    steps = prologue(out, say)
    n = count(1)

    def step(text: str) -> None:
        k = next(n)
        say(f"{k}. {text}")
        emit(progress, "demo", k, STEPS, "steps", at=text.split(":")[0])

    step(
        f"zoo: the K2 -> K2.5 pair in miniature: {PAIR[0]} -> {PAIR[1]} (DeepSeek-V3 "
        "architecture, MLA + MoE; trained on the Python standard library, shipped with "
        "the package)"
    )
    p1, p2, v2, k2, kd, v2_data = _zoo_step(out, size, r, say, progress)
    steps.append({"step": "zoo", "result": _paths(p1=p1, p2=p2, k2=k2, kd=kd, data=v2_data)})
    prompts = held_out_prompts(v2_data, r.bench_prompts)

    step(f"bench: plain vs speculative decoding on {PAIR[1]} with the stale K2 drafter")
    stale = bench_step(
        out, v2, k2, prompts, r, say, progress, ("stale K2 drafter", "stale", None), lookup=True
    )
    headline = [
        baseline_row(stale),
        lookup_row(stale, "bench-stale.json"),
        headline_row("stale K2 drafter", stale, "bench-stale.json"),
    ]
    steps.append({"step": "bench stale", "result": stale})

    step("plan: what does the measured cycle need?")
    steps.append(plan_step(out, stale, say))
    step(f"inspect and compat: the K2 drafter against {PAIR[1]}")
    steps.append(compat_step(out, k2, p2, say))
    step(f"probe: plug the K2 drafter into {PAIR[1]} and measure (Phase 0)")
    steps.append(probe_step(out, k2, p2, p1, v2_data, r, say, progress))

    step(
        f"train: fine-tune the K2 drafter on {PAIR[1]} data, one from scratch on the same data, "
        "and fine-tune the K2 DFlash block drafter on it"
    )
    steps.append(train_step(out, k2, kd, p2, v2_data, r, say, progress))
    step(
        "eval and bench: stale, fine-tuned and scratch EAGLE-3 drafters, the stale and "
        f"fine-tuned DFlash drafters and {PAIR[1]}'s own MTP head on the same held-out v2 samples"
    )
    ev, rows = eval_bench_step(out, v2, p2, k2, kd, v2_data, prompts, r, say, progress)
    headline += rows
    predict_headline(headline, stale, ev, r.depth)
    steps.append({"step": "eval", "result": ev})

    step("report: report.md and report.html from the JSON artefacts")
    report = report_step(out, headline, say)
    steps.append({"step": "report", "result": {"headline": headline, **report}})
    what_next(out, k2, p2, v2, prompts, say)
    return _summary(out, size, steps, headline, report, t0)


def _paths(p1, p2, k2, kd, data) -> dict[str, str]:
    """story.json's record of the zoo step: where the pair, the K2 drafters and the data are."""
    return {
        "v1": str(p1),
        "v2": str(p2),
        "k2_drafter": str(k2),
        "k2_dflash": str(kd),
        "v2_data": str(data),
    }


def _zoo_step(out: Path, size: str, r: Recipe, say: Say, progress):
    """The zoo pair, NEW loaded, the K2 drafters (EAGLE-3, DFlash), NEW's DATA:
    (p1, p2, v2, k2, kd, v2_data)."""
    from eagle3kit import zoo
    from eagle3kit.demo.dflash_arm import k2_dflash
    from eagle3kit.model.target import TargetModel

    p1 = zoo.get(PAIR[0], size=size)  # shipped in the package: never built here
    p2 = zoo.get(PAIR[1], size=size)
    for name in PAIR:
        if w := zoo.chat_warning(name, size=size):
            say(f"   warning: {w}")
    v2 = TargetModel.from_pretrained(p2)
    say(f"   {p2}: {v2.num_layers} layers, hidden {v2.hidden_size}, vocab {v2.vocab_size}")
    k2 = k2_drafter(size, progress, say)
    say(f"   the K2 drafter (trained on {PAIR[0]}): {k2}")
    kd = k2_dflash(size, progress, say)
    say(f"   the K2 DFlash drafter (trained on {PAIR[0]}): {kd}")
    drop_stale(out, size)
    v2_data = prepare_data("test", r.v2_samples, out / "data", p2, r, progress)
    return p1, p2, v2, k2, kd, v2_data


def _summary(out: Path, size: str, steps, headline, report, t0: float) -> dict[str, Any]:
    """The stamped summary of the story, also written to OUT/story.json."""
    summary = {"out": str(out), "size": size, "steps": steps, "headline": headline}
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    summary["report"] = report
    summary = stamp(summary, "demo")
    atomic_write_json(out / "story.json", summary)
    return summary


def bench_step(
    out, target, drafter_dir, prompts, r: Recipe, say: Say, progress, labels, lookup: bool = False
):
    """`bench` of one drafter, written to OUT/bench-ROLE.json and told in one line."""
    label, role, run = labels
    doc = bench_drafter(
        target,
        drafter_dir,
        prompts,
        r,
        progress,
        {"label": label, "role": role, "run": run},
        lookup,
    )
    atomic_write_json(out / f"bench-{role}.json", doc)
    say(
        f"   {label}: {doc['spec_tps']:.1f} tok/s vs plain {doc['baseline_tps']:.1f} "
        f"({doc['speedup']:.2f}x), tau_online {doc['tau_online']:.2f}, "
        f"cycle {doc['cycle_ms']:.1f} ms "
        f"(draft {doc['draft_ms']:.1f} + verify {doc['verify_ms']:.1f}); medians of "
        f"{r.bench_repeats}; output identical to plain greedy: {doc['lossless']}; the target's "
        f"distinct-4 {doc['target_distinct4']:.2f} (a looping target is easy to predict) "
        f"[bench-{role}.json]"
    )
    d = doc.get("target_diversity")
    if d:  # the canned-output check: do the target's answers depend on the prompt?
        say(
            f"   the target's answers to {d['outputs']} prompts: {d['distinct_outputs']} "
            f"distinct, pooled distinct-4 {d['pooled_distinct4']:.2f}"
        )
        if d["warning"]:
            say(f"   warning: {d['warning']}")
    return doc


def baseline_row(b: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "baseline (plain)",
        "tps": b["baseline_tps"],
        "plain": b["baseline_tps"],
        "speedup": 1.0,
        "tau_online": 1.0,
        "source": "bench-stale.json",
    }


def plan_step(out: Path, b: dict[str, Any], say: Say) -> dict[str, Any]:
    """`plan` on the stale bench's cycle and accept length."""
    from eagle3kit.plan import plan
    from eagle3kit.plan.plots import plot_plan

    res = plan(
        baseline_tps=b["baseline_tps"],
        cycle_ms=b["cycle_ms"],
        tau=min(b["tau_online"], b["depth"] + 1),
        depth=b["depth"],
    )
    atomic_write_json(out / "plan.json", res.to_json())
    plot_plan(res, out / "plan.png")
    say(
        f"   cycle {b['cycle_ms']:.1f} ms, plain {b['baseline_tps']:.1f} tok/s: break-even tau "
        f"{res.break_even_tau:.2f}; the stale drafter's {b['tau_online']:.2f} gives "
        f"{res.throughput_tps:.1f} tok/s modelled ({res.speedup:.2f}x) [plan.json]"
    )
    return {"step": "plan zoo", "result": res.to_json()}


def compat_step(out: Path, k2: Path, p2: Path, say: Say) -> dict[str, Any]:
    """`inspect` and `compat` of the K2 drafter against v2."""
    from eagle3kit.checkpoint.compat import compat
    from eagle3kit.checkpoint.findings import trained_on_words
    from eagle3kit.checkpoint.inspection import inspect_checkpoint

    ins = inspect_checkpoint(str(k2))
    c = compat(str(k2), str(p2), "both")
    atomic_write_json(out / "compat.json", c.to_json())
    say(
        f"   {ins['format']} layout, {len(ins['tensors'])} tensors, "
        f"missing {ins['missing'] or 'nothing'}"
    )
    for eng, e in c.engines.items():
        say(
            f"   {eng}: captures HF hidden states {e['captures']}; trained on "
            f"{trained_on_words(e['trained_on'])}"
        )
    say(f"   verdict: {c.verdict} [compat.json]")
    return {"step": "compat zoo", "result": c.to_json()}


def probe_step(out, k2, p2, p1, v2_data, r: Recipe, say: Say, progress) -> dict[str, Any]:
    """`probe`: the K2 drafter on v2 against v1 (Phase 0)."""
    from eagle3kit.measure.probe import probe

    res = probe(
        str(k2),
        str(p2),
        str(p1),
        str(v2_data),
        bench=str(out / "bench-stale.json"),
        depth=r.depth,
        samples=r.probe_samples,
        max_len=r.max_len,
        online_prompts=min(2, r.bench_prompts),
        online_tokens=r.bench_tokens,
        progress=progress,
    )
    atomic_write_json(out / "probe.json", res)
    sims = ", ".join(
        f"h[{x['layer']}] cos {x['cosine_mean']:.3f} CKA {x['cka']:.3f}" for x in res["similarity"]
    )
    say(f"   similarity v1 vs v2 at {sims}; fc(aux) cos {res['fc_similarity']['cosine_mean']:.3f}")
    ch = res["aux"]["chosen"]
    say(
        f"   trained on h{ch['layers']} ({ch['reading']}; margin "
        f"{ch['margin_tau_every_position']} in tau_every_position)"
    )
    al = res["tau_every_position"]
    say(f"   offline tau_every_position: v2 {al['target']:.3f}, v1 {al['reference']:.3f}")
    for why in res["reasons"]:
        say(f"   - {why}")
    say(f"   verdict: {res['verdict']} [probe.json]")
    keep = ("verdict", "tau_every_position", "similarity", "reasons")
    return {"step": "probe", "result": {k: res[k] for k in keep}}


def train_step(out, k2, kd, p2, v2_data, r: Recipe, say: Say, progress) -> dict[str, Any]:
    """`train --init-from K2`, `train` from scratch and `train --method dflash --init-from KD`
    (the K2 DFlash drafter), on the same v2 data and steps."""
    from eagle3kit.demo import dflash_arm

    done = {}
    for name, init in (("finetune", k2), ("scratch", None)):
        t = time.perf_counter()
        done[name] = train_run(out, name, p2, v2_data, init, r, say, progress)
        done[name + "_seconds"] = time.perf_counter() - t
    t = time.perf_counter()
    df = dflash_arm.train_dflash_run(out, p2, v2_data, r, say, progress, init=kd)
    df_s = time.perf_counter() - t
    for name in ("finetune", "scratch"):
        s = done[name]
        on = [k for k, v in (s.get("flags") or {}).items() if v]  # the family it trained
        family = f"{s.get('method', 'eagle3')}" + (f" ({', '.join(on)})" if on else "")
        say(
            f"   {name} [{family}]: best held-out tau_walk {s['tau_walk']:.3f} "
            f"(every position {s['tau_every_position']:.3f}) at step "
            f"{s['best_step']}/{s['steps']} ({done[name + '_seconds']:.0f} s) "
            f"[runs/{name}/summary.json]"
        )
    say(
        f"   DFlash fine-tuned from the K2 DFlash drafter (block {df['block_size']}, "
        f"{df['draft_layers']} layer): best held-out tau "
        f"{df['tau_every_position']:.3f} (every position) at step {df['best_step']}/"
        f"{df['steps']} ({df_s:.0f} s) [runs/{dflash_arm.RUN}/summary.json]"
    )
    res = {"finetune": done["finetune"], "scratch": done["scratch"], "dflash": df}
    return {"step": "train", "result": res}


def eval_bench_step(out, v2, p2, k2, kd, v2_data, prompts, r: Recipe, say: Say, progress):
    """`eval` (offline, the same held-out v2 samples) of the three EAGLE-3 drafters, the two
    DFlash ones and v2's own MTP head, then `bench` of all but the stale EAGLE-3 drafter
    (benched in step 2). Returns the eval document and their headline rows."""
    from eagle3kit.measure.probe_batches import data_batch

    batch = data_batch(str(v2_data), 32, r.max_len)
    paths = {
        "stale K2 drafter": k2,
        "fine-tuned": out / "runs" / "finetune" / "best",
        "from scratch": out / "runs" / "scratch" / "best",
    }
    ev: dict[str, Any] = {
        "kind": "eagle3kit.demo_eval",
        "schema": 1,
        "target": str(p2),
        "data": batch.source,
        "depth": r.depth,
        "sequences": int(batch.input_ids.shape[0]),
        "drafters": _eval_eagle3(v2, paths, batch, r.depth, say),
    }
    rows = []
    for label, role, run in (
        ("fine-tuned", "finetuned", "finetune"),
        ("from scratch", "scratch", "scratch"),
    ):
        b = bench_step(out, v2, paths[label], prompts, r, say, progress, (label, role, run))
        rows.append(headline_row(label, b, f"bench-{role}.json"))
    rows += _dflash_arms(out, v2, kd, batch, ev, prompts, r, say, progress)
    rows += _mtp_arm(out, v2, batch, ev, prompts, r, say, progress)
    atomic_write_json(out / "eval.json", ev)
    return ev, rows


def _dflash_arms(out, v2, kd, batch, ev, prompts, r: Recipe, say: Say, progress) -> list:
    """The stale K2 DFlash drafter and its fine-tune: eval (into ``ev``) and bench; rows."""
    from eagle3kit.demo import dflash_arm

    rows = []
    for label, role, path, run in (
        (dflash_arm.STALE, "stale-dflash", kd, None),
        (dflash_arm.LABEL, "dflash", out / "runs" / dflash_arm.RUN / "best", dflash_arm.RUN),
    ):
        df, t_df = dflash_arm.load_dflash(path, v2)  # t_df: v2 capturing the drafter's layers
        try:
            e = dflash_arm.eval_dflash(df, t_df, batch, r.depth, path)
            ev["drafters"][label] = e
            say(f"   {label}: offline tau_walk {e['tau_walk']:.3f}, acc {e['acc']} [eval.json]")
            b = bench_step(out, t_df, df, prompts, r, say, progress, (label, role, run))
            rows.append(headline_row(label, b, f"bench-{role}.json"))
        finally:
            t_df.close()
    return rows


def _mtp_arm(out, v2, batch, ev, prompts, r: Recipe, say: Say, progress) -> list:
    """v2's own MTP head, when it ships one: eval (into ``ev``) and bench; its row."""
    from eagle3kit.demo import dflash_arm, mtp_arm

    head = mtp_arm.shipped_head(v2)
    if head is None:
        say(f"   {PAIR[1]} ships no MTP head: no MTP row")
        return []
    e = mtp_arm.eval_mtp(v2, head, dflash_arm._Samples(batch), r.depth)
    ev["drafters"][mtp_arm.LABEL] = e
    say(f"   {mtp_arm.LABEL}: offline tau_walk {e['tau_walk']:.3f}, acc {e['acc']} [eval.json]")
    b = bench_step(out, v2, head, prompts, r, say, progress, (mtp_arm.LABEL, "mtp", None))
    return [headline_row(mtp_arm.LABEL, b, "bench-mtp.json")]


def _eval_eagle3(v2, paths: dict[str, Path], batch, depth: int, say: Say) -> dict[str, Any]:
    """Each EAGLE-3 drafter's offline acceptance on ``batch``: eval.json's entries."""
    from eagle3kit.measure.probe_aux import offline_acceptance, target_features
    from eagle3kit.train.acceptance import acceptance

    out = {}
    for label, p in paths.items():
        d = load_drafter(p, v2)
        feats = target_features(v2, batch, d)
        acc = offline_acceptance(d, feats, depth)
        walk = acceptance(d, feats, depth).walk_acc  # P(a >= i), walked: what decoding sees
        out[label] = {"path": str(p), **acc, "walk_acc": [round(x, 6) for x in walk]}
        say(f"   {label}: offline tau_walk {acc['tau_walk']:.3f}, acc {acc['acc']} [eval.json]")
    return out


def report_step(out: Path, headline: list[dict[str, Any]], say: Say) -> dict[str, Any]:
    """`report` of OUT, and the headline table; returns the report's paths."""
    from eagle3kit.report import report

    paths = report([out], out, title=f"eagle3kit demo: {PAIR[0]} -> {PAIR[1]}")
    say("")
    say(f"{'':22} {'tok/s':>8} {'predicted':>9} {'plain':>8} {'speedup':>8} {'tau':>6}   source")
    for h in headline:
        pred = h.get("predicted_tps")
        pred_s = "—" if pred is None else f"{pred:.1f}"
        say(
            f"{h['name']:22} {h['tps']:8.1f} {pred_s:>9} "
            f"{h['plain']:8.1f} {h['speedup']:7.2f}x {h['tau_online']:6.2f}   {h['source']}"
        )
    say("(speedup: against plain decoding measured in the same bench run, interleaved;")
    say(" predicted: plan --methods from that run's costs and each drafter's offline eval)")
    verdict = lookup_verdict(headline)
    if verdict:
        say(verdict)
    say(f"report: {paths['report_html']}")
    return paths


def what_next(out: Path, k2: Path, p2: Path, v2: Any, prompts, say: Say) -> None:
    """The commands a user runs next, and what the zoo's v2 actually answers."""
    from eagle3kit.decode import greedy_generate

    say("")
    say("what next:")
    say(
        "  serve the fine-tuned drafter on vLLM: eagle3kit convert "
        f"{out}/runs/finetune/best --to vllm -o {out}/finetune-vllm --verifier {p2}  "
        "(prints the vllm serve command)"
    )
    say(
        "  on your own drafter and target: eagle3kit compat DRAFTER TARGET; eagle3kit probe "
        "--drafter DRAFTER --target NEW --reference-target OLD --baseline-tps X --cycle-ms Y"
    )
    say(
        "    then: eagle3kit data prepare CONVERSATIONS.jsonl --target NEW -o DATA; "
        "eagle3kit train --target NEW --data DATA --init-from DRAFTER -o RUN; "
        "eagle3kit report RUN -o OUT"
    )
    say(
        "  vLLM reads the K2 drafter's ids differently (compat.json): eagle3kit convert "
        f"{k2} --to vllm -o {out}/k2-vllm --verifier {p2}"
    )
    ids = greedy_generate(v2, prompts[0], max_new_tokens=32).tokens
    text = v2.tokenizer.decode(ids) if v2.tokenizer is not None else str(ids)
    say(f"  {PAIR[1]} answered the first bench prompt with: {text[:160]!r}")
    say(
        "  why the zoo's text reads oddly: its targets are a few million parameters trained "
        "for minutes on the standard library's source; they continue code plausibly but are "
        "not assistants (docs/zoo.md). Acceptance, speed and every verb work the same as on a "
        "real model."
    )
