"""Kill -9 tests: stop the job at a write the test chose, then kill it there.

The job runs with a stop point (src/eagle3kit/core/stops.py) and waits at it to be killed, so
what the test kills is the same moment on an idle machine and on a saturated one: no sleep
decides it. A job that ends without reaching the stop point fails the test with its stderr.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from eagle3kit.core.stops import STOP_AT, STOP_FILE

# A bound on the wait, not a figure under test: a job that never reaches its stop point in
# this long is broken (a healthy one reaches it in seconds, minutes on a saturated machine).
WAIT_LIMIT_S = 900
_serial = itertools.count()


def eagle3kit(*args: object) -> list[str]:
    """The command line of `eagle3kit ARGS` in a fresh interpreter."""
    return [sys.executable, "-m", "eagle3kit", *(str(a) for a in args)]


def kill_at(cmd: list[str], at: str, scratch: Path, env: dict | None = None) -> str:
    """Run ``cmd`` until it waits at the stop point ``at`` ("before:PATTERN#N" or
    "after:PATTERN#N"), kill it with SIGKILL there, and return the line it wrote: "PID
    MOMENT PATH"."""
    n = next(_serial)
    marker, log = scratch / f".stopped-{n}", scratch / f".stopped-{n}.stderr"
    env = {**(os.environ if env is None else env), STOP_AT: at, STOP_FILE: str(marker)}
    with open(log, "wb") as err:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        _wait_for(marker, p, at, log)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert p.returncode == -signal.SIGKILL, (p.returncode, log.read_text()[-2000:])
    return marker.read_text().strip()


def _wait_for(marker: Path, p: subprocess.Popen, at: str, log: Path) -> None:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not marker.exists():
        if p.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise AssertionError(f"the job ended (exit {p.returncode}) before {at}:\n{tail}")
        assert time.monotonic() < deadline, f"the job never reached {at}"
        time.sleep(0.02)
