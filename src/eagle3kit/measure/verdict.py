"""The probe's verdict (in process, from stores, and against live servers): plug-in,
fine-tune or from-scratch from the drafter's retained gain, its fc(aux) similarity and plan's
break-even at the measured tau; and the speeds that break-even is taken at (`--bench`, or
`--baseline-tps` with `--cycle-ms`)."""

from __future__ import annotations

from typing import Any

from eagle3kit.core.artifacts import kind_of
from eagle3kit.core.errors import Eagle3Error, bad

# Verdict thresholds (see `decide`).
PLUG_IN_RETENTION = 0.9  # NEW keeps >= 90% of D's gain on OLD (tau - 1): plug in as is
WARM_START_RETENTION = 0.25  # keeps >= 25% of the gain: D still knows something: fine-tune it
WARM_START_FC_COSINE = 0.5  # or fc(aux) still points the same way on average


def speed_inputs(
    bench: str | None, baseline_tps: float | None, cycle_ms: float | None
) -> tuple[float | None, float | None]:
    """(baseline tok/s, cycle ms) from --bench or from both --baseline-tps and --cycle-ms."""
    if bench is not None and (baseline_tps is not None or cycle_ms is not None):
        raise Eagle3Error("probe: give --bench or --baseline-tps/--cycle-ms, not both")
    if (baseline_tps is None) != (cycle_ms is None):
        raise Eagle3Error("probe: --baseline-tps and --cycle-ms go together")
    return read_bench(bench) if bench is not None else (baseline_tps, cycle_ms)


def read_bench(path: str) -> tuple[float, float]:
    """(baseline tok/s, cycle ms) from a bench JSON: `bench --json` or `bench --url --json`
    (by its kind: plain decoding's step and the speculative cycle it measured), or a
    hand-written document with top-level ``baseline_tps`` and ``cycle_ms``."""
    from eagle3kit.plan.from_file import measured, read_doc

    doc = read_doc(path)
    if isinstance(doc, dict) and kind_of(doc) in ("bench", "bench-live"):
        f = measured(path, doc).figures
        if not f.get("decode_ms") or not f.get("cycle_ms"):
            raise bad(
                path,
                "decode_ms, cycle_ms: expected both measured, found "
                f"{f.get('decode_ms')!r}, {f.get('cycle_ms')!r}",
            )
        return 1000.0 / f["decode_ms"], f["cycle_ms"]
    vals = []
    for key in ("baseline_tps", "cycle_ms"):
        v = doc.get(key) if isinstance(doc, dict) else None
        if not isinstance(v, int | float) or isinstance(v, bool) or v <= 0:
            raise bad(path, f"{key}: expected a positive number, found {v!r}")
        vals.append(float(v))
    return vals[0], vals[1]


def break_even(
    baseline_tps: float, cycle_ms: float, taus: dict[str, float | None], depth: int
) -> dict[str, Any]:
    """plan's cycle model at each measured tau: throughput tau / cycle_s, speedup, break-even."""
    from eagle3kit.plan import plan

    out: dict[str, Any] = {"baseline_tps": baseline_tps, "cycle_ms": cycle_ms, "depth": depth}
    for name, tau in taus.items():
        if tau is None:
            continue
        r = plan(
            baseline_tps=baseline_tps,
            cycle_ms=cycle_ms,
            tau=min(tau, depth + 1),
            depth=depth,
        )
        out["break_even_tau"] = round(r.break_even_tau, 6)
        out[name] = {
            "tau": tau,
            "tps": round(r.throughput_tps, 3),
            "speedup": round(r.speedup, 4),
            "pays": r.pays,
        }
    return out


def decide(
    compatible: bool,
    tau: float | None,
    tau_ref: float | None,
    fc_cosine: float | None,
    be: dict[str, Any] | None,
) -> tuple[str, list[str]]:
    """plug-in | fine-tune | from-scratch, with the numbers that decided it.

    retention = (tau_NEW - 1) / (tau_OLD - 1), the share of D's gain that survives the move.
    - from-scratch: D cannot run on NEW (compat errors in shapes or vocab), or it keeps
      < WARM_START_RETENTION of its gain and fc(aux) cosine < WARM_START_FC_COSINE;
    - plug-in: retention >= PLUG_IN_RETENTION (or no reference) and, when the speeds are
      known, tau_NEW is at or above plan's break-even;
    - fine-tune: otherwise (D is a better start than nothing).
    """
    reasons: list[str] = []
    if not compatible or tau is None:
        return "from-scratch", [
            "compat: the drafter cannot run on the new target (see compat findings)"
        ]
    retention = None
    if tau_ref is not None and tau_ref > 1:
        retention = (tau - 1) / (tau_ref - 1)
        reasons.append(
            f"offline accept length {tau:.3f} on the new target vs {tau_ref:.3f} on the "
            f"reference: keeps {retention:.0%} of the gain (plug-in needs >= "
            f"{PLUG_IN_RETENTION:.0%})"
        )
    else:
        reasons.append(
            f"offline accept length {tau:.3f} on the new target (no reference to compare)"
        )
    if fc_cosine is not None:
        reasons.append(
            f"fc(aux) cosine old vs new {fc_cosine:.3f} (warm start needs >= "
            f"{WARM_START_FC_COSINE})"
        )
    pays = None
    if be is not None and "target" in be:
        pays = be["target"]["pays"]
        reasons.append(
            f"plan: break-even tau {be['break_even_tau']:.2f} "
            f"({be['baseline_tps']:g} tok/s x {be['cycle_ms']:g} ms); at {tau:.2f}: "
            f"{be['target']['tps']:.1f} tok/s, {be['target']['speedup']:.2f}x"
        )
    lost = retention is not None and retention < WARM_START_RETENTION
    if lost and (fc_cosine is None or fc_cosine < WARM_START_FC_COSINE):
        return "from-scratch", reasons
    if (retention is None or retention >= PLUG_IN_RETENTION) and pays is not False:
        return "plug-in", reasons
    return "fine-tune", reasons
