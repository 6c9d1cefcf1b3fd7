"""What every fake server of the tests shares: it binds 127.0.0.1 on a free port, serves in a
daemon thread, stops itself after ``lifetime`` seconds even if a test forgets it, and answers
JSON with a Content-Length. The fakes (fake_engine.py, openai_server.py, fake_vllm_capture.py)
subclass LocalServer and speak their engine's protocol in their own request handler."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class QuietServer(ThreadingHTTPServer):
    """socketserver prints a failed request's traceback to sys.stderr, from the handler's
    thread, whenever it comes: after the test that caused it, into the stderr another test
    is capturing. The fakes keep them here instead."""

    daemon_threads = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.errors: list[str] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        self.errors.append(repr(sys.exc_info()[1]))


class LocalServer:
    """Lifecycle of a test server: ``serve(Handler)``, ``url``, ``stop()``, a context manager."""

    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        self.stopped = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> Any:
        self._httpd = QuietServer(("127.0.0.1", 0), handler)  # port 0: a free port
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        timer = threading.Timer(self.lifetime, self.stop)
        timer.daemon = True
        timer.start()
        return self

    def start(self) -> Any:  # each fake builds its handler and calls serve()
        raise NotImplementedError

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        if self.stopped.is_set():
            return
        self.stopped.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def send_json(handler: BaseHTTPRequestHandler, status: int, doc: Any) -> None:
    """One JSON response with its Content-Length."""
    data = json.dumps(doc).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
