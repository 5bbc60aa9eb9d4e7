"""An audit sink bound to one home's trail and one actor: what the store and the inference client are handed
instead of importing the audit package (see ``medhelm_local.sinks.AuditSink``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from medhelm_local.audit.trail import SYSTEM_ACTOR, audit_event


@dataclass(frozen=True)
class TrailSink:
    home: Any
    actor: str

    def __call__(self, action: str, *, outcome: str = "success", role: str = "operator", **objects: Any
                 ) -> dict[str, Any]:
        return audit_event(self.home, self.actor, action, outcome=outcome, role=role, **objects)


def system_audit(home: Any) -> TrailSink:
    """The appliance's own records in ``home``'s trail (e.g. a key rotation finished after a crash)."""
    return TrailSink(home, SYSTEM_ACTOR)
