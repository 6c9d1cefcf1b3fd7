"""Shared fixtures. Tests never touch the network or the user's cache."""

from __future__ import annotations

import io
import os
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass

import pytest

# Before any test module imports huggingface_hub, which reads it once, at import.
os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture(autouse=True, scope="session")
def _isolated_home(tmp_path_factory):
    """Keep EAGLE3KIT_HOME (the zoo cache) inside a session temp dir unless CI sets one."""
    if "EAGLE3KIT_TEST_HOME" in os.environ:
        os.environ["EAGLE3KIT_HOME"] = os.environ["EAGLE3KIT_TEST_HOME"]
    else:
        os.environ["EAGLE3KIT_HOME"] = str(tmp_path_factory.mktemp("eagle3kit_home"))
    os.environ["HF_HUB_OFFLINE"] = "1"
    yield


@pytest.fixture
def network_attempts(monkeypatch):
    """Every name lookup or connection the code under test tries, refused and recorded: a test
    asserts the list is empty (the network was never touched), whatever the machine's speed."""
    import socket

    tried: list = []

    def lookup(host, *args, **kwargs):
        tried.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "no network in this test")

    def connect(self, address):
        tried.append(address)
        raise ConnectionRefusedError("no network in this test")

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect)
    return tried


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str) -> CliResult:
    """Run `eagle3kit ARGS` in-process; returns exit code, stdout, stderr."""
    from eagle3kit.cli import main

    o, e = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(o), redirect_stderr(e):
        try:
            main([str(a) for a in args])
        except SystemExit as ex:
            code = ex.code if isinstance(ex.code, int) else (0 if ex.code is None else 1)
    return CliResult(code, o.getvalue(), e.getvalue())


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def real_servers(tmp_path_factory):
    """The real vLLM servers a `real_engine` test asks for (tests/real_engine.py), each
    started once per session and all stopped at its end."""
    from real_engine import STATE, Servers

    if not STATE["ready"]:
        pytest.skip(f"real vLLM engine not installed: {STATE['reason']}")
    servers = Servers(tmp_path_factory.mktemp("vllm_logs"))
    yield servers
    servers.stop()
