"""Ctrl-C never leaves the embedded llama.cpp server running. It runs in its own session (a Ctrl-C at the terminal
reaches the CLI only), so the CLI must end it however it is interrupted: asyncio turns a first Ctrl-C into a
cancellation, and a second one raises KeyboardInterrupt wherever the CLI is at that moment, while the server is
still starting (``with`` then calls no ``__exit__``) or while it is being stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from medhelm_local.inference import embedded
from medhelm_local.inference.embedded import EmbeddedServer

# A stand-in server that never answers and shrugs off SIGTERM, as uvicorn does while a request is in flight.
STUBBORN = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('loading', flush=True); "
            "time.sleep(120)")


@pytest.fixture
def stubborn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(embedded, "server_command", lambda *_args: [sys.executable, "-c", STUBBORN])
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(embedded.tempfile, "tempdir", None)  # the server's private folder goes under tmp_path
    return tmp_path


def _ignoring_sigterm(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << 14))  # SIGTERM is signal 15


def _alive(proc: subprocess.Popen[bytes] | None) -> bool:
    return proc is not None and proc.poll() is None


def test_ctrl_c_while_the_server_starts_ends_it(stubborn: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_args: Any, **_kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(embedded, "get_small", interrupted)  # the readiness probe: where a Ctrl-C lands
    server = EmbeddedServer(startup_timeout_s=30)
    try:
        with pytest.raises(KeyboardInterrupt), server:
            pytest.fail("the server never became ready")
        assert not _alive(server._proc), "an orphan server was left running"
        assert os.listdir(stubborn) == []  # its private folder is gone
    finally:
        if _alive(server._proc):
            assert server._proc is not None
            server._proc.kill()
            server._proc.wait()


def test_ctrl_c_while_the_server_stops_ends_it(stubborn: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EmbeddedServer, "_wait_ready", lambda self: None)
    server = EmbeddedServer()
    server.start()
    proc = server._proc
    assert proc is not None
    try:
        deadline = time.monotonic() + 30
        while not _ignoring_sigterm(proc.pid):  # SIGTERM alone would not end it now
            assert time.monotonic() < deadline
            time.sleep(0.05)
        real_wait = proc.wait
        calls = []

        def wait(timeout: float | None = None) -> int:
            calls.append(timeout)
            if len(calls) == 1:  # the second Ctrl-C, while it waits for the server to end
                raise KeyboardInterrupt
            return real_wait(timeout)

        monkeypatch.setattr(proc, "wait", wait)
        with pytest.raises(KeyboardInterrupt):
            server.stop()
        real_wait(5)
        assert not _alive(proc), "an orphan server was left running"
        assert os.listdir(stubborn) == []
    finally:
        if _alive(proc):
            proc.kill()
            proc.wait()
