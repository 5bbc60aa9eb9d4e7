"""httpcore's network layer on plain asyncio (a protocol per connection), for the completion lanes.

httpx sends through httpcore, and httpcore reaches the network through a pluggable *network backend*
(``httpcore.AsyncNetworkBackend``); the default one goes through anyio, which wraps every read and write in a
cancel scope with its own deadline and builds a dict of socket attributes each time a pooled connection is
checked for expiry. At hundreds of requests in flight that was about a third of the client's CPU per request
(bench/README.md, "Line rate"). This backend keeps httpx and httpcore (HTTP/1.1 with h11, keep-alive, the same
exceptions: ``httpcore.ReadTimeout`` becomes ``httpx.ReadTimeout`` and so on) and does the I/O itself:

* bytes arrive in ``data_received`` into a buffer; ``read`` returns what is buffered, or waits for it, with one
  timer armed only when it has to wait;
* ``write`` collects what httpcore writes for a request (h11 hands over the head and the body separately) and
  gives it to the transport in one piece when the response is first read (httpcore always reads once the request
  is written; beyond 64 KiB at once): one send system call and one TCP segment per request instead of two
  (``TCP_NODELAY`` is on); it waits only when the transport asks the writer to pause;
* ``is_readable`` (httpcore asks it before reusing an idle keep-alive connection: a readable idle connection
  was closed by the server) is "something arrived or the peer closed", with no system call;
* TLS through ``loop.start_tls``, so an ``https`` replica works as it did.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore

_READ_HIGH_WATER = 1 << 20  # stop reading from the socket while this much is buffered and unread
_WRITE_COALESCE_MAX = 1 << 16  # hand writes over at once beyond this much (a large body goes out as it comes)


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class _Connection(asyncio.Protocol):
    """The receiving half: buffers what arrives and wakes the reader waiting for it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False  # the peer closed, or the connection was lost
        self.error: BaseException | None = None
        self.reader: asyncio.Future[None] | None = None
        self.writer: asyncio.Future[None] | None = None
        self.write_paused = False
        self.read_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _READ_HIGH_WATER and self.transport is not None and not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self.closed = True
        self._wake_reader()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.error = exc
        self._wake_reader()
        self.write_paused = False
        if self.writer is not None and not self.writer.done():
            self.writer.set_result(None)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.writer is not None and not self.writer.done():
            self.writer.set_result(None)

    def _wake_reader(self) -> None:
        if self.reader is not None and not self.reader.done():
            self.reader.set_result(None)


class AsyncioStream(httpcore.AsyncNetworkStream):
    def __init__(self, transport: asyncio.Transport, connection: _Connection) -> None:
        self._transport = transport
        self._connection = connection
        self._pending: list[bytes] = []  # written, not yet handed to the transport (see ``_flush``)
        self._pending_bytes = 0

    def _flush(self) -> None:
        if self._pending:
            data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
            self._pending.clear()
            self._pending_bytes = 0
            if not self._transport.is_closing():
                self._transport.write(data)

    async def _wait(self, future: asyncio.Future[None], timeout: float | None) -> None:
        timer = asyncio.get_running_loop().call_later(timeout, _expire, future) if timeout is not None else None
        try:
            await future
        finally:
            if timer is not None:
                timer.cancel()

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._flush()
        conn = self._connection
        if not conn.buffer and not conn.closed:
            conn.reader = asyncio.get_running_loop().create_future()
            try:
                await self._wait(conn.reader, timeout)
            except TimeoutError:
                raise httpcore.ReadTimeout("read timed out") from None
            finally:
                conn.reader = None
        if conn.buffer:
            if len(conn.buffer) <= max_bytes:
                data = bytes(conn.buffer)
                conn.buffer.clear()
            else:
                data = bytes(conn.buffer[:max_bytes])
                del conn.buffer[:max_bytes]
            if conn.read_paused and len(conn.buffer) <= _READ_HIGH_WATER // 2 and not conn.closed:
                conn.read_paused = False
                self._transport.resume_reading()
            return data
        if conn.error is not None:
            raise httpcore.ReadError(type(conn.error).__name__)
        return b""  # the peer closed: h11 reports a response cut short, as with any other backend

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        conn = self._connection
        if conn.closed or self._transport.is_closing():
            raise httpcore.WriteError("connection closed")
        self._pending.append(buffer)
        self._pending_bytes += len(buffer)
        if self._pending_bytes >= _WRITE_COALESCE_MAX:
            self._flush()
        if conn.write_paused:
            conn.writer = asyncio.get_running_loop().create_future()
            try:
                await self._wait(conn.writer, timeout)
            except TimeoutError:
                raise httpcore.WriteTimeout("write timed out") from None
            finally:
                conn.writer = None
            if conn.error is not None:
                raise httpcore.WriteError(type(conn.error).__name__)

    async def aclose(self) -> None:
        self._pending.clear()
        self._transport.close()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        self._flush()
        loop = asyncio.get_running_loop()
        try:
            transport = await loop.start_tls(self._transport, self._connection, ssl_context,
                                             server_hostname=server_hostname, ssl_handshake_timeout=timeout)
        except TimeoutError:
            self._transport.abort()
            raise httpcore.ConnectTimeout("TLS handshake timed out") from None
        except (OSError, ssl.SSLError) as exc:
            self._transport.abort()
            raise httpcore.ConnectError(type(exc).__name__) from None
        if transport is None:  # pragma: no cover - only for a protocol that refuses TLS, not this one
            raise httpcore.ConnectError("TLS not started")
        assert isinstance(transport, asyncio.Transport)
        self._connection.transport = transport
        return AsyncioStream(transport, self._connection)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return bool(self._connection.buffer) or self._connection.closed
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, connection = await loop.create_connection(
                    _Connection, host, port, local_addr=(local_address, 0) if local_address else None)
        except TimeoutError:
            raise httpcore.ConnectTimeout("connect timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(type(exc).__name__) from None
        assert isinstance(transport, asyncio.Transport)
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return AsyncioStream(transport, connection)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
