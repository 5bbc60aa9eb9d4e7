"""Who is asking: proxy headers from a trusted address, or a standalone session from a one-time login link.

Behind the hospital's authenticating proxy (oauth2-proxy speaking OIDC to the identity provider), the user and
groups arrive in request headers. Those headers are believed only when the TCP peer is one of the configured
``trusted_proxies``; from anywhere else the request gets nothing. Groups map to console roles in
``appliance.yaml`` (``console.roles``).

Standalone (no trusted proxies configured) the console listens on loopback only and prints a one-time login
link, as Jupyter does: the link's token is spent on first use and exchanged for a session cookie (HttpOnly,
SameSite=Strict). Proxy headers are never read in standalone mode.

The user the proxy names is written into audit records, so it must be a user name or sign-in subject
(:mod:`medhelm_local.actors`): any other (free text, a date, an encoding) is refused sign-in, with the reason.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
import threading
import time
from dataclasses import dataclass, field

from medhelm_local.actors import actor_problem
from medhelm_local.home.config import ConsoleRole, ConsoleSettings

SESSION_COOKIE = "medhelm_console"
SESSION_TTL_S = 12 * 3600
LOGIN_TOKEN_TTL_S = 15 * 60
_GROUP = re.compile(r"^[\w.@+\-:/ ]{1,128}$")


@dataclass(frozen=True)
class Identity:
    user: str
    roles: frozenset[ConsoleRole]
    groups: tuple[str, ...] = ()
    via: str = "proxy"  # proxy | standalone

    def has(self, role: ConsoleRole) -> bool:
        return role in self.roles


class NotTrusted(Exception):
    """The request did not come from a trusted proxy, or came without identity headers."""


class RefusedSubject(Exception):
    """A trusted proxy named a user the audit trail cannot record (``reason``: a key of ``actors.REASONS``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def roles_for(groups: tuple[str, ...], settings: ConsoleSettings) -> frozenset[ConsoleRole]:
    held = set(groups)
    return frozenset(role for role, role_groups in settings.roles.items() if held & set(role_groups))


def _peer_trusted(peer: str | None, settings: ConsoleSettings) -> bool:
    if not peer:
        return False
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(n, strict=False) for n in settings.trusted_proxies)


def identity_from_proxy(peer: str | None, headers: dict[str, str], settings: ConsoleSettings,
                        staff_ids: re.Pattern[str] | None = None) -> Identity:
    """The identity a trusted proxy asserts; :class:`NotTrusted` for anyone else or no user, :class:`RefusedSubject`
    for a user that is not a user name or sign-in subject (``staff_ids``: the site's staff number form)."""
    if not _peer_trusted(peer, settings):
        raise NotTrusted("request not from a trusted proxy")
    user = headers.get(settings.user_header.lower(), "").strip()
    if not user:
        raise NotTrusted("no user header")
    reason = actor_problem(user, staff_ids)
    if reason is not None:
        raise RefusedSubject(reason)
    raw_groups = headers.get(settings.groups_header.lower(), "")
    groups = tuple(g.strip() for g in raw_groups.split(",") if g.strip() and _GROUP.match(g.strip()))
    return Identity(user=user, roles=roles_for(groups, settings), groups=groups, via="proxy")


@dataclass
class StandaloneSessions:
    """One-time login tokens and the sessions they open, in memory (a restart logs everyone out)."""

    user: str
    roles: frozenset[ConsoleRole]
    _tokens: dict[str, float] = field(default_factory=dict)
    _sessions: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def new_login_token(self) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[_digest(token)] = time.monotonic() + LOGIN_TOKEN_TTL_S
        return token

    def redeem(self, token: str) -> str | None:
        """Spend a login token (once): a new session id, or None for an unknown, spent or expired token."""
        with self._lock:
            expires = self._tokens.pop(_digest(token), None)
            if expires is None or expires < time.monotonic():
                return None
            session = secrets.token_urlsafe(32)
            self._sessions[_digest(session)] = time.monotonic() + SESSION_TTL_S
            return session

    def identity(self, session: str | None) -> Identity | None:
        if not session:
            return None
        with self._lock:
            expires = self._sessions.get(_digest(session))
            if expires is None or expires < time.monotonic():
                return None
        return Identity(user=self.user, roles=self.roles, via="standalone")

    def end(self, session: str | None) -> None:
        if session:
            with self._lock:
                self._sessions.pop(_digest(session), None)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class CsrfTokens:
    """Form tokens bound to the user: an HMAC under a per-process secret, checked on every POST. The same secret
    names blinded items in forms (:meth:`opaque`), so a form carries no run, model or instance id."""

    def __init__(self) -> None:
        self._secret = secrets.token_bytes(32)

    def opaque(self, text: str) -> str:
        return hmac.new(self._secret, f"item:{text}".encode(), hashlib.sha256).hexdigest()[:32]

    def token(self, user: str) -> str:
        return hmac.new(self._secret, f"csrf:{user}".encode(), hashlib.sha256).hexdigest()

    def valid(self, user: str, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.token(user), str(token))
