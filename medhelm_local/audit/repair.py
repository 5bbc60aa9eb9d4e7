"""``audit repair``: remove what a failed append left at the end of the trail, and nothing else.

Appends are all or nothing (``trail._append_all_or_nothing``), but a process killed in the middle of its write,
or a host that lost power, can still leave the last record half-written; every later append then refuses to
sign over the damaged end. Repair removes only

* an unterminated last record, and
* a complete event record right before it whose signed checkpoint was not written (the action it announced was
  refused, since its append raised),

and only when everything kept still ends in a valid signed checkpoint and the state file does not record more
records than are kept (those would be records a completed append wrote: tampering, not a failed write, and
repair refuses). The removed bytes are saved beside the trail (``audit.jsonl.repair-<UTC time>``, 0600) for the
investigator, and the CLI audits the repair.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from medhelm_local.audit.trail import CHECKPOINT_ACTION, AuditTrail, AuditWriteError, read_state, state_path_for
from medhelm_local.errors import BadInputError, MedhelmError
from medhelm_local.home.keys import write_secret_file


class RepairResult(BaseModel):
    trail: str
    kept_records: int
    removed_bytes: int
    removed_sha256: str | None = None
    saved_as: str | None = None


def _is_checkpoint(line: bytes) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and record.get("action") == CHECKPOINT_ACTION


def good_prefix(data: bytes) -> int:
    """The length of the trail without what a failed append can have left at its end."""
    cut = len(data) if not data or data.endswith(b"\n") else data.rfind(b"\n") + 1
    if cut:
        last_start = data.rfind(b"\n", 0, cut - 1) + 1
        if not _is_checkpoint(data[last_start:cut - 1]):
            cut = last_start
    return cut


def repair_trail(path: Path, keys_dir: Path) -> RepairResult:
    trail = AuditTrail(path, keys_dir)
    key = trail._signing_key()
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        raise BadInputError(f"no audit trail at {path}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # no append runs while the end is checked and cut
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0)
        cut = good_prefix(data)
        kept = data[:cut]
        lines = kept[:-1].split(b"\n") if kept else []
        trail._tail(lines, key)  # what is kept must end in a valid signed checkpoint: raises otherwise
        recorded = read_state(state_path_for(path))
        if recorded is not None and recorded.count > len(lines):
            raise AuditWriteError(
                f"the audit trail {path} would keep {len(lines)} records but {recorded.count} were written by "
                "completed appends: this is not a failed append. Nothing was changed; investigate (RUNBOOK: "
                "audit trail repair)")
        if cut == size:
            return RepairResult(trail=str(path), kept_records=len(lines), removed_bytes=0)
        removed = data[cut:]
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        saved = path.with_name(f"{path.name}.repair-{stamp}")
        if not write_secret_file(saved, removed):
            raise AuditWriteError(f"cannot repair the audit trail {path} ({saved.name} exists); nothing was removed")
        os.ftruncate(fd, cut)
        os.fsync(fd)
    except MedhelmError:
        raise
    except OSError as exc:
        raise AuditWriteError(f"cannot repair the audit trail {path} ({exc.strerror or type(exc).__name__}); "
                              "nothing was removed") from None
    finally:
        os.close(fd)
    return RepairResult(trail=str(path), kept_records=len(lines), removed_bytes=len(removed),
                        removed_sha256=hashlib.sha256(removed).hexdigest(), saved_as=saved.name)
