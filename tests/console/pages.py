"""One console page as a signed-in user sees it (standalone sign-in, served in this process)."""

from __future__ import annotations

from typing import Any

from medhelm_local.home import Home
from medhelm_local.home.config import ConsoleRole


def page_as(home: Home, path: str, role: ConsoleRole = ConsoleRole.INFORMATICS) -> Any:
    """The reply to GET ``path`` for a user of ``role`` signed in with a one-time link."""
    from starlette.testclient import TestClient

    from medhelm_local.webconsole.app import create_app
    from medhelm_local.webconsole.identity import StandaloneSessions

    sessions = StandaloneSessions(user=f"{role.value}-user", roles=frozenset({role}))
    with TestClient(create_app(home, sessions), raise_server_exceptions=False) as client:
        assert client.get(f"/login?token={sessions.new_login_token()}").status_code == 200
        return client.get(path)
