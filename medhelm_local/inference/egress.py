"""The endpoint allowlist: a URL outside it is refused before any connection is opened, and the refusal is
written to the audit trail.

Entries look like ``scheme://host[:port]``; ``host`` may use shell wildcards (``*.svc.cluster.local``).
An entry without a port allows any port on that host. Only http(s) URLs with a host can be allowed.

Auditing: the CLI registers the acting home and actor (:func:`audit_denials_to`, called when an
``AppContext`` is made); every denial is then recorded as ``egress.denied`` with the refused target
(scheme, host, port: never a path or query). The connection is refused whether or not the record could be
written; if it could not, the error says so.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from medhelm_local.errors import EgressDenied

_auditor: Callable[[str], None] | None = None
_lock = threading.Lock()


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


def denial_target(url: str) -> str:
    """What a denial record names: scheme, host and port only."""
    scheme, host, port = _parts(url)
    return f"{scheme}://{host}" + (f":{port}" if port and port != -1 else "")


def set_denial_auditor(auditor: Callable[[str], None] | None) -> None:
    """Register the function that records a denial (``None`` to stop recording)."""
    global _auditor
    with _lock:
        _auditor = auditor


def audit_denials_to(home: Any, actor: str) -> None:
    """Record every denial from now on in ``home``'s audit trail, as ``actor``."""

    def record(target: str) -> None:
        from medhelm_local.audit.trail import audit_event

        audit_event(home, actor, "egress.denied", outcome="denied", role="system", target=target,
                    reason="not_allowlisted")

    set_denial_auditor(record)


def check_egress(url: str, allowlist: Iterable[str]) -> None:
    if is_allowed(url, allowlist):
        return
    target = denial_target(url)
    message = (f"endpoint {target} is not on the allowlist in appliance.yaml; refused before connecting "
               "(add it to `allowlist` if it is inside your network)")
    with _lock:
        auditor = _auditor
    if auditor is not None:
        try:
            auditor(target)
        except Exception as exc:  # the connection stays refused; say the record is missing
            message += f" (this denial could not be written to the audit trail: {type(exc).__name__})"
    raise EgressDenied(message)
