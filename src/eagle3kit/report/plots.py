"""The report's figures, as PNG bytes (matplotlib imported inside each function; Agg canvas).

Each function takes plain numbers already read from the runs' JSON artefacts and returns PNG
bytes, or None when there is nothing to draw.
"""

from __future__ import annotations

import io
from typing import Any


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def _fig(w: float = 7.5, h: float = 4.2) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=100)
    return fig, fig.add_subplot(1, 1, 1)


def per_position(series: dict[str, list[float]]) -> bytes | None:
    """Per-position acceptance acc_i (i = 1..k) for each labelled series."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    fig, ax = _fig()
    for label, acc in series.items():
        ax.plot(range(1, len(acc) + 1), acc, "o-", label=label)
    ax.set_xticks(range(1, max(len(v) for v in series.values()) + 1))
    ax.set_xlabel("draft position i")
    ax.set_ylabel("acceptance at position i")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Per-position acceptance")
    return _png(fig)


def training_curves(runs: dict[str, list[dict[str, Any]]]) -> bytes | None:
    """Held-out loss (step 0 of the TTT unroll; a DFlash run's one block loss) and simulated
    accept length per run."""
    runs = {k: v for k, v in runs.items() if v}
    if not runs:
        return None
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.8), dpi=100)
    a1, a2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for label, rows in runs.items():
        steps = [r["step"] for r in rows]
        loss = [r["loss"][0] if isinstance(r["loss"], list) else r["loss"] for r in rows]
        a1.plot(steps, loss, "o-", ms=3, label=label)
        a2.plot(steps, [r["tau_every_position"] for r in rows], "o-", ms=3, label=label)
    a1.set_title("held-out loss, step 0")
    a2.set_title("held-out simulated accept length")
    for a in (a1, a2):
        a.set_xlabel("optimizer step")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    return _png(fig)


def throughput(
    baseline_tps: float, cycle_ms: float, depth: int, points: dict[str, tuple[float, float]]
) -> bytes | None:
    """tok/s = tau / cycle_s against tau, the baseline, break-even tau = baseline x cycle_s,
    and the measured (tau, tok/s) points."""
    if baseline_tps <= 0 or cycle_ms <= 0:
        return None
    fig, ax = _fig()
    cs = cycle_ms / 1000.0
    top = max(depth + 1.0, *(t for t, _ in points.values()), baseline_tps * cs) * 1.1
    ax.plot([1, top], [1 / cs, top / cs], "C0-", label=f"cycle model: τ / {cycle_ms:.3g} ms")
    ax.axhline(baseline_tps, color="C3", label=f"baseline {baseline_tps:.4g} tok/s")
    be = baseline_tps * cs
    ax.axvline(be, color="C3", ls=":", label=f"break-even τ {be:.2f}")
    for i, (label, (tau, tps)) in enumerate(points.items()):
        ax.plot(
            [tau],
            [tps],
            "o",
            color=f"C{i + 1}",
            ms=8,
            label=f"{label}: τ {tau:.2f}, {tps:.4g} tok/s",
        )
    ax.set_xlabel("accept length τ (tokens per target verify)")
    ax.set_ylabel("tok/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Throughput vs accept length")
    return _png(fig)


def similarity(rows: list[dict[str, Any]], fc: dict[str, float] | None) -> bytes | None:
    """Cosine mean, p10 and CKA per aux layer (and fc(aux)), reference vs new target."""
    if not rows:
        return None
    labels = [f"h[{r['layer']}]" for r in rows] + (["fc(aux)"] if fc else [])
    allr = rows + ([fc] if fc else [])
    fig, ax = _fig()
    w = 0.27
    for j, (key, name) in enumerate(
        (("cosine_mean", "cosine mean"), ("cosine_p10", "cosine p10"), ("cka", "linear CKA"))
    ):
        ax.bar([i + (j - 1) * w for i in range(len(allr))], [r[key] for r in allr], w, label=name)
    ax.set_xticks(range(len(allr)), labels)
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    ax.set_title("Hidden-state similarity, reference vs new target")
    return _png(fig)


def warm_vs_scratch(runs: dict[str, tuple[list[int], list[float]]]) -> bytes | None:
    """Simulated accept length against samples seen, one line per run."""
    runs = {k: v for k, v in runs.items() if v[0]}
    if len(runs) < 1:
        return None
    fig, ax = _fig()
    for label, (x, y) in runs.items():
        ax.plot(x, y, "o-", ms=3, label=label)
    ax.set_xlabel("training samples seen")
    ax.set_ylabel("held-out simulated accept length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Warm start vs from scratch")
    return _png(fig)


def by_length(points: list[dict[str, Any]], title: str = "") -> bytes | None:
    """τ (measured, needed), cycle and plain step, and speedup against context length
    (plan/plots.py `by_length_figure`, the figure `plan --plot` writes)."""
    from eagle3kit.plan.plots import by_length_figure

    fig = by_length_figure(points, title)
    return None if fig is None else _png(fig)


def tau_by_length(series: dict[str, list[tuple[int, float]]]) -> bytes | None:
    """τ against context length, one line per series (a probe: NEW and the reference)."""
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    fig, ax = _fig()
    for label, pts in series.items():
        ax.plot([n for n, _ in pts], [t for _, t in pts], "o-", label=label)
    ax.set_xscale("symlog", base=2)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("accept length τ")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("τ by context length")
    return _png(fig)
