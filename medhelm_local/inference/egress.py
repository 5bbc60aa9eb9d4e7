"""The endpoint allowlist: a URL outside it is refused before any connection is opened.

Entries look like ``scheme://host[:port]``; ``host`` may use shell wildcards (``*.svc.cluster.local``).
An entry without a port allows any port on that host.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from urllib.parse import urlsplit

from medhelm_local.errors import EgressDenied


def _parts(url: str) -> tuple[str, str, int | None]:
    split = urlsplit(url)
    host = (split.hostname or "").lower()
    try:
        port = split.port
    except ValueError:
        port = -1
    return split.scheme.lower(), host, port


def is_allowed(url: str, allowlist: Iterable[str]) -> bool:
    scheme, host, port = _parts(url)
    if not host or port == -1 or scheme not in ("http", "https"):
        return False
    for entry in allowlist:
        e_scheme, e_host, e_port = _parts(entry.replace("*", "wildcard-marker"))
        e_host = e_host.replace("wildcard-marker", "*")
        if e_scheme != scheme:
            continue
        if e_port is not None and e_port != port:
            continue
        if fnmatch.fnmatchcase(host, e_host):
            return True
    return False


def check_egress(url: str, allowlist: Iterable[str]) -> None:
    if not is_allowed(url, allowlist):
        scheme, host, port = _parts(url)
        target = f"{scheme}://{host}" + (f":{port}" if port else "")
        raise EgressDenied(
            f"endpoint {target} is not on the allowlist in appliance.yaml; refused before connecting "
            "(add it to `allowlist` if it is inside your network)"
        )
