"""A completion lane: one keep-alive HTTP/1.1 connection to one replica, used by one request at a time.

It is httpcore's own HTTP/1.1 connection (``httpcore.AsyncHTTP11Connection``: h11, keep-alive, timeouts, the same
exceptions httpx raises under other names), used without the connection pool and the request/response models
httpx puts on top of it, its I/O on plain asyncio (``inference.netio``). The lane opens the connection itself (TCP,
then TLS for an https replica, offering HTTP/1.1 only, as httpcore does), and gives it a lock that does not yield
to the event loop when it is free (see ``_FreeLock``). What httpcore's pool does for its connections, the lane does
for its one:

* a connection the server closed while idle, or idle past ``keepalive_expiry``, is closed and replaced before
  the next request (httpcore asks the socket, through the backend's ``is_readable``, as its pool does);
* a connection that failed (a timeout, a drop) is closed by httpcore itself; the lane's next request opens a
  new one.

No proxy is ever used (the connection goes to the origin it was made for: egress is the allowlist's alone),
and the reply is read whole, up to ``MAX_RESPONSE_BYTES`` (as sent and decoded): a completion is small, and
the caller needs all of it.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib

import httpcore

from medhelm_local.inference.netio import AsyncioBackend

KEEPALIVE_EXPIRY_S = 5.0  # httpx's default: an idle connection older than this is not reused
_BACKEND = AsyncioBackend()
_DECOMPRESS_WBITS = {b"gzip": 16 + zlib.MAX_WBITS, b"x-gzip": 16 + zlib.MAX_WBITS, b"deflate": zlib.MAX_WBITS}


MAX_RESPONSE_BYTES = 16 << 20  # a completion is small: a reply (as sent, and decoded) beyond this is refused


class UnsupportedEncoding(Exception):
    """The reply came in a content coding the lane cannot decode (it asks for ``identity``)."""


class ResponseTooLarge(Exception):
    """The reply (as sent, or once decoded) is larger than ``MAX_RESPONSE_BYTES``: never read whole."""


class _FreeLock:
    """The lock httpcore keeps for a connection's state, for a connection that only one request uses at a time (a
    lane is leased whole). httpcore's own is anyio's, whose every acquire, even of a free lock, also yields to the
    event loop once (a cancellation checkpoint): two turns of the loop per request, and with its cancel scopes
    about a tenth of the client's CPU per request at 256 in flight. asyncio's lock, which this is, does not yield
    when free."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> None:
        await self._lock.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self._lock.release()


class Lane:
    def __init__(self, origin: httpcore.Origin, tls: ssl.SSLContext,
                 keepalive_expiry: float = KEEPALIVE_EXPIRY_S) -> None:
        self._origin = origin
        self._tls = tls
        self._keepalive_expiry = keepalive_expiry
        self._connection: httpcore.AsyncHTTP11Connection | None = None

    async def _ready(self, connect_timeout: float | None) -> httpcore.AsyncHTTP11Connection:
        connection = self._connection
        if connection is not None and (connection.is_closed() or connection.has_expired()
                                       or not connection.is_available()):
            self._connection = None
            await connection.aclose()
            connection = None
        if connection is None:
            stream = await self._connect(connect_timeout)
            connection = self._connection = httpcore.AsyncHTTP11Connection(
                self._origin, stream, keepalive_expiry=self._keepalive_expiry)
            if hasattr(connection, "_state_lock"):  # httpcore's name for it (another release: its own lock stays)
                setattr(connection, "_state_lock", _FreeLock())  # noqa: B010
        return connection

    async def _connect(self, timeout: float | None) -> httpcore.AsyncNetworkStream:
        """A new connection to the replica, as httpcore's ``AsyncHTTPConnection`` opens one: TCP, then for https
        TLS verified against the lane's context (server name: the replica's host), offering HTTP/1.1 only.
        Raises httpcore's ``ConnectError`` or ``ConnectTimeout``."""
        host = self._origin.host.decode("ascii")
        stream = await _BACKEND.connect_tcp(host, self._origin.port, timeout=timeout)
        if self._origin.scheme == b"https":
            self._tls.set_alpn_protocols(["http/1.1"])
            stream = await stream.start_tls(self._tls, server_hostname=host, timeout=timeout)
        return stream

    async def post(self, request: httpcore.Request) -> tuple[int, bytes, bytes | None]:
        """Send ``request`` and read its reply whole: (status, body, its ``Retry-After`` header as sent, None
        when absent or the reply is a 200). Raises httpcore's exceptions."""
        connection = await self._ready(request.extensions.get("timeout", {}).get("connect"))
        response = await connection.handle_async_request(request)
        try:  # read as it comes, up to the limit: an endless (chunked) body must not fill the memory
            content = bytearray()
            async for chunk in response.aiter_stream():
                content += chunk
                if len(content) > MAX_RESPONSE_BYTES:
                    raise ResponseTooLarge
        finally:
            await response.aclose()  # a reply not read to its end closes the connection
        retry_after = None if response.status == 200 else next(
            (value for key, value in response.headers if key.lower() == b"retry-after"), None)
        return response.status, _decoded(response.headers, bytes(content)), retry_after

    async def aclose(self) -> None:
        if self._connection is not None:
            await self._connection.aclose()
            self._connection = None


def _decoded(headers: list[tuple[bytes, bytes]], content: bytes) -> bytes:
    """``content`` as sent, undone from gzip or deflate should a server (or a proxy before it) compress it
    although the lane asked for ``identity``; any other coding is an error, never passed on as text."""
    codings = [v.strip().lower() for k, value in headers if k.lower() == b"content-encoding" for v in value.split(b",")]
    for coding in reversed([c for c in codings if c and c != b"identity"]):
        wbits = _DECOMPRESS_WBITS.get(coding)
        if wbits is None:
            raise UnsupportedEncoding(coding.decode("ascii", "replace"))
        decompressor = zlib.decompressobj(wbits)
        try:
            content = decompressor.decompress(content, MAX_RESPONSE_BYTES)
        except zlib.error as exc:
            raise UnsupportedEncoding(f"invalid {coding.decode('ascii', 'replace')} body") from exc
        if decompressor.unconsumed_tail:  # a small body that decodes to more than the limit (a "zip bomb")
            raise ResponseTooLarge
    return content
