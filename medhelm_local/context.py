"""Per-invocation state shared by CLI commands: which home, who is acting."""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from pathlib import Path

import typer

from medhelm_local.home import Home, resolve_home


@dataclass
class AppContext:
    home: Home
    actor: str

    def __post_init__(self) -> None:
        # Refused connections are audited in this home, as this actor (issue 6: zero egress).
        from medhelm_local.inference.egress import audit_denials_to

        audit_denials_to(self.home, self.actor)

    @classmethod
    def create(cls, home_option: Path | None, actor_option: str | None) -> AppContext:
        os_user = _os_user()
        external = actor_option or os.environ.get("MEDHELM_ACTOR")
        actor = f"{os_user}:{external}" if external else os_user
        return cls(home=Home(resolve_home(home_option)), actor=actor)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid{os.getuid()}"


def app_context(ctx: typer.Context) -> AppContext:
    root = ctx.find_root()
    obj = root.obj
    if not isinstance(obj, AppContext):
        obj = AppContext.create(None, None)
        root.obj = obj
    return obj
