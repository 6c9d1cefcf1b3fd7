"""The online half of `probe` and `eval` against servers.

`probe --url NEW --reference-url OLD`: NEW serves the new target with the old drafter, OLD
the target the drafter was trained for. Both run the same prompts, interleaved (a live bench
with two speculative deployments, and a plain one when given), and the zero-shot tau on NEW
is compared with OLD's: retention = (tau_NEW - 1) / (tau_OLD - 1), the share of the drafter's
gain that survives the move, judged with the thresholds of the offline probe
(eagle3kit.measure.probe: plug-in at >= PLUG_IN_RETENTION, fine-tune down to
WARM_START_RETENTION). When a plain deployment of the new target is given, the measured
speedup must also be >= 1 to plug in.

`eval --online --url`: the same bench on one speculative deployment (no baseline needed):
tau, per-position and conditional acceptance, per suite.
"""

from __future__ import annotations

from typing import Any

from eagle3kit.live.bench import LiveConfig, run_live_bench

PROBE_KIND = "eagle3kit.probe-live"


def _lowest(doc: dict, url: str) -> dict | None:
    d = next((x for x in doc["deployments"] if x["url"] == url), None)
    return min(d["levels"], key=lambda x: x["concurrency"]) if d and d["levels"] else None


def _tau(level: dict | None) -> float | None:
    acc = level["acceptance"] if level else None
    return acc["tau_online"] if acc else None


def _retention(new: float | None, ref: float | None) -> float | None:
    if new is None or ref is None or ref <= 1:
        return None
    return (new - 1) / (ref - 1)


def verdict(
    retention: float | None, speedup: float | None, taus: tuple[float | None, float | None]
) -> tuple[str, list[str]]:
    """plug-in | fine-tune | from-scratch | unknown, with the numbers that decided it."""
    from eagle3kit.measure.verdict import PLUG_IN_RETENTION, WARM_START_RETENTION

    if retention is None:
        new, ref = taus
        if new is None or ref is None:
            return "unknown", ["tau not measured on both servers (see errors)"]
        return "unknown", [
            f"the reference's tau is {ref:.2f}: no gain to retain (tau on NEW {new:.2f})"
        ]
    reasons = [
        f"online: keeps {retention:.0%} of the reference's gain (tau - 1); plug-in needs "
        f">= {PLUG_IN_RETENTION:.0%}, fine-tune >= {WARM_START_RETENTION:.0%}"
    ]
    if speedup is not None:
        reasons.append(f"measured speedup over the plain deployment: {speedup:.2f}x")
    if retention < WARM_START_RETENTION:
        return "from-scratch", reasons
    if retention >= PLUG_IN_RETENTION and (speedup is None or speedup >= 1):
        return "plug-in", reasons
    return "fine-tune", reasons


def run_live_probe(
    url: str,
    reference_url: str,
    cfg: LiveConfig,
    baseline_url: str | None = None,
    progress=None,
    on_detect=None,
) -> dict[str, Any]:
    """Zero-shot tau of the drafter on NEW's server against OLD's, interleaved."""
    doc = run_live_bench([url, reference_url], baseline_url, cfg, progress, on_detect)
    new, ref = _lowest(doc, url), _lowest(doc, reference_url)
    speed = next(
        (c["decode_speedup"] for c in doc["comparison"] if c["url"] == url),
        None,
    )
    ret = _retention(_tau(new), _tau(ref))
    v, reasons = verdict(ret, speed if baseline_url else None, (_tau(new), _tau(ref)))
    suites = {}
    for s in (new or {}).get("suites", {}):
        tn = new["suites"][s]["tau_online"]
        tr = ref["suites"][s]["tau_online"] if ref and s in ref["suites"] else None
        suites[s] = {"new": tn, "reference": tr, "retention": _retention(tn, tr)}
    extra = {}
    if cfg.lengths:  # one suite per context length: the curve on NEW and OLD
        curve = [
            {
                "context_length": n,
                "suite": s,
                "tau": {k: suites.get(s, {}).get(k) for k in ("new", "reference")},
                "retention": suites.get(s, {}).get("retention"),
            }
            for s, n in sorted(cfg.lengths.items(), key=lambda kv: kv[1])
        ]
        extra = {"lengths": sorted(cfg.lengths.values()), "by_length": curve}
    return {
        "kind": PROBE_KIND,
        "schema": 1,
        "url": url,
        "reference_url": reference_url,
        "tau_online": {"new": _tau(new), "reference": _tau(ref)},
        "retention": ret,
        "per_suite": suites,
        "verdict": v,
        "reasons": reasons,
        "bench": doc,
        **extra,
    }
