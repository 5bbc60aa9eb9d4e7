"""The console's ASGI application: identity on every request, roles per page, strict headers, audit.

Every response carries a Content-Security-Policy that allows nothing but this server's own style sheet (no
script at all: every page works as plain HTML forms), ``no-store`` caching (pages may hold patient text) and
anti-framing headers. Requests are identified before routing (:mod:`identity`); a page names the roles that may
open it, and a refusal is audited.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from html import escape
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from medhelm_local import __version__
from medhelm_local.actors import ACTOR_FORM
from medhelm_local.analysis.figures import fmt
from medhelm_local.audit import audit_event
from medhelm_local.audit.trail import AuditWriteError
from medhelm_local.benchmarks.registry import SpecRegistry
from medhelm_local.errors import MedhelmError, NotFoundError
from medhelm_local.formatting import duration, money
from medhelm_local.home import Home
from medhelm_local.home.config import ConsoleRole
from medhelm_local.inference.egress import EgressPolicy
from medhelm_local.phi_text import chosen_name_problem
from medhelm_local.webconsole.data import NoStoreYet, RunInProgress
from medhelm_local.webconsole.identity import (
    SESSION_COOKIE,
    CsrfTokens,
    Identity,
    NotTrusted,
    RefusedSubject,
    StandaloneSessions,
    identity_from_proxy,
)

log = logging.getLogger(__name__)

CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
       "base-uri 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
PUBLIC_PATHS = {"/healthz", "/login"}
# The largest form the console takes is an approval signature (pages_compliance.MAX_SIGNATURE_BYTES, 16 KiB) pasted
# or uploaded; anything much larger is refused before it is parsed (the form parser would hold up to a thousand
# 1 MiB fields in memory and spool uploaded files to disk without limit).
MAX_BODY_BYTES = 64 * 1024
ROLE_LABELS = {ConsoleRole.INFORMATICS: "Clinical informatics", ConsoleRole.COMPLIANCE: "Compliance",
               ConsoleRole.CLINICIAN: "Clinician", ConsoleRole.IT: "IT"}
NAV = [  # (role, path, label)
    (ConsoleRole.INFORMATICS, "/leaderboard", "Leaderboard"),
    (ConsoleRole.INFORMATICS, "/runs", "Runs"),
    (ConsoleRole.INFORMATICS, "/benchmarks", "Benchmarks"),
    (ConsoleRole.COMPLIANCE, "/audit", "Audit trail"),
    (ConsoleRole.COMPLIANCE, "/audit/report", "Compliance report"),
    (ConsoleRole.COMPLIANCE, "/exports", "Export requests"),
    (ConsoleRole.CLINICIAN, "/rate", "Rate responses"),
    (ConsoleRole.IT, "/system", "System"),
]


@dataclass
class Console:
    """What the pages share: the home, how identity is established, the templates, the CSRF secret."""

    home: Home
    sessions: StandaloneSessions | None  # None: behind a trusted proxy
    templates: Environment
    csrf: CsrfTokens
    service_actor: str = "console"  # who started the console (its own audit records: start, egress denials)

    @property
    def standalone(self) -> bool:
        return self.sessions is not None

    @property
    def specs(self) -> SpecRegistry:
        """The shipped benchmark specs and this home's own."""
        return SpecRegistry(self.home.root)

    @property
    def egress(self) -> EgressPolicy:
        """The allowlist for the console's own probes; a refusal is audited as the console's service actor."""
        from medhelm_local.context import AppContext

        return AppContext(home=self.home, actor=self.service_actor).egress

    def identify(self, request: Request) -> Identity | None:
        """Who is asking; None for nobody. :class:`RefusedSubject` where the proxy names a user the audit trail
        cannot record."""
        if self.sessions is not None:
            return self.sessions.identity(request.cookies.get(SESSION_COOKIE))
        peer = request.client.host if request.client else None
        config = self.home.config
        try:
            return identity_from_proxy(peer, {k.lower(): v for k, v in request.headers.items()}, config.console,
                                       config.identity.staff_ids())
        except NotTrusted:
            return None

    def audit(self, identity: Identity, action: str, *, outcome: str = "success", role: str = "console",
              **objects: Any) -> None:
        audit_event(self.home, identity.user, action, outcome=outcome, role=role, via=f"console-{identity.via}",
                    **objects)

    def render(self, request: Request, template: str, *, status_code: int = 200, **context: Any) -> HTMLResponse:
        identity: Identity | None = getattr(request.state, "identity", None)
        nav = [(path, label) for role, path, label in NAV if identity is not None and identity.has(role)]
        # The one entry this page belongs to: the longest that is the path or above it (/audit/report is the
        # report's, not the audit trail's too).
        here = request.url.path
        current = max((href for href, _ in nav if here == href or here.startswith(href + "/")), key=len, default=None)
        html = self.templates.get_template(template).render(
            identity=identity, nav=nav, current=current, version=__version__, role_labels=ROLE_LABELS,
            csrf=self.csrf.token(identity.user) if identity else "", appliance=self.home.config.appliance_name,
            **context)
        return HTMLResponse(html, status_code=status_code)


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def identity_of(request: Request) -> Identity:
    identity: Identity = request.state.identity
    return identity


Endpoint = Callable[[Request], Any]


# The ids the appliance generates (a run's, an export request's): a timestamp's digits, never a name someone chose.
_GENERATED_ID = re.compile(r"(?:run|exp)-\d{8}T\d{6}Z-[0-9a-f]{6}")


def audited_page(request: Request) -> str:
    """The page a refusal names in the trail: its path, each value in it (a run id in ``/runs/ID``: whatever the user
    put in the address) kept where it is an id the appliance generated or reads as no patient data, else the route's
    name for it in brackets (``/runs/[run_id]``, characters the trail keeps). A user lacking a page's role could
    otherwise write a patient's name and birth date into the trail by opening ``/runs/Okafor_1960-03-04``."""
    unsafe = {str(value): name for name, value in request.path_params.items()
              if not _GENERATED_ID.fullmatch(str(value)) and chosen_name_problem(str(value)) is not None}
    return "/".join(f"[{unsafe[part]}]" if part in unsafe else part for part in request.url.path.split("/"))


def _refusal(request: Request, roles: tuple[ConsoleRole, ...]) -> Response | None:
    identity = identity_of(request)
    if any(identity.has(r) for r in roles):
        return None
    console = console_of(request)
    console.audit(identity, "console.access_denied", outcome="denied", page=audited_page(request),
                  needs=[r.value for r in roles])
    return console.render(request, "denied.html", status_code=403, needs=[ROLE_LABELS[r] for r in roles])


def requires(*roles: ConsoleRole) -> Callable[[Endpoint], Endpoint]:
    """Only users holding one of ``roles`` open the page; anyone else gets 403, and the refusal is audited."""

    def decorate(endpoint: Endpoint) -> Endpoint:
        if inspect.iscoroutinefunction(endpoint):
            @functools.wraps(endpoint)
            async def async_wrapper(request: Request) -> Response:
                refused = await run_in_threadpool(_refusal, request, roles)
                result: Response = refused if refused is not None else await endpoint(request)
                return result

            return async_wrapper

        @functools.wraps(endpoint)
        def wrapper(request: Request) -> Response:
            refused = _refusal(request, roles)
            result: Response = refused if refused is not None else endpoint(request)
            return result

        return wrapper

    return decorate


def check_csrf(request: Request, form: Any) -> bool:
    """Whether the form carries this user's token; a form without it (a request forged by another site) is refused,
    and the refusal is audited, as every refusal is."""
    console, identity = console_of(request), identity_of(request)
    if console.csrf.valid(identity.user, form.get("csrf")):
        return True
    console.audit(identity, "console.bad_form_token", outcome="denied", page=audited_page(request))
    return False


def bad_form_token(request: Request, back: str) -> Response:
    """The page for a refused form: forged, or (far more often) opened before the console restarted, whose tokens
    are its own. Says that nothing was done and leads ``back`` to the page the form came from."""
    return console_of(request).render(
        request, "error.html", status_code=400, title="This form has expired",
        message="Bad form token: the page was opened before the console restarted, or by another session. Nothing "
                "was saved or changed. Open the page again and submit it from there.",
        back=(back, "Open the page again"))


class SecurityMiddleware(BaseHTTPMiddleware):
    """Identify the caller (or refuse with nothing), then add the security headers to whatever goes out."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        console = console_of(request)
        response: Response
        if request.url.path in PUBLIC_PATHS or request.url.path.startswith("/static/"):
            request.state.identity = None
            response = await call_next(request)
        else:
            refused: RefusedSubject | None = None
            try:
                identity = console.identify(request)
            except RefusedSubject as exc:
                identity, refused = None, exc
            if refused is not None:
                response = await _refused_subject(console, refused)
            elif identity is None:
                response = _unauthenticated(console)
            else:
                request.state.identity = identity
                try:
                    response = await call_next(request)
                except Exception as exc:
                    # The message or traceback of an unexpected error could hold patient text: the type only.
                    log.error("console.internal_error path=%s error=%s", request.url.path, type(exc).__name__)
                    response = bare_page(500, "Internal error",
                                         f"An unexpected error ({type(exc).__name__}) stopped this request, and "
                                         "the console's log records its type. Check the page you came from "
                                         "before trying again, and tell your IT team if it happens again.")
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response


def _too_large() -> HTMLResponse:
    return bare_page(413, "Request too large",
                     f"The console accepts at most {MAX_BODY_BYTES // 1024} KiB in one form (an approval signature is "
                     "a few KiB). Nothing of this one was saved.")


class BodyLimitMiddleware:
    """Refuse a request body over :data:`MAX_BODY_BYTES` with 413: by its Content-Length before any of it is read,
    and while it is read when it comes without one (chunked)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None and (not declared.strip().isdigit() or int(declared) > MAX_BODY_BYTES):
            await _too_large()(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > MAX_BODY_BYTES:
                    raise HTTPException(413, "Request body too large.")
            return message

        await self.app(scope, limited, send)


def bare_page(status: int, title: str, message: str = "", *, command: str = "") -> HTMLResponse:
    """A page for someone not (or no longer) signed in: a title and a language (what a screen reader and a browser
    tab need), the title as its heading and at most one sentence (ending with a ``command`` in code), and nothing
    else: not the appliance's name, no navigation, no data."""
    text = escape(message) + (f" <code>{escape(command)}</code>." if command else "")
    paragraph = f"<p>{text}</p>\n" if text else ""
    html = (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{escape(title)}</title>\n'
            f'<link rel="stylesheet" href="/static/console.css">\n</head>\n<body>\n<main id="main">\n'
            f"<h1>{escape(title)}</h1>\n{paragraph}</main>\n</body>\n</html>\n")
    return HTMLResponse(html, status_code=status)


async def _refused_subject(console: Console, refused: RefusedSubject) -> Response:
    """Sign-in refused: the proxy names a user the audit trail cannot record (free text, a date, an encoding). The
    refusal is audited as the console's service actor, with the reason alone: neither the page nor the record
    holds the name, nor its hash (a name with a date of birth is too easily guessed back from one)."""
    await run_in_threadpool(audit_event, console.home, console.service_actor, "console.sign_in_refused",
                            outcome="denied", role="console", via="console-proxy", reason=f"actor_{refused.reason}")
    return bare_page(403, "Your sign-in name cannot be used here",
                     "The identity provider signed you in under a name the appliance's audit trail cannot record "
                     f"(it must be {ACTOR_FORM}). Ask IT to have the sign-in proxy pass your user name, email or "
                     "subject id.")


def _unauthenticated(console: Console) -> Response:
    """Nothing about the appliance: no page, no data, no hint beyond how to sign in."""
    if console.standalone:
        return bare_page(401, "Sign in required", "Sign in with the one-time login link printed by",
                         command="medhelm-local serve console")
    return bare_page(401, "Authentication required")


# -- pages every identity can open ----------------------------------------------------------------------------


def healthz(request: Request) -> Response:
    return PlainTextResponse("ok\n")


def login(request: Request) -> Response:
    console = console_of(request)
    if console.sessions is None:
        return bare_page(404, "Not found")
    session = console.sessions.redeem(request.query_params.get("token", ""))
    if session is None:
        return bare_page(403, "This login link is not valid",
                         "Each link works once. For a new one, start the console again:",
                         command="medhelm-local serve console")
    identity = console.sessions.identity(session)
    assert identity is not None
    console.audit(identity, "console.login", roles=sorted(r.value for r in identity.roles))
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    return response


async def logout(request: Request) -> Response:
    console = console_of(request)
    form = await request.form()
    if not check_csrf(request, form):
        return bad_form_token(request, "/")
    if console.sessions is not None:
        console.sessions.end(request.cookies.get(SESSION_COOKIE))
    console.audit(identity_of(request), "console.logout")
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


def index(request: Request) -> Response:
    return console_of(request).render(request, "index.html")


def stylesheet(request: Request) -> Response:
    css = resources.files("medhelm_local.webconsole").joinpath("static/console.css").read_text(encoding="utf-8")
    return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=300"})


# -- errors ---------------------------------------------------------------------------------------------------


def _error_page(request: Request, status: int, title: str, message: str, *, retry: bool = False,
                back: tuple[str, str] | None = None) -> Response:
    console = console_of(request)
    if getattr(request.state, "identity", None) is None:
        return bare_page(status, title)
    response = console.render(request, "error.html", status_code=status, title=title, message=message,
                              retry=retry, back=back)
    if retry:
        response.headers["Retry-After"] = "5"
    return response


async def on_run_in_progress(request: Request, exc: Exception) -> Response:
    return _error_page(request, 503, "A run is in progress",
                       "An evaluation run (or a dataset registration) is writing to the store right now. This page "
                       "reads the store without interrupting it; reload in a few seconds.", retry=True)


async def on_no_store(request: Request, exc: Exception) -> Response:
    return _error_page(request, 404, "Nothing evaluated yet",
                       "No dataset has been registered and no run has been made on this appliance yet.")


async def on_not_found(request: Request, exc: Exception) -> Response:
    return _error_page(request, 404, "Not found", str(exc) if isinstance(exc, NotFoundError) else "Not found.")


async def on_audit_failure(request: Request, exc: Exception) -> Response:
    # Fail closed: what could not be audited is not shown.
    return _error_page(request, 503, "Audit trail unavailable",
                       "The audit trail cannot be written, so nothing is shown (fail closed). Ask IT to run "
                       "`medhelm-local audit verify`.")


async def on_medhelm_error(request: Request, exc: Exception) -> Response:
    return _error_page(request, 400, "Cannot show this page", str(exc))


async def on_http_404(request: Request, exc: Exception) -> Response:
    return _error_page(request, 404, "Not found", "There is no such page.")


async def on_http_405(request: Request, exc: Exception) -> Response:
    """A form's address opened as a page (from history or a bookmark): say so and lead to the page whose form it is
    (the address above it: /audit for /audit/verify, the request for /exports/ID/approve)."""
    back = request.url.path.rsplit("/", 1)[0] or "/"
    response = _error_page(request, 405, "This address takes a form",
                           "This is where a form is sent; opened as a page it does nothing. Nothing was saved or "
                           "changed. Open the page and use its form.", back=(back, "Open the page"))
    allow = getattr(exc, "headers", None) or {}
    if "Allow" in allow:
        response.headers["Allow"] = allow["Allow"]
    return response


async def on_http_413(request: Request, exc: Exception) -> Response:
    return _too_large()  # a body without Content-Length, cut off as it was read


def templates() -> Environment:
    env = Environment(loader=PackageLoader("medhelm_local.webconsole", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True), trim_blocks=True,
                      lstrip_blocks=True)
    env.filters["num"] = fmt
    env.filters["money"] = money
    env.filters["duration"] = duration
    env.filters["pct"] = lambda v: "-" if v is None else f"{100 * v:.1f}%"
    env.filters["size"] = human_size
    return env


def human_size(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def create_app(home: Home, sessions: StandaloneSessions | None, *, service_actor: str = "console") -> Starlette:
    """The console for ``home``: standalone (``sessions`` from a one-time login link) or behind a trusted proxy."""
    from medhelm_local.webconsole import pages_clinician, pages_compliance, pages_informatics, pages_it

    routes = [
        Route("/healthz", healthz), Route("/login", login), Route("/logout", logout, methods=["POST"]),
        Route("/", index), Route("/static/console.css", stylesheet),
        *pages_informatics.routes(), *pages_compliance.routes(), *pages_clinician.routes(), *pages_it.routes(),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        RunInProgress: on_run_in_progress, NoStoreYet: on_no_store, NotFoundError: on_not_found,
        AuditWriteError: on_audit_failure, MedhelmError: on_medhelm_error, 404: on_http_404,
        405: on_http_405, 413: on_http_413,
    }
    app = Starlette(routes=routes, middleware=[Middleware(SecurityMiddleware), Middleware(BodyLimitMiddleware)],
                    exception_handlers=handlers)
    app.state.console = Console(home=home, sessions=sessions, templates=templates(), csrf=CsrfTokens(),
                                service_actor=service_actor)
    return app
