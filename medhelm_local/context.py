"""Per-invocation state shared by the front ends (CLI commands, the console, the demo, the bench) and the use
cases in ``medhelm_local.application``: which home, who is acting, which benchmark specs they see, where their
audit records and their refused connections go. Nothing here is process-wide: a library caller that makes an
``AppContext`` gets the same specs and auditing as the CLI, and two contexts in one process share nothing."""

from __future__ import annotations

import functools
import os
import pwd
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from medhelm_local.errors import MedhelmError
from medhelm_local.home import Home, resolve_home

if TYPE_CHECKING:
    from medhelm_local.audit.sink import TrailSink
    from medhelm_local.benchmarks.registry import SpecRegistry
    from medhelm_local.inference.egress import EgressPolicy
    from medhelm_local.store import Store


@dataclass
class AppContext:
    home: Home
    actor: str

    @property
    def audit(self) -> TrailSink:
        """This actor's records in this home's audit trail."""
        from medhelm_local.audit.sink import TrailSink

        return TrailSink(self.home, self.actor)

    @property
    def system_audit(self) -> TrailSink:
        """The appliance's own records in this home's trail (e.g. a key rotation finished after a crash)."""
        from medhelm_local.audit.sink import system_audit

        return system_audit(self.home)

    @property
    def specs(self) -> SpecRegistry:
        """The shipped benchmark specs and this home's own (read from the home each time they are asked for)."""
        from medhelm_local.benchmarks.registry import SpecRegistry

        return SpecRegistry(self.home.root)

    @property
    def egress(self) -> EgressPolicy:
        """The home's endpoint allowlist; a refused connection is audited in this home, as this actor (issue 6:
        zero egress). Read from the configuration each time, so an edited allowlist applies at once."""
        from medhelm_local.inference.egress import EgressPolicy, audit_denials

        return EgressPolicy(tuple(self.home.config.allowlist), on_denied=audit_denials(self.audit))

    def open_store(self, *, read_only: bool = False) -> Store:
        """The home's store, a rotation recovered on opening audited as the appliance."""
        from medhelm_local.store import Store

        return Store.open(self.home, read_only=read_only, audit=self.system_audit)

    @classmethod
    def create(cls, home_option: Path | None, actor_option: str | None) -> AppContext:
        """The OS account, plus the identity stated with ``--actor`` or ``$MEDHELM_ACTOR``: an identity that is
        not a user name or sign-in subject (free text, a date, an encoding) is refused before anything is done."""
        from medhelm_local.actors import check_actor

        home = Home(resolve_home(home_option))
        staff_ids = functools.partial(_site_staff_ids, home)
        os_user = _os_user(staff_ids)
        if actor_option:
            external: str | None = check_actor(actor_option, "--actor", staff_ids)
        else:
            stated = os.environ.get("MEDHELM_ACTOR")
            external = check_actor(stated, "$MEDHELM_ACTOR", staff_ids) if stated else None
        actor = f"{os_user}:{external}" if external else os_user
        return cls(home=home, actor=actor)


def _site_staff_ids(home: Home) -> re.Pattern[str] | None:
    """The site's staff number form (appliance.yaml ``identity.staff_id_pattern``); None where the home has no
    readable configuration (yet): the command itself then says what is wrong with it."""
    try:
        return home.config.identity.staff_ids()
    except MedhelmError:
        return None


def _os_user(staff_ids: Callable[[], re.Pattern[str] | None]) -> str:
    """The account the process runs as, looked up from its real uid: never from ``LOGNAME`` / ``USER`` (what
    ``getpass.getuser`` reads first), which the caller sets at will and would let them act in the audit trail
    under a colleague's name. A uid with no account (a container's arbitrary ``runAsUser``), or whose account name
    is not a user name's shape (an image whose writable /etc/passwd lets the process name its own uid), is
    ``uid<N>``."""
    from medhelm_local.actors import site_actor_problem

    uid = os.getuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"
    return f"uid{uid}" if site_actor_problem(name, staff_ids) else name


def app_context(ctx: typer.Context) -> AppContext:
    root = ctx.find_root()
    obj = root.obj
    if not isinstance(obj, AppContext):
        obj = AppContext.create(None, None)
        root.obj = obj
    return obj
