"""Verifying an audit trail with the public key only: chain, sequence, Merkle roots, signatures.

Every problem is attributed to a sequence number; the report names the first. An edited record breaks the
next record's ``prev`` and the checkpoint right after it (which names its hash); a deleted, inserted or
reordered record breaks the sequence; a forged or altered checkpoint fails its signature; a truncated tail
is caught against the record count ``audit.jsonl.state`` recorded at the last append, and against a previously
exported checkpoint (``audit checkpoint --export``), which must still match the first ``tree_size`` records of
the trail. The key itself is checked against the one pinned outside the home (``audit/anchor.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, ValidationError

from medhelm_local.audit.anchor import FINGERPRINT_ENV, PUBKEY_FILE_ENV, Anchor, fingerprint, pinned_anchor
from medhelm_local.audit.merkle import MerkleAccumulator
from medhelm_local.audit.trail import (
    CHECKPOINT_ACTION,
    CHECKPOINT_SCHEMA,
    GENESIS,
    RecordedState,
    checkpoint_line,
    checkpoint_signature_ok,
    key_id,
    line_hash,
    read_state,
    state_path_for,
)
from medhelm_local.errors import BadInputError
from medhelm_local.home.keys import PUBLIC_KEY_FILE, load_public_key

STATE_NAME = "audit.jsonl.state"
REQUIRED_FIELDS = ("seq", "ts", "actor", "role", "action", "objects", "outcome", "host", "prev")


class ExportedCheckpoint(BaseModel):
    """A checkpoint kept outside the appliance (``audit checkpoint --out``)."""

    model_config = ConfigDict(extra="ignore")

    schema_: str
    tree_size: int
    root: str
    chain_head: str
    key_id: str
    signature: str

    @classmethod
    def load(cls, path: Path) -> ExportedCheckpoint:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            raw = raw.get("checkpoint", raw) if isinstance(raw, dict) else raw
            if isinstance(raw, dict):
                raw = {**raw, "schema_": raw.get("schema")}
            checkpoint = cls.model_validate(raw)
        except FileNotFoundError:
            raise BadInputError(f"--checkpoint: {path} not found") from None
        except (ValueError, ValidationError, UnicodeDecodeError):
            raise BadInputError(f"--checkpoint: {path} is not an exported audit checkpoint (JSON)") from None
        if checkpoint.schema_ != CHECKPOINT_SCHEMA:
            raise BadInputError(f"--checkpoint: {path} has schema {checkpoint.schema_!r}, expected "
                                f"{CHECKPOINT_SCHEMA}")
        return checkpoint

    def as_dict(self) -> dict[str, Any]:
        return {"schema": self.schema_, "tree_size": self.tree_size, "root": self.root,
                "chain_head": self.chain_head, "key_id": self.key_id, "signature": self.signature}


class Problem(BaseModel):
    seq: int
    kind: str
    detail: str


class VerifyReport(BaseModel):
    intact: bool
    trail: str
    records: int
    checkpoints: int
    key_id: str
    first_bad_seq: int | None
    problems: list[Problem]
    last_checkpoint: dict[str, Any] | None
    external_checkpoint: dict[str, Any] | None
    fingerprint: str = ""
    anchored: bool = False  # checked against a key pinned outside the home (or named with --public-key)
    anchor_source: str | None = None
    state_count: int | None = None  # the record count audit.jsonl.state recorded, when it was read


def verify_lines(lines: list[bytes], public_key: Ed25519PublicKey, *, trail: str = "",
                 external: ExportedCheckpoint | None = None) -> VerifyReport:
    problems: list[Problem] = []
    merkle = MerkleAccumulator()
    roots: list[str] = []  # roots[n] = MTH of the first n lines
    hashes: list[str] = []  # hashes[i] = sha256 of line i+1
    roots.append(merkle.root().hex())
    checkpoints = 0
    last_checkpoint: dict[str, Any] | None = None
    last_checkpoint_at = 0
    previous_was_event = False
    previous_record: dict[str, Any] | None = None

    def add(seq: int, kind: str, detail: str) -> None:
        problems.append(Problem(seq=seq, kind=kind, detail=detail))

    for position, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError
        except ValueError:
            add(position, "unreadable", f"record {position} is not a JSON object")
            record = {}
        missing = [f for f in REQUIRED_FIELDS if f not in record]
        if record and missing:
            add(position, "malformed", f"record {position} lacks {', '.join(missing)}")
        seq = record.get("seq")
        if record and seq != position:
            add(position, "sequence", f"position {position} holds seq {seq}: a record was deleted, inserted or "
                "reordered")
        expected_prev = hashes[-1] if hashes else GENESIS
        if record and record.get("prev") != expected_prev:
            add(position, "chain", f"record {position} does not chain to the record before it")
        is_checkpoint = record.get("action") == CHECKPOINT_ACTION
        if is_checkpoint:
            checkpoints += 1
            cp = record.get("objects") if isinstance(record.get("objects"), dict) else {}
            assert isinstance(cp, dict)
            size = cp.get("tree_size")
            if not checkpoint_signature_ok(cp, public_key):
                add(position, "signature", f"checkpoint {position}: signature invalid or not made by key "
                    f"{fingerprint(public_key)}")
            elif not isinstance(size, int) or size != position - 1:
                add(position, "checkpoint", f"checkpoint {position} does not cover the record before it")
            else:
                signed_head = hashes[size - 1] if size else GENESIS
                if cp.get("chain_head") != signed_head:
                    add(size, "edited", f"record {size} differs from the one checkpoint {position} signed")
                if cp.get("root") != roots[size]:
                    add(size, "merkle", f"the first {size} records differ from those checkpoint {position} signed")
                if size and previous_record is not None and checkpoint_line(position, previous_record,
                                                                            lines[size - 1], cp) != line:
                    add(position, "edited", f"checkpoint record {position} was changed")
            if not previous_was_event:
                add(position, "sequence", f"checkpoint {position} follows no event record")
            last_checkpoint, last_checkpoint_at = cp, position
        elif previous_was_event:
            add(position - 1, "unsigned", f"record {position - 1} is not followed by its checkpoint")
        previous_was_event = bool(record) and not is_checkpoint
        previous_record = record if previous_was_event else None
        hashes.append(line_hash(line))
        merkle.add(line)
        roots.append(merkle.root().hex())

    if len(lines) > last_checkpoint_at:
        add(last_checkpoint_at + 1, "unsigned",
            f"records {last_checkpoint_at + 1}..{len(lines)} are not covered by a signed checkpoint")

    if external is not None:
        cp = external.as_dict()
        if not checkpoint_signature_ok(cp, public_key):
            add(0, "external-signature", "the exported checkpoint's signature is invalid for key "
                f"{fingerprint(public_key)}")
        elif external.tree_size > len(lines):
            add(len(lines) + 1, "truncated", f"the exported checkpoint covers {external.tree_size} records; the "
                f"trail has {len(lines)}: records from seq {len(lines) + 1} were removed")
        elif external.tree_size and (hashes[external.tree_size - 1] != external.chain_head
                                     or roots[external.tree_size] != external.root):
            add(external.tree_size, "rewritten", f"the first {external.tree_size} records differ from the "
                "exported checkpoint")

    problems.sort(key=lambda p: p.seq)
    return VerifyReport(
        intact=not problems, trail=trail, records=len(lines), checkpoints=checkpoints,
        key_id=key_id(public_key), fingerprint=fingerprint(public_key),
        first_bad_seq=problems[0].seq if problems else None, problems=problems,
        last_checkpoint=last_checkpoint, external_checkpoint=external.as_dict() if external else None,
    )


def state_problems(lines: list[bytes], state: RecordedState) -> list[Problem]:
    """Compare the trail with the record count and last hash its state file recorded at the last append."""
    if state.count > len(lines):
        return [Problem(seq=len(lines) + 1, kind="truncated",
                        detail=f"{STATE_NAME} records {state.count} records written; the trail has {len(lines)}: "
                        f"records from seq {len(lines) + 1} were removed")]
    if state.count and line_hash(lines[state.count - 1]) != state.last_hash:
        return [Problem(seq=state.count, kind="rewritten",
                        detail=f"record {state.count} differs from the one {STATE_NAME} recorded as written")]
    return []


def verify_file(path: Path, public_key: Ed25519PublicKey, *, external: ExportedCheckpoint | None = None,
                state: RecordedState | None = None, anchor: Anchor | None = None) -> VerifyReport:
    """Verify the trail at ``path`` (read only); ``state``: what ``audit.jsonl.state`` recorded; ``anchor``: the
    pinned key (the report says whether the key used is it)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BadInputError(f"no audit trail at {path}") from None
    lines = data.split(b"\n")
    partial = lines.pop() if lines else b""
    report_lines = [*lines, partial] if partial else lines
    report = verify_lines(report_lines, public_key, trail=str(path), external=external)
    extra: list[Problem] = []
    if partial:
        extra.append(Problem(seq=len(report_lines), kind="partial",
                             detail=f"record {len(report_lines)} is not terminated (partial write; see `audit "
                             "repair`)"))
    if state is not None:
        extra += state_problems(lines, state)
    if anchor is not None and not anchor.matches(public_key):
        extra.append(Problem(seq=0, kind="key", detail=f"the key used ({fingerprint(public_key)}) is not the "
                             f"pinned key {anchor.fingerprint} ({anchor.source})"))
    report.fingerprint = fingerprint(public_key)
    report.anchored = anchor is not None
    report.anchor_source = anchor.describe(public_key) if anchor is not None else None
    report.state_count = state.count if state is not None else None
    if extra:
        report.problems = sorted([*report.problems, *extra], key=lambda p: p.seq)
        report.intact = False
        report.first_bad_seq = report.problems[0].seq
    return report


def verify_with_pinned_key(path: Path, keys_dir: Path) -> tuple[VerifyReport, str]:
    """Verify the trail at ``path`` as ``audit verify`` does without options: against the pinned key (else the
    home's public key in ``keys_dir``, checked against a pinned fingerprint), and the record count its state file
    recorded; and say where the key came from."""
    anchor = pinned_anchor()
    if anchor is not None and anchor.public_key is not None:
        key, source = anchor.public_key, f"pinned key ({anchor.source})"
    else:
        key = load_public_key(keys_dir / PUBLIC_KEY_FILE)
        source = (f"the home's key, checked against the pinned fingerprint ({anchor.describe(key)})"
                  if anchor is not None
                  else "UNANCHORED: the home's own public key, which anyone who can rewrite the trail can replace; "
                  f"pin it outside the home ({FINGERPRINT_ENV} or {PUBKEY_FILE_ENV})")
    return verify_file(path, key, state=read_state(state_path_for(path)), anchor=anchor), source
