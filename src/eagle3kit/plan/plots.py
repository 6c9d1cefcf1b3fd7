"""Plots (PNG) for plan and, later, eval and report. matplotlib is imported inside each function."""

from __future__ import annotations

import math
import os
from pathlib import Path

from eagle3kit.core.atomic import atomic_write_with
from eagle3kit.core.errors import Eagle3Error
from eagle3kit.plan.forecast import PlanResult


def plot_plan(result: PlanResult, path: str | os.PathLike[str]) -> Path:
    """Throughput against tau at this cycle time, with baseline, break-even, point and targets.

    Written atomically (eagle3kit.core.atomic: temp file, fsync, rename; mode from the umask).
    """
    from matplotlib.figure import Figure  # Agg canvas via savefig; no pyplot global state

    out = Path(path)
    if not out.parent.is_dir():
        raise Eagle3Error(f"--plot: expected a file in an existing directory, found {str(out)!r}")
    r, k, cycle_s = result, result.depth, result.cycle_ms / 1000.0
    taus = [k + 1.0, r.break_even_tau, r.tau] + [t.tau for t in r.targets]
    top = max(2.0, max(taus) * 1.3)  # room right of the last target for its label
    ymax = max([top / cycle_s, r.baseline_tps] + [d.tps for d in r.depths]) * 1.05

    fig = Figure(figsize=(9, 5.5), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    off = {"textcoords": "offset points", "fontsize": 8}  # annotation style
    ax.axhspan(0, r.baseline_tps, color="C3", alpha=0.06)
    ax.text(top, r.baseline_tps / 2, "slower than plain decode  ", ha="right", color="C3")
    line = f"throughput = τ / {r.cycle_ms:.4g} ms cycle (depth {k} reaches τ ≤ {k + 1})"
    ax.plot([1, k + 1], [1 / cycle_s, (k + 1) / cycle_s], "C0-", lw=2, label=line)
    if top > k + 1:
        dashed = f"τ > {k + 1}: not reachable at depth {k}"
        ax.plot([k + 1, top], [(k + 1) / cycle_s, top / cycle_s], "C0--", lw=1.5, label=dashed)
    ax.axhline(
        r.baseline_tps, color="C3", label=f"baseline (plain decode) {r.baseline_tps:.4g} tok/s"
    )
    ax.axvline(r.break_even_tau, color="C3", lw=1, ls=":")
    be = f"break-even τ {r.break_even_tau:.3g}"
    ax.annotate(be, (r.break_even_tau, ymax * 0.02), xytext=(4, 0), color="C3", **off)
    if r.depths:
        each = f"each depth k, own cycle time (best k={r.best_depth}: {r.best_depth_tps:.4g} tok/s)"
        xs, ys = [d.tau for d in r.depths], [d.tps for d in r.depths]
        ax.plot(xs, ys, "C4s-", ms=4, lw=1, label=each)
        for d in r.depths[:: max(1, math.ceil(len(r.depths) / 5))]:
            xy = (d.tau, d.tps)
            ax.annotate(f"k={d.depth}", xy, xytext=(0, -11), color="C4", ha="center", **off)
    now = f"now: τ {r.tau:.3g} → {r.throughput_tps:.4g} tok/s ({r.speedup:.2f}× baseline)"
    ax.plot([r.tau], [r.throughput_tps], "C1o", ms=10, zorder=5, label=now)
    _plot_targets(ax, r, off)
    ax.set_xlim(1.0, top)
    ax.set_ylim(0, ymax)
    ax.set_xlabel("accept length τ (tokens emitted per verify cycle)")
    ax.set_ylabel("throughput (tok/s)")
    title = f"Will speculation pay? baseline {r.baseline_tps:.4g} tok/s, depth {k}\n{r.cycle_model}"
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()

    atomic_write_with(out, lambda tmp: fig.savefig(tmp, format="png"))
    return out


def _plot_targets(ax, r: PlanResult, off: dict) -> None:
    """A star per target throughput at the tau it needs, with the per-step rates it implies."""
    k = r.depth
    for i, t in enumerate(r.targets):
        star = "target: τ it needs at this cycle time" if i == 0 else None
        ax.plot([t.tau], [t.tps], "C2*", ms=14, zorder=5, label=star)
        p_k = t.per_step_acceptance_at_depth
        at_k = f"unreachable at depth {k}" if p_k is None else f"{p_k:.1%} at depth {k}"
        text = (
            f"{t.tps:g} tok/s needs τ {t.tau:.3g}\nper-step p {at_k}\n"
            f"p {t.per_step_acceptance:.1%} as depth → ∞"
        )
        ax.annotate(text, (t.tau, t.tps), xytext=(10, -6), va="top", color="C2", **off)


def by_length_figure(points: list[dict], title: str = ""):
    """τ (measured, and needed to break even), cycle and plain step, and speedup against
    context length, from a plan's `by_length` entries (plan/by_length.py `to_json`). Returns
    the matplotlib Figure (Agg), or None with no point."""
    from matplotlib.figure import Figure

    pts = [p for p in points if p.get("tau") is not None]
    if not pts:
        return None
    xs = [p["context_length"] for p in pts]
    fig = Figure(figsize=(12, 3.8), dpi=100)
    a1, a2, a3 = (fig.add_subplot(1, 3, i) for i in (1, 2, 3))
    a1.plot(xs, [p["tau"] for p in pts], "C0o-", label="τ measured")
    a1.plot(xs, [p["break_even_tau"] for p in pts], "C3s--", label="τ needed (break-even)")
    a1.set_ylabel("accept length τ")
    a2.plot(xs, [p["cycle_ms"] for p in pts], "C0o-", label="speculative cycle")
    a2.plot(xs, [p["plain_ms"] for p in pts], "C3s--", label="plain step")
    a2.set_ylabel("ms")
    a3.plot(xs, [p["speedup"] for p in pts], "C0o-", label="decode τ / cycle")
    req = [(x, p["request_speedup"]) for x, p in zip(xs, pts, strict=True)]
    req = [(x, s) for x, s in req if s is not None]
    if req:
        a3.plot(*zip(*req, strict=True), "C2^-", label="one request (prefill included)")
    a3.axhline(1.0, color="C3", lw=1, ls=":")
    a3.set_ylabel("speedup over plain")
    for ax, t in ((a1, "τ against context"), (a2, "cost against context"), (a3, "speedup")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel("context length (tokens)")
        ax.set_title(t, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_by_length(points: list[dict], path: str | os.PathLike[str], title: str = "") -> Path:
    """`by_length_figure` written atomically to `path` (a PNG)."""
    out = Path(path)
    if not out.parent.is_dir():
        raise Eagle3Error(f"--plot: expected a file in an existing directory, found {str(out)!r}")
    fig = by_length_figure(points, title)
    if fig is None:
        raise Eagle3Error("--plot: expected by-length points with an accept length, found none")
    atomic_write_with(out, lambda tmp: fig.savefig(tmp, format="png"))
    return out
