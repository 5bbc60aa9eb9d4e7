"""The audit sink that lower layers are handed instead of importing the audit package (the store records a
finished key rotation through it, the egress policy a refused connection).

The caller binds it to a home's trail and an actor (``AppContext.audit`` / ``AppContext.system_audit``, built on
``medhelm_local.audit.sink.TrailSink``); the layer below only says what happened, in the trail's vocabulary.
"""

from __future__ import annotations

from typing import Any, Protocol


class AuditSink(Protocol):
    """Records one audit event (fail closed: raises when the record cannot be written)."""

    def __call__(self, action: str, *, outcome: str = "success", role: str = "operator", **objects: Any) -> object:
        ...
