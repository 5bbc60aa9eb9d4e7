"""The endpoint allowlist: a URL outside it is refused before any connection is opened, and the refusal is
written to the audit trail.

Entries look like ``scheme://host[:port]``; ``host`` may use shell wildcards (``*.svc.cluster.local``).
An entry without a port allows any port on that host. Only http(s) URLs with a host can be allowed.

Auditing: an :class:`EgressPolicy` carries the allowlist and the sink that records a denial; the caller's
``AppContext.egress`` makes one for its home and actor (nothing process-wide: two contexts, two policies). Every
denial is then recorded as ``egress.denied`` with the refused target (scheme, host, port: never a path or
query). The connection is refused whether or not the record could be written; if it could not, the error says
so.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from medhelm_local.errors import EgressDenied
from medhelm_local.sinks import AuditSink

DenialSink = Callable[[str], object]  # called with the refused target (scheme://host[:port]) before refusing


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


def audit_denials(audit: AuditSink) -> DenialSink:
    """A denial sink that writes ``egress.denied`` through ``audit`` (bound to a home's trail and an actor)."""

    def record(target: str) -> None:
        audit("egress.denied", outcome="denied", role="system", target=target, reason="not_allowlisted")

    return record


def check_egress(url: str, allowlist: Iterable[str], *, on_denied: DenialSink | None = None) -> None:
    """Refuse ``url`` unless ``allowlist`` allows it; a refusal is first reported to ``on_denied``."""
    if is_allowed(url, allowlist):
        return
    target = denial_target(url)
    message = (f"endpoint {target} is not on the allowlist in appliance.yaml; refused before connecting "
               "(add it to `allowlist` if it is inside your network)")
    if on_denied is not None:
        try:
            on_denied(target)
        except Exception as exc:  # the connection stays refused; say the record is missing
            message += f" (this denial could not be written to the audit trail: {type(exc).__name__})"
    raise EgressDenied(message)


@dataclass(frozen=True)
class EgressPolicy:
    """Where this caller may connect (the allowlist) and where a refusal is recorded (``on_denied``; None: the
    refusal is raised but recorded nowhere, for a caller without a trail)."""

    allowlist: tuple[str, ...]
    on_denied: DenialSink | None = None

    @classmethod
    def of(cls, allowlist: Iterable[str] | EgressPolicy) -> EgressPolicy:
        """A policy as given, or a bare allowlist as an unaudited policy (tests, tools without a home)."""
        return allowlist if isinstance(allowlist, EgressPolicy) else cls(tuple(allowlist))

    def allows(self, url: str) -> bool:
        return is_allowed(url, self.allowlist)

    def check(self, url: str) -> None:
        check_egress(url, self.allowlist, on_denied=self.on_denied)
