"""measure/timing.py: the one greedy-vs-speculative timing harness of eval and bench."""

from __future__ import annotations

from eagle3kit.measure import timing as T


def _fake(name: str, calls: list, secs: float, toks):
    def run(ids):
        calls.append((name, tuple(ids)))
        return T.Timed(list(toks(ids)), secs, len(ids))

    return run


def test_rotated_order_and_per_repeat_rates():
    calls: list = []
    methods = {
        "a": _fake("a", calls, 1.0, lambda ids: ids),
        "b": _fake("b", calls, 0.5, lambda ids: ids),
        "c": _fake("c", calls, 2.0, lambda ids: ids[:1]),
    }
    prompts = [[1, 2], [3, 4, 5]]
    seen = []
    runs = T.time_methods(methods, prompts, 2, progress=lambda e: seen.append(e), label="x")
    # repeat r, prompt i: the order a, b, c rotated by r + i
    firsts = [calls[j][0] for j in range(0, len(calls), 3)]
    assert firsts == ["a", "b", "b", "c"]
    assert [c[0] for c in calls[3:6]] == ["b", "c", "a"] and calls[3][1] == (3, 4, 5)
    assert len(runs) == 12 and len(seen) == 12
    # per repeat: tokens summed over prompts / seconds summed over prompts
    assert T.tokens_per_s(runs, "a") == [5 / 2.0, 5 / 2.0]
    assert T.tokens_per_s(runs, "b") == [5 / 1.0, 5 / 1.0]
    assert T.tokens_per_s(runs, "c") == [2 / 4.0, 2 / 4.0]
    assert T.same_tokens(runs, "b", "a") and not T.same_tokens(runs, "c", "a")
    assert T.spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
