"""Starting the console: a socket bound first (so port 0 works and the link names the real port), then uvicorn.

Standalone (no ``console.trusted_proxies``) it listens on loopback only and prints a one-time login link. Behind
a proxy it reads identity from the proxy's headers, believed only from the trusted addresses. Access logs stay
off: a URL can carry a login token.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn

from medhelm_local.errors import BadInputError
from medhelm_local.home import Home
from medhelm_local.home.config import ConsoleRole
from medhelm_local.webconsole.app import create_app
from medhelm_local.webconsole.identity import StandaloneSessions


@dataclass
class ConsoleStart:
    mode: str  # standalone | proxy
    host: str
    port: int
    login_url: str | None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise BadInputError(f"--host/--port: cannot listen on {host}:{port} ({exc.strerror})") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(home: Home, *, host: str, port: int, user: str, roles: frozenset[ConsoleRole],
          on_start: Callable[[ConsoleStart], None]) -> None:
    settings = home.config.console
    standalone = not settings.trusted_proxies
    if standalone and not is_loopback(host):
        raise BadInputError(f"--host {host}: without console.trusted_proxies in appliance.yaml the console runs "
                            "standalone and listens on loopback only (127.0.0.1); put it behind the "
                            "authenticating proxy to serve beyond this machine")
    sessions = StandaloneSessions(user=user, roles=roles) if standalone else None
    sock = bind(host, port)
    real_port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    login_url = (f"http://{shown}:{real_port}/login?token={sessions.new_login_token()}" if sessions is not None
                 else None)
    app = create_app(home, sessions, service_actor=user)
    config = uvicorn.Config(app, log_level="warning", access_log=False, proxy_headers=False,
                            server_header=False, date_header=False, lifespan="off")
    server = uvicorn.Server(config)
    on_start(ConsoleStart(mode="standalone" if standalone else "proxy", host=host, port=real_port,
                          login_url=login_url))
    server.run(sockets=[sock])
