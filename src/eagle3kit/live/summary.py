"""The figures of a live A/B run, as the `eagle3kit.bench-live` JSON (schema 1).

Per deployment and concurrency level:
- decode tok/s per request = (completion tokens - 1) / (last content chunk - first), so the
  prefill and the queue stay out of it (median, min, max over requests); pooled decode tok/s =
  all requests' decoded tokens / all their decode time, the rate the cycle model predicts
  (expected tokens per cycle / expected cycle time) and what `token_ms` and `plan` read;
  throughput = all tokens / block wall time per round;
  TTFT; inter-chunk latency (a speculative step sends up to k+1 tokens in one chunk);
- acceptance: tau_online = 1 + accepted drafts / verify steps (the bonus token counted, the
  prefill's first token not), per-position P(a >= i) and conditional P(a >= i | a >= i-1), from the
  counters diffed around this run's blocks (vLLM) or from the per-request fields
  (vLLM `metrics.speculative_decoding`, SGLang `spec_verify_ct`/`spec_num_correct_drafts`
  and the histogram of correct drafts per step);
- distinct-4 of the outputs (word 4-grams) and the number of distinct answers: a loop makes
  drafting easy and inflates tau.
Top level: `tau_online`, `depth`, `cycle_ms`, `decode_ms`, `new_tokens`, `prefill_ms` for
`eagle3kit plan --from`, taken from the first speculative deployment at the lowest level;
`started` (UTC, added by live/bench.py) orders before/after runs in `report`.
"""

from __future__ import annotations

import statistics
from typing import Any

from eagle3kit.core import registry
from eagle3kit.plan.forecast import conditional

KIND = "eagle3kit.bench-live"
LIFE_NOTE = "cumulative over the server's life (every request since start), not this run"


def spread(xs: list[float]) -> dict[str, Any] | None:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def _med(s: dict[str, Any] | None) -> float | None:
    return None if s is None else s["median"]


def pooled_tps(results) -> float | None:
    """All requests' decoded tokens / all their decode time (module docstring)."""
    spans = [sp for sp in (s.decode_span() for s in results) if sp is not None]
    secs = sum(t for _, t in spans)
    return sum(n for n, _ in spans) / secs if secs > 0 else None


def distinct_n(text: str, n: int = 4) -> float | None:
    """Distinct word n-grams / all word n-grams (None under n words)."""
    w = text.split()
    grams = [tuple(w[i : i + n]) for i in range(len(w) - n + 1)]
    return len(set(grams)) / len(grams) if grams else None


def _from_histogram(hist: list[int]) -> list[float]:
    """P(a >= i), i = 1.., from counts of steps with exactly j drafts accepted."""
    total = sum(hist)
    return [sum(hist[i:]) / total for i in range(1, len(hist))] if total else []


def _per_request(specs: list[dict]) -> dict[str, Any] | None:
    specs = [s for s in specs if s and s.get("steps") and s.get("accepted") is not None]
    if not specs:
        return None
    steps = sum(s["steps"] for s in specs)
    acc = sum(s["accepted"] for s in specs)
    k = max(len(s["histogram"]) for s in specs)
    hist = [
        sum(s["histogram"][j] if j < len(s["histogram"]) else 0 for s in specs) for j in range(k)
    ]
    engine = [s.get("engine_accept_length") for s in specs]
    return {
        "tau_online": 1 + acc / steps,
        "steps": steps,
        "accepted": acc,
        "requests": len(specs),
        "per_position_acceptance": _from_histogram(hist) if sum(hist) == steps else None,
        "engine_accept_length": spread([e for e in engine if isinstance(e, int | float)]),
    }


def _counted(c) -> dict[str, Any] | None:
    if c is None or c.drafts <= 0:
        return None
    return {
        "tau_online": 1 + c.accepted / c.drafts,
        "drafts": c.drafts,
        "draft_tokens": c.draft_tokens,
        "accepted": c.accepted,
        "per_position_acceptance": [p / c.drafts for p in c.per_pos],
    }


def _pad(pos: list[float] | None, k: int | None) -> list[float] | None:
    """SGLang's histogram grows on demand (its length is the most drafts any step accepted,
    plus one): positions past it up to the server's depth k were never reached, rate 0."""
    if pos is None or not k or len(pos) >= k:
        return pos
    return pos + [0.0] * (k - len(pos))


def acceptance(counters, specs: list[dict], k: int | None = None) -> dict[str, Any] | None:
    """This run's acceptance: from the counter diff when there is one, else per request;
    per-position rates padded to the server's depth `k` when it is known."""
    cnt, req = _counted(counters), _per_request(specs)
    if req is not None:
        req["per_position_acceptance"] = _pad(req["per_position_acceptance"], k)
    best = cnt or req
    if best is None:
        return None
    pos = best["per_position_acceptance"] or []
    return {
        "tau_online": best["tau_online"],
        "source": "counters" if cnt else "per-request",
        "per_position_acceptance": pos,
        "conditional_acceptance": conditional(pos),
        "counters": cnt,
        "per_request": req,
    }


def _sum_counters(items):
    total = None
    for c in items:
        total = c if total is None else total.plus(c)
    return total


def _throughput(dep, c: int, suites: list[str]) -> dict[str, Any] | None:
    rounds = [dep.block_s.get((c, s), []) for s in suites]
    per_round = []
    for r in range(min((len(x) for x in rounds), default=0)):
        wall = sum(x[r][0] for x in rounds)
        per_round.append(sum(x[r][1] for x in rounds) / wall if wall > 0 else None)
    return spread(per_round)


def _depth(dep) -> int | None:
    bound, _ = tau_bound(dep.info.speculative if dep.info else None)
    return int(bound - 1) if bound else None


def _suite_json(dep, c: int, suite: str) -> dict[str, Any]:
    ok = [x.result for x in dep.records if x.concurrency == c and x.suite == suite and x.result]
    acc = acceptance(dep.counters.get((c, suite)), [s.spec for s in ok], _depth(dep))
    pooled = pooled_tps(ok)
    return {
        "requests": len(ok),
        "tau_online": acc["tau_online"] if acc else None,
        "accept_source": acc["source"] if acc else None,
        "per_position_acceptance": acc["per_position_acceptance"] if acc else None,
        "decode_tokens_per_s": _med(spread([s.decode_tps() for s in ok])),
        "decode_tokens_per_s_pooled": pooled,
        "token_ms": 1e3 / pooled if pooled else None,
        "ttft_ms": _med(spread([1e3 * s.ttft for s in ok if s.ttft is not None])),
        "completion_tokens": _med(spread([s.completion_tokens for s in ok])),
        "prompt_tokens": _med(spread([s.prompt_tokens for s in ok])),  # as the server counted
        "cycles": _cycles(acc),
    }


def _cycles(acc: dict[str, Any] | None) -> int | None:
    """Verify steps behind an acceptance: its counters' drafts, else the requests' steps."""
    if not acc:
        return None
    src = acc["counters"] or acc["per_request"] or {}
    return src.get("drafts", src.get("steps"))


def level_json(dep, c: int, suites: list[str]) -> dict[str, Any]:
    recs = [x for x in dep.records if x.concurrency == c]
    ok = [x.result for x in recs if x.result is not None]
    counters = _sum_counters(dep.counters[k] for k in dep.counters if k[0] == c)
    texts = [s.text for s in ok]
    d4 = [d for d in (distinct_n(t) for t in texts) if d is not None]
    tps, pooled = spread([s.decode_tps() for s in ok]), pooled_tps(ok)
    return {
        "concurrency": c,
        "requests": len(ok),
        "failed": len(recs) - len(ok),
        "decode_tokens_per_s": tps,
        "decode_tokens_per_s_pooled": pooled,
        "token_ms": 1e3 / pooled if pooled else None,
        "throughput_tokens_per_s": _throughput(dep, c, suites),
        "ttft_ms": spread([1e3 * s.ttft for s in ok if s.ttft is not None]),
        "itl_ms": spread([1e3 * t for s in ok for t in s.itl()]),
        "completion_tokens": spread([s.completion_tokens for s in ok]),
        "acceptance": acceptance(counters, [s.spec for s in ok], _depth(dep)),
        "distinct4": statistics.fmean(d4) if d4 else None,
        "distinct_answers": len(set(texts)),
        "answers": len(texts),
        "suites": {s: _suite_json(dep, c, s) for s in suites},
    }


def drafting_rule(engine: str, temperature: float) -> str:
    """What the engine drafts and how it verifies at this temperature (docs/live.md)."""
    if temperature == 0:
        return "greedy: a draft is accepted when it equals the target's argmax"
    if engine == "vllm":
        return (
            f"T={temperature:g}: vLLM's EAGLE proposer drafts the drafter's argmax at any "
            "temperature; the rejection sampler accepts each draft with the target's "
            "probability of it at T (so tau falls as T rises)"
        )
    if engine == "sglang":
        return (
            f"T={temperature:g}: SGLang drafts the drafter's top-k tree and verifies it by "
            "sampling from the target at T (target-only tree sampling)"
        )
    return f"T={temperature:g}: drafting rule of this engine unknown"


def tau_bound(spec: dict[str, Any] | None) -> tuple[float | None, list[str]]:
    """(the largest tau these settings allow, warnings about them)."""
    if not spec or not spec.get("num_steps"):
        return None, []
    steps, topk, ndt = spec["num_steps"], spec.get("topk") or 1, spec.get("num_draft_tokens")
    notes = []
    found = registry.from_engine("any", str(spec.get("algorithm") or ""))
    if found is not None and found.passes == "1" and ndt:
        return float(ndt), []  # one pass drafts the block: SGLang forces num_steps to 1
    depth = steps
    if topk == 1 and ndt and ndt - 1 < steps:
        depth = ndt - 1
        notes.append(
            f"num_draft_tokens {ndt} < num_steps {steps} + 1 with topk 1: only {depth} drafts "
            "reach the target per step"
        )
    return 1.0 + depth, notes


def _deployment_warnings(dep, cfg, levels: list[dict]) -> list[str]:
    i = dep.info
    out = []
    if dep.role == "baseline" and i.speculative:
        out.append(f"{dep.url}: the baseline serves speculation ({i.speculative['algorithm']})")
    if dep.role == "speculative" and i.engine != "unknown" and not i.speculative:
        out.append(f"{dep.url}: no speculation detected on this server")
    bound, notes = tau_bound(i.speculative)
    out += [f"{dep.url}: {n}" for n in notes]
    if bound is not None and cfg.depth and bound - 1 < cfg.depth:
        out.append(
            f"{dep.url}: these settings draft {bound - 1:g} tokens per step (tau <= {bound:g}), "
            f"fewer than the drafter's depth {cfg.depth}: raise the engine's steps/draft tokens"
        )
    for lv in levels:
        if lv["distinct4"] is not None and lv["distinct4"] < 0.5:
            out.append(
                f"{dep.url}: outputs repeat at concurrency {lv['concurrency']} (distinct-4 "
                f"{lv['distinct4']:.2f}): a loop inflates acceptance"
            )
    return out


def _missing(dep, levels: list[dict]) -> list[str]:
    i, out = dep.info, []
    if i.engine == "vllm" and not i.has_metrics:
        out.append(f"{dep.url}: no /metrics: run counters (tau, per-position) missing")
    if not i.speculative:
        return out
    if not any(lv["acceptance"] for lv in levels):
        hint = (
            " (SGLang reports it per request on /generate, or on the OpenAI endpoints from "
            "PR #33518: try --endpoint generate)"
            if i.engine == "sglang"
            else " (start vLLM with --per-request-spec-decode-metrics summary, or expose /metrics)"
        )
        out.append(f"{dep.url}: tau not reported for this run{hint}")
    return out


def _fault_lines(dep) -> list[str]:
    bad = [x for x in dep.records if x.error]
    if not bad:
        return []
    return [
        f"{len(bad)} of {len(dep.records)} requests failed at {dep.url} (first: {bad[0].error})"
    ]


def _infer_speculation(dep) -> None:
    """vLLM without /metrics: its per-request block still says k (`num_spec_tokens`)."""
    if dep.info.speculative is not None:
        return
    ks = [x.result.spec["k"] for x in dep.records if x.result and (x.result.spec or {}).get("k")]
    if ks:
        dep.info.speculative = {
            "algorithm": "on (per-request spec-decode metrics)",
            "num_steps": max(ks),
            "topk": 1,
            "num_draft_tokens": None,
            "draft_model": None,
            "source": "metrics.speculative_decoding",
        }


def deployment_json(dep, cfg, suites: list[str]) -> tuple[dict[str, Any], list[str], list[str]]:
    """(the deployment's figures, its warnings, its error/missing lines)."""
    _infer_speculation(dep)
    levels = [level_json(dep, c, suites) for c in cfg.concurrency]
    bound, _ = tau_bound(dep.info.speculative)
    doc = {
        "url": dep.url,
        "role": dep.role,
        "server": dep.info.to_json(),
        "drafting_rule": drafting_rule(dep.info.engine, cfg.temperature),
        "tau_bound": bound,
        "levels": levels,
        "server_life_tau": ({**dep.life, "note": LIFE_NOTE} if dep.life else None),
    }
    errors = _fault_lines(dep) + [f"{dep.url}: {e}" for e in dep.errors] + _missing(dep, levels)
    return doc, _deployment_warnings(dep, cfg, levels), errors


def _comparison(docs: list[dict]) -> list[dict[str, Any]]:
    base = next((d for d in docs if d["role"] == "baseline"), None)
    if base is None:
        return []
    out = []
    for d in docs:
        if d["role"] != "speculative":
            continue
        for lv, bl in zip(d["levels"], base["levels"], strict=True):
            s, b = _med(lv["decode_tokens_per_s"]), _med(bl["decode_tokens_per_s"])
            sp, bp = lv["decode_tokens_per_s_pooled"], bl["decode_tokens_per_s_pooled"]
            st, bt = _med(lv["throughput_tokens_per_s"]), _med(bl["throughput_tokens_per_s"])
            out.append(
                {
                    "url": d["url"],
                    "concurrency": lv["concurrency"],
                    "decode_speedup": s / b if s and b else None,
                    "decode_speedup_pooled": sp / bp if sp and bp else None,
                    "throughput_speedup": st / bt if st and bt else None,
                }
            )
    return out


# what each speedup of `comparison[]` is, and which one `plan --from` prices (plan_fields:
# cycle_ms and decode_ms are per-token times of the pooled rates)
SPEEDUPS = {
    "decode_speedup": "median over requests: the median request's decode tok/s, speculative "
    "over baseline",
    "decode_speedup_pooled": "pooled: all decoded tokens / all decode time, speculative over "
    "baseline; the speedup `plan --from` predicts",
    "throughput_speedup": "all tokens / block wall time, speculative over baseline",
}
PLAN_SPEEDUP = "decode_speedup_pooled"
# the line under bench's table and the report's: which speedup is which, and which plan predicts
SPEEDUP_NOTE = (
    "speedup median: the median request's decode tok/s over the baseline's; speedup pooled: "
    "all decoded tokens / all decode time over the baseline's, the speedup `plan --from` "
    "predicts."
)


def plan_fields(docs: list[dict]) -> dict[str, Any]:
    """What `eagle3kit plan --from` reads: the first speculative deployment, lowest level."""
    spec = next((d for d in docs if d["role"] == "speculative"), None)
    base = next((d for d in docs if d["role"] == "baseline"), None)
    out: dict[str, Any] = {}
    if spec is None or not spec["levels"]:
        return out
    lv = min(spec["levels"], key=lambda x: x["concurrency"])
    acc = lv["acceptance"]
    if acc:
        out["tau_online"] = acc["tau_online"]
        if lv["token_ms"]:
            out["cycle_ms"] = acc["tau_online"] * lv["token_ms"]
    sp = spec["server"]["speculative"]
    if sp and sp.get("num_steps"):
        out["depth"] = int(spec["tau_bound"] - 1) if spec["tau_bound"] else sp["num_steps"]
    if base is not None:
        bl = min(base["levels"], key=lambda x: x["concurrency"])
        if bl["token_ms"]:
            out["decode_ms"] = bl["token_ms"]
    if lv["completion_tokens"]:
        out["new_tokens"] = lv["completion_tokens"]["median"]
    if lv["ttft_ms"]:
        out["prefill_ms"] = lv["ttft_ms"]["median"]
    return out


def by_length(docs: list[dict], lengths: dict[str, int]) -> list[dict[str, Any]]:
    """Per context length (its prompts are one suite, so its counters are its own blocks'):
    the first speculative deployment's tau and per-position acceptance at its lowest level,
    its cycle (tau x its per-token time), the baseline's per-token time, both TTFTs, the
    median completion length and the decode speedup: what `plan --from` prices per length."""
    spec = next((d for d in docs if d["role"] == "speculative" and d["levels"]), None)
    base = next((d for d in docs if d["role"] == "baseline" and d["levels"]), None)
    if spec is None:
        return []
    low = min(spec["levels"], key=lambda x: x["concurrency"])
    blow = min(base["levels"], key=lambda x: x["concurrency"]) if base else None
    out = []
    for suite, n in sorted(lengths.items(), key=lambda kv: kv[1]):
        s = low["suites"].get(suite) or {}
        b = (blow["suites"].get(suite) or {}) if blow else {}
        tau, tok = s.get("tau_online"), s.get("token_ms")
        out.append(
            {
                "context_length": n,
                "suite": suite,
                "concurrency": low["concurrency"],
                "requests": s.get("requests"),
                "prompt_tokens": s.get("prompt_tokens"),
                "cycles": s.get("cycles"),
                "tau_online": tau,
                "per_position_acceptance": s.get("per_position_acceptance"),
                "cycle_ms": tau * tok if tau and tok else None,
                "decode_ms": b.get("token_ms"),
                "prefill_ms": s.get("ttft_ms"),
                "baseline_prefill_ms": b.get("ttft_ms"),
                "new_tokens": s.get("completion_tokens"),
                "decode_speedup": b["token_ms"] / tok if tok and b.get("token_ms") else None,
            }
        )
    return out


def summarise(deps, cfg, errors: list[str], suites: list[str]) -> dict[str, Any]:
    docs, warnings, errs = [], [], list(errors)
    for d in deps:
        doc, w, e = deployment_json(d, cfg, suites)
        docs.append(doc)
        warnings += w
        errs += e
    settings = {
        "endpoint": cfg.endpoint,
        "max_tokens": cfg.max_tokens,
        "temperature": cfg.temperature,
        "repeats": cfg.repeats,
        "concurrency": list(cfg.concurrency),
        "timeout_s": cfg.timeout,
        "drafter_depth": cfg.depth,
        "suites": {s: sum(p.suite == s for p in cfg.prompts) for s in suites},
        "interleaving": "per round, every level and suite, deployments in rotated order",
    }
    extra = {}
    if cfg.lengths:
        extra = {"lengths": sorted(cfg.lengths.values()), "by_length": by_length(docs, cfg.lengths)}
    return {
        "kind": KIND,
        "schema": 1,
        "settings": settings,
        "deployments": docs,
        "comparison": _comparison(docs),
        "speedups": {**SPEEDUPS, "plan_prices": PLAN_SPEEDUP},
        "warnings": warnings,
        "errors": errs,
        **plan_fields(docs),
        **extra,
    }
