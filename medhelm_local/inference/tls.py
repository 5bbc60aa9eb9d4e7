"""The TLS context of every connection to a model server: the chat client's, ``models wait``'s probes and the small
replies (``serve vllm``, the console's System page) alike.

Proxies are never read from the environment (every client passes ``trust_env=False``), but the CA bundle is:
``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` (a site CA, set through the chart's ``runner.extraEnv`` or a compose env
file), else certifi's. httpx reads both only with ``trust_env``, so a client left to make its own context verified
an in-house https server against certifi alone, and a probe failed where the run's requests would have passed.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence

import httpx


def tls_context(base_urls: Sequence[str]) -> ssl.SSLContext:
    """The CA bundle where one of ``base_urls`` is https (loading it takes tens of milliseconds: make one per
    endpoint, not per request); for plain-http endpoints, a context that trusts no certificate at all, so that
    nothing could ever be verified against it."""
    if any(url.lower().startswith("https://") for url in base_urls):
        return httpx.create_ssl_context()
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificates and host names, against no CA
