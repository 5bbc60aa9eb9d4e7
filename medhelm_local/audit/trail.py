"""An append-only JSON Lines audit trail in the appliance home.

Records hold ids, hashes, counts and outcomes only. If a record cannot be written the action fails
(fail closed): callers write the record before reporting success.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from medhelm_local.errors import MedhelmError


class AuditWriteError(MedhelmError):
    """The audit record could not be written, so the action it records is refused."""


class AuditTrail:
    def __init__(self, path: Path) -> None:
        self.path = path

    def _last_seq(self) -> int:
        if not self.path.exists():
            return 0
        last = 0
        with self.path.open("rb") as handle:
            for line in handle:
                if line.strip():
                    last = int(json.loads(line)["seq"])
        return last

    def append(self, *, actor: str, action: str, outcome: str, role: str = "operator",
               objects: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            record = {
                "seq": self._last_seq() + 1,
                "ts": datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
                "actor": actor,
                "role": role,
                "action": action,
                "objects": objects or {},
                "outcome": outcome,
                "host": socket.gethostname(),
            }
            line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
        except (OSError, ValueError, KeyError) as exc:
            raise AuditWriteError(f"cannot write the audit trail {self.path} ({type(exc).__name__}); "
                                  "the action was not performed") from None
        return record

    def records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as handle:
            return [json.loads(line) for line in handle if line.strip()]


def audit_event(home: Any, actor: str, action: str, *, outcome: str = "success", role: str = "operator",
                **objects: Any) -> dict[str, Any]:
    """Append one record to the home's audit trail."""
    return AuditTrail(home.audit_path).append(actor=actor, action=action, outcome=outcome, role=role,
                                              objects=objects)
