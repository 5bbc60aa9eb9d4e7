"""``keys recover``: replacing a lost key on purpose, audited, keeping what the old key protected.

``init`` never replaces a missing key while data that needs it exists (``ensure_keys``). When a key is truly
lost (restoring it from backup is always better), recovery is explicit:

* signing key: the trail it signed is archived beside the trail, with its state file, and the old public key
  kept as ``signing-ed25519.pub.pem.retired-<time>``, so the old trail still verifies against the key the
  compliance officer pinned. A new key pair is made and a new trail starts; its first record (``keys.recover``)
  names the archived trail, its record count, its last record's hash and both keys' fingerprints. The new
  fingerprint must be pinned again: until then ``doctor`` and ``audit verify`` report the key as not the
  pinned one, so a recovery never goes unnoticed.
* data key: the store it encrypted is set aside (``<store>.lost-<time>``, still encrypted, in case the key turns
  up), a new key is created and the next registration starts an empty store; audited before and after.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel

from medhelm_local.errors import BadInputError
from medhelm_local.home.keys import (
    DATA_KEY_FILE,
    PUBLIC_KEY_FILE,
    SIGNING_KEY_FILE,
    KeyError_,
    load_public_key,
    load_signing_key,
    new_data_key,
    new_signing_key_pem,
    public_key_pem,
    write_secret_file,
)
from medhelm_local.home.layout import Home, atomic_write


class SigningRecovery(BaseModel):
    archived_trail: str | None
    archived_records: int
    archived_head: str | None
    archived_public_key: str | None
    old_key_fingerprint: str | None
    new_key_fingerprint: str


class DataKeyRecovery(BaseModel):
    moved_store: str | None
    new_key_id: str


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def _old_fingerprint(keys_dir: Path, lines: list[bytes]) -> str | None:
    from medhelm_local.audit.anchor import fingerprint, key_id_fingerprint

    with suppress(KeyError_):
        return fingerprint(load_public_key(keys_dir / PUBLIC_KEY_FILE))
    for line in reversed(lines):  # no public key file either: the last checkpoint names the key's digest
        with suppress(ValueError, KeyError, TypeError, AttributeError):
            return key_id_fingerprint(json.loads(line)["objects"]["key_id"])
    return None


def recover_signing_key(home: Home, actor: str) -> SigningRecovery:
    from medhelm_local.audit.anchor import fingerprint
    from medhelm_local.audit.trail import audit_event, line_hash, state_path_for

    keys_dir = home.keys_dir
    if (keys_dir / SIGNING_KEY_FILE).exists():
        raise BadInputError(f"{keys_dir / SIGNING_KEY_FILE} is present: there is no lost signing key to recover")
    trail = home.audit_path
    stamp = _stamp()
    archived: Path | None = None
    lines: list[bytes] = []
    if trail.exists():
        fd = os.open(trail, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # no append is half-way while the trail is moved
            data = os.pread(fd, os.fstat(fd).st_size, 0)
            lines = [line for line in data.split(b"\n") if line]
            if data:
                archived = trail.with_name(f"{trail.name}.archived-{stamp}")
                os.rename(trail, archived)
                state = state_path_for(trail)
                if state.exists():
                    os.rename(state, state_path_for(archived))
        finally:
            os.close(fd)
    old = _old_fingerprint(keys_dir, lines)
    retired: Path | None = None
    public_path = keys_dir / PUBLIC_KEY_FILE
    if public_path.exists():
        retired = public_path.with_name(f"{PUBLIC_KEY_FILE}.retired-{stamp}")
        os.rename(public_path, retired)
    if not write_secret_file(keys_dir / SIGNING_KEY_FILE, new_signing_key_pem()):
        raise BadInputError(f"{keys_dir / SIGNING_KEY_FILE} appeared while recovering; nothing more was changed")
    private = load_signing_key(keys_dir)
    atomic_write(public_path, public_key_pem(private))
    new = fingerprint(private.public_key())
    result = SigningRecovery(
        archived_trail=archived.name if archived else None, archived_records=len(lines),
        archived_head=line_hash(lines[-1]) if lines else None,
        archived_public_key=retired.name if retired else None, old_key_fingerprint=old, new_key_fingerprint=new)
    audit_event(home, actor, "keys.recover", role="it-admin", key="signing", previous_trail=result.archived_trail,
                previous_records=result.archived_records, previous_head=result.archived_head,
                previous_public_key=result.archived_public_key, previous_key_fingerprint=old,
                new_key_fingerprint=new)
    return result


def recover_data_key(home: Home, actor: str) -> DataKeyRecovery:
    from medhelm_local.audit.intents import announce
    from medhelm_local.store.rekey import data_key_id

    keys_dir = home.keys_dir
    if (keys_dir / DATA_KEY_FILE).exists():
        raise BadInputError(f"{keys_dir / DATA_KEY_FILE} is present: there is no lost data key to recover")
    store = home.store_path
    moved = store.with_name(f"{store.name}.lost-{_stamp()}") if store.exists() else None
    with announce(home, actor, "keys.recover", role="it-admin", key="store-data",
                  moved_store=moved.name if moved else None) as attempt:
        if moved is not None:
            os.rename(store, moved)
            wal = store.with_name(store.name + ".wal")
            if wal.exists():
                os.rename(wal, moved.with_name(moved.name + ".wal"))
        key = new_data_key()
        if not write_secret_file(keys_dir / DATA_KEY_FILE, key):
            raise BadInputError(f"{keys_dir / DATA_KEY_FILE} appeared while recovering; nothing more was changed")
        result = DataKeyRecovery(moved_store=moved.name if moved else None, new_key_id=data_key_id(key.decode()))
        attempt.conclude(key="store-data", moved_store=result.moved_store, new_key_id=result.new_key_id)
    return result
