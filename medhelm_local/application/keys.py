"""Use cases on the appliance's keys: rotate the store's data key (re-encrypt the whole store), hand out the
signing public key, replace a lost key. Each is audited here; the store's rotation (store/rekey.py) knows no
audit and reports its point of no return through a callback."""

from __future__ import annotations

import contextlib
from enum import StrEnum
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from medhelm_local.audit.anchor import fingerprint
from medhelm_local.audit.trail import AuditWriteError, audit_event, key_id
from medhelm_local.context import AppContext
from medhelm_local.errors import BadInputError
from medhelm_local.home.keys import PUBLIC_KEY_FILE, load_public_key
from medhelm_local.home.layout import atomic_write
from medhelm_local.home.recover import DataKeyRecovery, SigningRecovery, recover_data_key, recover_signing_key
from medhelm_local.phi_text import recorded_name
from medhelm_local.store.rekey import RotationResult, rotate_data_key


def rotate_store_key(app_ctx: AppContext, new_key: str | None = None) -> RotationResult:
    """Re-encrypt the store under ``new_key`` (64 hex characters, kept safely by the operator) or a generated
    one, then retire the old key. Audited: the intent before the point of no return (fail closed: without that
    record nothing is swapped), the failure of any step, the outcome."""
    home = app_ctx.home
    intents: list[dict[str, Any]] = []

    def intent(old_id: str, new_id: str) -> None:
        intents.append(audit_event(home, app_ctx.actor, "keys.rotate", outcome="started", role="it-admin",
                                   key="store-data", old_key_id=old_id, new_key_id=new_id))

    try:
        result = rotate_data_key(home.store_path, home.keys_dir, on_point_of_no_return=intent, new_key=new_key)
    except BaseException as exc:
        with contextlib.suppress(AuditWriteError):  # a failure before the point of no return announced nothing
            audit_event(home, app_ctx.actor, "keys.rotate", outcome="failure", role="it-admin", key="store-data",
                        error_type=type(exc).__name__, intent_seq=intents[0]["seq"] if intents else None)
        raise
    audit_event(home, app_ctx.actor, "keys.rotate", role="it-admin", key="store-data",
                old_key_id=result.old_key_id, new_key_id=result.new_key_id, tables=len(result.tables),
                rows=sum(result.tables.values()), intent_seq=intents[0]["seq"] if intents else None)
    return result


class PublicKeyFormat(StrEnum):
    """How ``keys export-public`` writes the key: PEM (SubjectPublicKeyInfo, as the home keeps it) or one OpenSSH
    ``ssh-ed25519 AAAA... medhelm-appliance`` line (``ssh-keygen -i -m PKCS8`` cannot convert an Ed25519 PEM key)."""

    PEM = "pem"
    OPENSSH = "openssh"


OPENSSH_COMMENT = "medhelm-appliance"


def export_public_key(app_ctx: AppContext, out: Path, form: PublicKeyFormat = PublicKeyFormat.PEM) -> str:
    """Write the signing public key to ``out`` for verifiers elsewhere, in ``form``; audited first. Returns its
    fingerprint (``SHA256:...``, as ``init`` printed it: the same in either form)."""
    source = app_ctx.home.keys_dir / PUBLIC_KEY_FILE
    public = load_public_key(source)
    if out.is_dir():
        raise BadInputError(f"--out: {out} is a directory; give a file name")
    app_ctx.home.refuse_output(out, "--out")
    printed = fingerprint(public)
    audit_event(app_ctx.home, app_ctx.actor, "keys.export_public", role="compliance", key_id=key_id(public),
                key_fingerprint=printed, format=form.value, destination=recorded_name(out.name))
    content = (source.read_bytes() if form is PublicKeyFormat.PEM
               else public.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH) + f" {OPENSSH_COMMENT}\n".encode())
    atomic_write(out, content, mode=0o644)
    return printed


def recover_lost_signing_key(app_ctx: AppContext) -> SigningRecovery:
    """The signing key is lost: archive its trail, start a new one under a new key (audited in both)."""
    return recover_signing_key(app_ctx.home, app_ctx.actor)


def recover_lost_data_key(app_ctx: AppContext) -> DataKeyRecovery:
    """The data key is lost: set the unreadable store aside, create a new key for a new store (audited)."""
    return recover_data_key(app_ctx.home, app_ctx.actor)
