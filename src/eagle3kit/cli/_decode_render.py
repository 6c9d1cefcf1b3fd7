"""The tables of `eval` and `bench` (cli/decode.py)."""

from __future__ import annotations


def _fmt_list(xs) -> str:
    return " ".join(f"{x:.2f}" for x in xs)


def _print_diversity(c, r: dict) -> None:
    """The canned-output check beside tau (issue 22): do the target's answers vary?"""
    d = r.get("target_diversity")
    if not d:
        return
    c.print(
        f"target answers to {d['outputs']} prompts: {d['distinct_outputs']} distinct, "
        f"distinct openings {d['distinct_openings']:.2f}, "
        f"pooled distinct-4 {d['pooled_distinct4']:.2f}"
    )
    if d["warning"]:
        c.print(f"[yellow]warning:[/] {d['warning']}", markup=True, highlight=False)


def render_eval(r: dict) -> None:
    from eagle3kit.cli._render import out

    c = out()
    tau = "tau_online" if r["mode"] == "online" else "tau_walk"  # counted online, walked offline
    c.print(f"[bold]{r['mode']}[/] eval, depth {r['depth']}: {tau} {r[tau]:.2f}")
    c.print(f"  per-position acceptance  {_fmt_list(r['per_position_acceptance'])}")
    c.print(f"  conditional acceptance   {_fmt_list(r['conditional_acceptance'])}")
    if r["mode"] == "offline":
        u = r["all_positions"]
        c.print(
            f"  {r['cycles']} chain cycles walked on {r['samples']} held-out answers; with "
            f"every position as a cycle start (training's metric) "
            f"tau_every_position {u['tau_every_position']:.2f}"
        )
        if r.get("heldout"):
            c.print(
                f"  samples: {r['heldout']['rule']} ({r['samples']} of "
                f"{r['heldout']['store_samples']})"
            )
    for w in r.get("warnings") or []:
        c.print(f"  [yellow]warning[/]: {w}")
    if r["mode"] == "online":
        s, b = r["tokens_per_s_spread"], r["baseline_tokens_per_s_spread"]
        c.print(
            f"  speculative {s['median']:.1f} tok/s (min {s['min']:.1f}, max {s['max']:.1f}); "
            f"greedy {b['median']:.1f} (min {b['min']:.1f}, max {b['max']:.1f}); "
            f"speedup {r['speedup']:.2f}x"
        )
        c.print(
            f"  decode step {r['decode_ms']:.2f} ms, cycle {r['cycle_ms']:.2f} ms (draft "
            f"{r['draft_ms']:.2f} + verify {r['verify_ms']:.2f}); lossless: {r['lossless']}"
        )
        o, f = r["offline_same_answers"], r["offline"]
        c.print(
            f"  offline tau_walk {o['tau_walk']:.2f} on the {o['samples']} answers "
            f"decoded vs tau_online {r['tau_online']:.2f}: "
            f"gap {100 * r['offline_online_gap']:+.1f}%"
            f" (offline on all {f['samples']} held-out samples: {f['tau_walk']:.2f})"
        )
        _print_diversity(c, r)


def render_bench(r: dict) -> None:
    from rich.table import Table

    from eagle3kit.cli._render import out

    e = r["environment"]
    t = Table(
        title=f"{r['prompts']} prompts x {r['max_new_tokens']} tokens, {r['repeats']} repeats"
    )
    cols = ("method", "tok/s median", "min", "max", "speedup", "tokens/forward")
    for col in (*cols, "upper bound", "bound w/ drafting", "of bound"):
        t.add_column(col)
    for m in r["methods"]:
        tps = m["tokens_per_s"]
        bound = m.get("bound_with_draft_cost")
        t.add_row(
            m["name"],
            f"{tps['median']:.1f}",
            f"{tps['min']:.1f}",
            f"{tps['max']:.1f}",
            f"{m['speedup']:.2f}x",
            f"{m['tokens_per_forward']:.2f}",
            f"{m['upper_bound']:.2f}x" if bound else "-",
            f"{bound:.2f}x" if bound else "-",
            f"{100 * m['fraction_of_bound']:.0f}%" if bound else "-",
        )
    c = out()
    c.print(t)
    if r["target_distinct4"] is not None:
        c.print(f"target greedy distinct-4: {r['target_distinct4']:.2f}")
    _print_diversity(c, r)
    c.print(
        f"{e['cpu']} ({e['cpu_count']} cpus, {e['threads']} threads, load {e['load_avg_1m']}) "
        f"| python {e['python']} | torch {e['torch']} | transformers {e['transformers']}"
    )
