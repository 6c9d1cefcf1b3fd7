"""cli/_progress.py: outside a terminal, progress is whole plain lines, never bar fragments."""

from __future__ import annotations

import io
import sys

from eagle3kit.cli import _progress
from eagle3kit.core.progress import Event

STAGE = "building llama-v1-tiny: training the drafter on the standard library corpus, recipe 7"


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _run(events, monkeypatch, step_s=1.0):
    """Feed events through bar() with sys.stderr a non-TTY StringIO; one event each step_s."""
    out = io.StringIO()
    clock = _Clock()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setattr(_progress.time, "monotonic", clock)
    with _progress.bar() as progress:
        assert progress is not None
        for e in events:
            progress(e)
            clock.t += step_s
    return out.getvalue()


def test_a_non_tty_gets_whole_lines_each_tenth_with_eta(monkeypatch):
    text = _run([Event(STAGE, i, 200, "step", {"loss": 2.5}) for i in range(201)], monkeypatch)
    lines = text.splitlines()
    assert "\r" not in text and "\x1b" not in text  # no redraws, no escape codes
    # quiet for 10 s; then at 10/200 (10 s), at each tenth crossed (20, 40, ... 180), the end
    assert len(lines) == 11, lines
    assert all(line.startswith(STAGE + " ") for line in lines)  # the stage name is never cut
    # at 10/200 after 10 s: 190 more at 1 s each is 3:10 to go
    assert lines[0] == f"{STAGE} 10/200 step (5%) loss 2.5 0:00:10 ETA 0:03:10"
    assert lines[1] == f"{STAGE} 20/200 step (10%) loss 2.5 0:00:20 ETA 0:03:00"
    assert lines[-1] == f"{STAGE} 200/200 step (100%) loss 2.5 0:03:20"


def test_a_slow_or_unsized_stage_prints_every_minute(monkeypatch):
    events = [Event("reading", i, None, "rows") for i in range(0, 200)]
    lines = _run(events, monkeypatch, step_s=1.0).splitlines()
    assert lines == [f"reading {i} rows {_progress._clock(i)}" for i in (10, 70, 130, 190)]


def test_a_short_or_failing_stage_prints_only_its_end(monkeypatch):
    """A stage that fails within its quiet time prints nothing: the error line stands alone."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    try:
        with _progress.bar() as progress:
            progress(Event("a", 0, 1))
            progress(Event("a", 1, 1))
            progress(Event("b", 0, 4))
            progress(Event("b", 1, 4))
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert [line.split(" ")[:2] for line in out.getvalue().splitlines()] == [["a", "1/1"]]


def test_json_mode_prints_nothing(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", out)
    with _progress.bar(False) as progress:
        assert progress is None
    assert out.getvalue() == ""
