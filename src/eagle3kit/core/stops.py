"""Stop points: where a kill -9 test holds a long job still before it kills it.

A test of what a kill leaves behind must kill the job at a moment it chose, whatever the
machine's speed: a job killed "0.3 s after its temp folder appeared" is, on an idle machine,
a job that already finished. So every write that decides what a reader finds (an atomic
replace, a folder swap, an appended line) passes a stop point, and the test names one in the
job's environment:

    EAGLE3KIT_STOP_AT="MOMENT:PATTERN[#N]"   EAGLE3KIT_STOP_FILE=FILE

MOMENT is ``before`` (the new data is complete beside the old, not yet in place) or ``after``
(in place; for a folder, the old one not yet deleted); PATTERN is an fnmatch pattern on the
write's absolute destination (``*`` crosses ``/``). The N-th time (default 1) the job reaches
that moment of a matching write, it writes FILE and waits there to be killed; past
``STOP_LIMIT_S`` it exits with status ``STOP_EXIT`` on its own, so a test that died first
leaves no job behind. Without the variables (every run outside the tests) a stop point costs
one environment lookup.
"""

from __future__ import annotations

import fnmatch
import os
import time
from pathlib import Path

STOP_AT = "EAGLE3KIT_STOP_AT"
STOP_FILE = "EAGLE3KIT_STOP_FILE"
STOP_LIMIT_S = 600.0
STOP_EXIT = 75

_hits: dict[str, int] = {}


def stop_point(moment: str, path: str | Path) -> None:
    """Wait here to be killed when EAGLE3KIT_STOP_AT names this moment of a write to ``path``."""
    spec = os.environ.get(STOP_AT)
    if not spec or not _matches(spec, moment, path):
        return
    _hits[spec] = _hits.get(spec, 0) + 1
    _, _, nth = spec.partition("#")
    if _hits[spec] == int(nth or 1):
        _hold(f"{os.getpid()} {moment} {Path(path).absolute()}\n")


def _matches(spec: str, moment: str, path: str | Path) -> bool:
    want, _, pattern = spec.partition("#")[0].partition(":")
    return want == moment and fnmatch.fnmatch(str(Path(path).absolute()), pattern)


def _hold(line: str) -> None:
    """Say where the job stopped (FILE appears whole), then wait for the kill."""
    marker = os.environ.get(STOP_FILE)
    if marker:
        tmp = f"{marker}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(line)
        os.replace(tmp, marker)
    deadline = time.monotonic() + STOP_LIMIT_S
    while time.monotonic() < deadline:
        time.sleep(0.1)
    os._exit(STOP_EXIT)
