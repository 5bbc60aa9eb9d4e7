"""The tamper-evident audit trail: an append-only JSON Lines file in the home, hash-chained and signed.

Each line is one record, canonical JSON: ``seq``, ``ts`` (UTC), ``actor``, ``role``, ``action``,
``objects`` (ids, hashes, counts only), ``outcome``, ``host`` and ``prev`` (SHA-256 of the previous line;
64 zeros for the first). Every event record is immediately followed, in the same write, by a signed
checkpoint record (action ``audit.checkpoint``): the number of records before it, the RFC 6962 Merkle root
over those lines, the hash of the last one (``chain_head``), all signed with the appliance's Ed25519 key.

Appending is fail closed: the record and its checkpoint are written and fsynced under an exclusive file
lock (two processes may append at once), and if anything fails (no key, damaged tail, full disk) the caller
gets :class:`AuditWriteError` and must not perform the action. Before appending, the tail checkpoint is
re-verified (signature, Merkle root, chain head), so the appliance refuses to sign over a trail that was
altered since its last signature. To keep appends constant-time on a long trail, the Merkle frontier is
cached in ``audit.jsonl.state`` and used only while the file's size and last two records are unchanged;
``audit verify`` never trusts its frontier (an edit that keeps the file's size is still caught there, by the
older signed checkpoints), but it does use its record count: a trail shorter than the state file says had
its tail removed (a truncation that also rewrites the state file is caught by a checkpoint exported with
``audit checkpoint --export`` and kept outside the home).

An append is all or nothing: a write that fails part-way (full disk, file size limit) is truncated back to the
last good offset before the error is raised, so the trail never ends in half a record.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import re
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from medhelm_local.audit.merkle import MerkleAccumulator
from medhelm_local.errors import MedhelmError
from medhelm_local.fileio import write_all

GENESIS = "0" * 64
CHECKPOINT_ACTION = "audit.checkpoint"
CHECKPOINT_SCHEMA = "medhelm-local/audit-checkpoint/v1"
SYSTEM_ACTOR = "appliance"

# Object values are ids, hashes, counts, names from the configuration: no whitespace, bounded length.
_SAFE_STRING = re.compile(r"^[\w.:/@+=,%#\-\[\]]{0,256}$")
_SAFE_KEY = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class AuditWriteError(MedhelmError):
    """The audit record could not be written, so the action it records is refused."""


def canonical_json(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def line_hash(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def utc_timestamp() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def key_id(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def checkpoint_message(tree_size: int, root: str, chain_head: str, signer: str) -> bytes:
    """The exact bytes a checkpoint signature covers."""
    return canonical_json({"schema": CHECKPOINT_SCHEMA, "tree_size": tree_size, "root": root,
                           "chain_head": chain_head, "key_id": signer})


def sign_checkpoint(private_key: Ed25519PrivateKey, tree_size: int, root: str, chain_head: str) -> dict[str, Any]:
    signer = key_id(private_key.public_key())
    signature = private_key.sign(checkpoint_message(tree_size, root, chain_head, signer))
    return {"schema": CHECKPOINT_SCHEMA, "tree_size": tree_size, "root": root, "chain_head": chain_head,
            "key_id": signer, "signature": base64.b64encode(signature).decode("ascii")}


def checkpoint_signature_ok(checkpoint: dict[str, Any], public_key: Ed25519PublicKey) -> bool:
    try:
        if checkpoint.get("schema") != CHECKPOINT_SCHEMA or checkpoint.get("key_id") != key_id(public_key):
            return False
        message = checkpoint_message(int(checkpoint["tree_size"]), str(checkpoint["root"]),
                                     str(checkpoint["chain_head"]), str(checkpoint["key_id"]))
        public_key.verify(base64.b64decode(checkpoint["signature"], validate=True), message)
        return True
    except (InvalidSignature, KeyError, TypeError, ValueError):
        return False


def checkpoint_line(seq: int, event: dict[str, Any], event_line: bytes, checkpoint: dict[str, Any]) -> bytes:
    """The one valid line for the checkpoint that follows ``event``: every field but the signed ``objects``
    is derived from the event, so no byte of a checkpoint record can change unnoticed."""
    return canonical_json({
        "seq": seq, "ts": event.get("ts"), "actor": SYSTEM_ACTOR, "role": "system", "action": CHECKPOINT_ACTION,
        "objects": checkpoint, "outcome": "signed", "host": event.get("host"), "prev": line_hash(event_line),
    })


def safe_objects(objects: dict[str, Any]) -> dict[str, Any]:
    """Keep what an audit record may hold; any free text is replaced by its length (AU-3(3))."""
    return {str(k) if _SAFE_KEY.match(str(k)) else "redacted_key": _safe_value(v) for k, v in objects.items()}


def _safe_value(value: Any, depth: int = 0) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value if _SAFE_STRING.match(value) else f"[redacted len={len(value)}]"
    if depth < 3 and isinstance(value, list | tuple) and len(value) <= 256:
        return [_safe_value(v, depth + 1) for v in value]
    if depth < 3 and isinstance(value, dict) and len(value) <= 256:
        return {str(k) if _SAFE_KEY.match(str(k)) or _SAFE_STRING.match(str(k)) else "redacted_key":
                _safe_value(v, depth + 1) for k, v in value.items()}
    return f"[redacted {type(value).__name__}]"


@dataclass
class TailState:
    """What an append needs to know about the trail: its lines' Merkle state and last line."""

    count: int
    last_line: bytes | None
    merkle: MerkleAccumulator


def read_lines(path: Path) -> list[bytes]:
    if not path.exists():
        return []
    data = path.read_bytes()
    return _split_lines(data, path)


def _split_lines(data: bytes, path: Path) -> list[bytes]:
    if not data:
        return []
    if not data.endswith(b"\n"):
        raise AuditWriteError(f"the audit trail {path} ends in a partial record; run `medhelm-local audit "
                              "verify` and investigate before any further action")
    return data[:-1].split(b"\n")


class AuditTrail:
    def __init__(self, path: Path, keys_dir: Path | None = None) -> None:
        self.path = path
        self.keys_dir = keys_dir
        self.last_checkpoint: dict[str, Any] | None = None

    def _signing_key(self) -> Ed25519PrivateKey:
        from medhelm_local.home.keys import load_signing_key

        if self.keys_dir is None:
            raise AuditWriteError("no signing key configured for the audit trail; the action was not performed")
        try:
            return load_signing_key(self.keys_dir)
        except MedhelmError as exc:
            raise AuditWriteError(f"cannot sign the audit trail: {exc}; the action was not performed") from None

    @property
    def state_path(self) -> Path:
        return state_path_for(self.path)

    def _refuse(self, problem: str) -> AuditWriteError:
        return AuditWriteError(f"the audit trail {self.path} fails verification at its end ({problem}); nothing "
                               "was done. Run `medhelm-local audit verify` and investigate")

    def _tail(self, lines: list[bytes], key: Ed25519PrivateKey) -> TailState:
        """Check that the trail still ends in a valid checkpoint over everything before it."""
        merkle = MerkleAccumulator()
        for line in lines[:-1]:
            merkle.add(line)
        if lines:
            problem = _tail_problem(lines[-1], lines[-2] if len(lines) > 1 else None, len(lines), merkle,
                                    key.public_key())
            if problem:
                raise self._refuse(problem)
            merkle.add(lines[-1])
        return TailState(count=len(lines), last_line=lines[-1] if lines else None, merkle=merkle)

    def _cached_tail(self, fd: int, size: int, key: Ed25519PrivateKey) -> TailState | None:
        """The tail from the state file (Merkle frontier of the trail as last written), when it still
        describes the file: same size and same last two records. Saves re-hashing a long trail on every
        append; ``audit verify`` never uses it."""
        try:
            state = json.loads(self.state_path.read_bytes())
            if state.get("size") != size or size == 0:
                return None
            chunk = os.pread(fd, min(size, 1 << 16), size - min(size, 1 << 16))
            if not chunk.endswith(b"\n"):
                return None
            pieces = chunk[:-1].split(b"\n")
            count = int(state["count"])
            if len(pieces) < 3 or count < 2:
                return None
            last, before = pieces[-1], pieces[-2]
            if line_hash(last) != state["last_hash"] or line_hash(before) != state["before_hash"]:
                return None
            before_last = MerkleAccumulator.from_state(state["frontier_before_last"])
            if before_last.size != count - 1:
                return None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        problem = _tail_problem(last, before, count, before_last, key.public_key())
        if problem:
            raise self._refuse(problem)
        merkle = before_last.copy()
        merkle.add(last)
        return TailState(count=count, last_line=last, merkle=merkle)

    def _save_state(self, size: int, count: int, event: bytes, checkpoint: bytes,
                    frontier_before_last: MerkleAccumulator) -> None:
        state = {"size": size, "count": count, "last_hash": line_hash(checkpoint), "before_hash": line_hash(event),
                 "frontier_before_last": frontier_before_last.state()}
        try:
            tmp = self.state_path.with_name(f".{self.state_path.name}.{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.fchmod(fd, 0o600)  # a leftover temporary file keeps its old mode otherwise
                write_all(fd, json.dumps(state).encode())
            finally:
                os.close(fd)
            os.replace(tmp, self.state_path)
        except OSError:
            pass  # only a cache: the next append re-reads the trail

    def append(self, *, actor: str, action: str, outcome: str, role: str = "operator",
               objects: dict[str, Any] | None = None) -> dict[str, Any]:
        """Append one event record and its signed checkpoint; returns the event record."""
        key = self._signing_key()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            raise AuditWriteError(f"cannot open the audit trail {self.path} ({exc.strerror}); "
                                  "the action was not performed") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            tail = self._cached_tail(fd, size, key)
            if tail is None:
                with os.fdopen(os.dup(fd), "rb") as handle:
                    tail = self._tail(_split_lines(handle.read(), self.path), key)
                recorded = read_state(self.state_path)
                if recorded is not None and recorded.count > tail.count:
                    raise self._refuse(f"it has {tail.count} records but {recorded.count} were written: records "
                                       f"from seq {tail.count + 1} were removed")
            host = socket.gethostname()
            record = {
                "seq": tail.count + 1, "ts": utc_timestamp(), "actor": actor, "role": role, "action": action,
                "objects": safe_objects(objects or {}), "outcome": outcome, "host": host,
                "prev": line_hash(tail.last_line) if tail.last_line is not None else GENESIS,
            }
            line = canonical_json(record)
            tail.merkle.add(line)
            frontier_before_checkpoint = tail.merkle.copy()
            head = line_hash(line)
            checkpoint = sign_checkpoint(key, tail.count + 1, tail.merkle.root().hex(), head)
            cp_line = checkpoint_line(tail.count + 2, record, line, checkpoint)
            payload = line + b"\n" + cp_line + b"\n"
            _append_all_or_nothing(fd, payload, size, self.path)
            self._save_state(size + len(payload), tail.count + 2, line, cp_line, frontier_before_checkpoint)
        except AuditWriteError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise AuditWriteError(f"cannot write the audit trail {self.path} ({type(exc).__name__}); "
                                  "the action was not performed") from None
        finally:
            os.close(fd)  # closing the descriptor releases the lock
        self.last_checkpoint = checkpoint
        return record

    def recent_records(self, max_bytes: int) -> list[dict[str, Any]]:
        """The parsed records among the last ``max_bytes`` of the trail (whole records only: a record the window
        starts inside is left out), as :meth:`records` parses them. Bounded work however long the trail has grown."""
        try:
            with self.path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                start = max(0, size - max_bytes)
                f.seek(max(0, start - 1))  # the byte before: a newline there means the window starts a record
                data = f.read()
        except FileNotFoundError:
            return []
        if start > 0:
            cut = data.find(b"\n")
            data = data[cut + 1:] if cut >= 0 else b""
        return _parsed(_split_lines(data, self.path))

    def records(self) -> list[dict[str, Any]]:
        """Parsed records (for display; ``audit verify`` is what checks them). A line that is not a JSON object
        (garbled or tampered with) is left out, as an unparseable one is: ``audit verify`` names it."""
        return _parsed(read_lines(self.path))


def _parsed(lines: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def _append_all_or_nothing(fd: int, payload: bytes, good_size: int, path: Path) -> None:
    """Write ``payload`` at the end and fsync it, or leave the file exactly ``good_size`` bytes long.

    A full disk (ENOSPC), a file size limit (EFBIG) or a short write must not leave half a record: every later
    append would then refuse to sign over a damaged trail. On any failure the file is truncated back to the
    last good offset and fsynced before the error propagates; if even that fails, the partial record is left
    for `medhelm-local audit repair` (RUNBOOK: "Audit trail: repairing a failed append").
    """
    try:
        write_all(fd, payload)
        os.fsync(fd)
    except OSError as exc:
        try:
            os.ftruncate(fd, good_size)
            os.fsync(fd)
        except OSError:
            raise AuditWriteError(
                f"cannot write the audit trail {path} ({exc.strerror or type(exc).__name__}) and could not "
                "undo the partial record; the action was not performed. Free space, then run `medhelm-local "
                "audit repair` (RUNBOOK: repairing a failed append)") from None
        raise AuditWriteError(f"cannot write the audit trail {path} ({exc.strerror or type(exc).__name__}); the "
                              "trail was left as it was and the action was not performed") from None


@dataclass(frozen=True)
class RecordedState:
    """What the last successful append recorded in ``audit.jsonl.state``: the trail's size and record count,
    and the hash of its last record."""

    size: int
    count: int
    last_hash: str


def state_path_for(trail: Path) -> Path:
    return trail.with_name(trail.name + ".state")


def read_state(path: Path) -> RecordedState | None:
    """The state file's record count (None when there is none or it cannot be read)."""
    try:
        state = json.loads(path.read_bytes())
        return RecordedState(size=int(state["size"]), count=int(state["count"]), last_hash=str(state["last_hash"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _tail_problem(last_line: bytes, before_line: bytes | None, count: int, merkle_before_last: MerkleAccumulator,
                  public_key: Ed25519PublicKey) -> str | None:
    try:
        last = json.loads(last_line)
    except ValueError:
        return f"record {count} is not JSON"
    if not isinstance(last, dict) or last.get("action") != CHECKPOINT_ACTION or last.get("seq") != count:
        return f"record {count} is not the signed checkpoint that must end the trail"
    checkpoint = last.get("objects") or {}
    if checkpoint.get("tree_size") != count - 1:
        return f"checkpoint {count} does not cover the records before it"
    if not checkpoint_signature_ok(checkpoint, public_key):
        return f"checkpoint {count} has an invalid signature"
    if checkpoint.get("root") != merkle_before_last.root().hex():
        return f"checkpoint {count} does not match the records before it"
    if before_line is not None:
        try:
            event = json.loads(before_line)
        except ValueError:
            return f"record {count - 1} is not JSON"
        if (checkpoint.get("chain_head") != line_hash(before_line) or not isinstance(event, dict)
                or checkpoint_line(count, event, before_line, checkpoint) != last_line):
            return f"checkpoint {count} does not match record {count - 1}"
    return None


def audit_event(home: Any, actor: str, action: str, *, outcome: str = "success", role: str = "operator",
                **objects: Any) -> dict[str, Any]:
    """Append one record to the home's audit trail (fail closed: raises :class:`AuditWriteError`)."""
    return AuditTrail(home.audit_path, home.keys_dir).append(actor=actor, action=action, outcome=outcome, role=role,
                                                             objects=objects)
