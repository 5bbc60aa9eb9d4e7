"""Serve an ASGI app with uvicorn on a background thread, on 127.0.0.1 (the tests' fake servers and proxies)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_in_thread(app: Any, port: int, *, what: str, **config: Any) -> tuple[uvicorn.Server, threading.Thread]:
    """Start ``app`` on 127.0.0.1:``port`` and wait (10 s at most) until uvicorn says it has started."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", access_log=False,
                                           **config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.02)
    return server, thread
