"""A completion lane: one keep-alive HTTP/1.1 connection to one replica, used by one request at a time.

It is httpcore's own connection (``httpcore.AsyncHTTPConnection``: h11, keep-alive, timeouts, TLS, the same
exceptions httpx raises under other names), used without the connection pool and the request/response models
httpx puts on top of it, its I/O on plain asyncio (``inference.netio``). What the pool does for its connections,
the lane does for its one:

* a connection the server closed while idle, or idle past ``keepalive_expiry``, is closed and replaced before
  the next request (httpcore asks the socket, through the backend's ``is_readable``, as its pool does);
* a connection that failed (a timeout, a drop) is closed by httpcore itself; the lane's next request opens a
  new one.

No proxy is ever used (the connection goes to the origin it was made for: egress is the allowlist's alone),
and the reply is read whole, up to ``MAX_RESPONSE_BYTES`` (as sent and decoded): a completion is small, and
the caller needs all of it.
"""

from __future__ import annotations

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


class Lane:
    def __init__(self, origin: httpcore.Origin, tls: ssl.SSLContext | None,
                 keepalive_expiry: float = KEEPALIVE_EXPIRY_S) -> None:
        self._origin = origin
        self._tls = tls
        self._keepalive_expiry = keepalive_expiry
        self._connection: httpcore.AsyncHTTPConnection | None = None

    async def _ready(self) -> httpcore.AsyncHTTPConnection:
        connection = self._connection
        if connection is not None and (connection.is_closed() or connection.has_expired()
                                       or not connection.is_available()):
            await connection.aclose()
            connection = None
        if connection is None:
            connection = self._connection = httpcore.AsyncHTTPConnection(
                self._origin, ssl_context=self._tls, keepalive_expiry=self._keepalive_expiry,
                network_backend=_BACKEND)
        return connection

    async def post(self, request: httpcore.Request) -> tuple[int, bytes, bytes | None]:
        """Send ``request`` and read its reply whole: (status, body, its ``Retry-After`` header as sent, None
        when absent or the reply is a 200). Raises httpcore's exceptions."""
        connection = await self._ready()
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
