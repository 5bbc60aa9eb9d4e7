"""A plain HTTP server on loopback for tests that need a server answering in a way no real one does (a replica still
loading, a listener recording what it was sent)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that writes no access log to the test's output."""

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def stub_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on loopback in a thread; yields the server's OpenAI-style base URL (``.../v1``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def streaming_handler(chunk: bytes, count: int, pause_s: float = 0.0) -> tuple[type[QuietHandler], list[int]]:
    """A handler answering a GET with 200 and ``count`` chunks of body, ``pause_s`` apart, without a length (the
    body ends when the connection does), until the client hangs up; and the bytes of body it sent."""
    sent = [0]

    class Streaming(QuietHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            try:
                for _ in range(count):
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    sent[0] += len(chunk)
                    time.sleep(pause_s)
            except OSError:
                pass

    return Streaming, sent


def trickling_head_handler(header_bytes: int) -> type[QuietHandler]:
    """A handler answering a GET with its status line and a header of ``header_bytes`` a byte every 0.1 s, never
    finishing its head."""

    class TrickledHead(QuietHandler):
        def do_GET(self) -> None:
            try:
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * header_bytes:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                pass

    return TrickledHead
