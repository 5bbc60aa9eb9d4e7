"""``keys``: the appliance's keys: show their ids, export the public key, rotate the store's data key."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import typer

from medhelm_local.audit.anchor import FINGERPRINT_ENV
from medhelm_local.audit.trail import AuditWriteError, audit_event, key_id
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import app_context
from medhelm_local.errors import BadInputError
from medhelm_local.home.keys import PUBLIC_KEY_FILE, load_data_key, load_public_key
from medhelm_local.home.layout import atomic_write
from medhelm_local.home.recover import recover_data_key, recover_signing_key
from medhelm_local.store.rekey import data_key_id, rotate_data_key

NAME = "keys"
HELP = "Manage the appliance's keys (rotation re-encrypts the store; recovery replaces a lost key, audited)."
app = typer.Typer(no_args_is_help=True)


@app.command("show")
def show(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Show where the keys live and their public ids (never the keys)."""
    home = app_context(ctx).home
    public = load_public_key(home.keys_dir / PUBLIC_KEY_FILE)
    payload = {"keys_dir": str(home.keys_dir), "store": str(home.store_path),
               "signing_key_id": key_id(public), "data_key_id": data_key_id(load_data_key(home.keys_dir))}
    if as_json:
        emit_json(payload)
        return
    emit_table("keys", ["item", "value"], [[k, v] for k, v in payload.items()])


@app.command("export-public")
def export_public(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", help="Where to write the Ed25519 public key (PEM) for verifiers."),
) -> None:
    """Write the signing public key, for `audit verify --public-key` and `export verify` elsewhere."""
    app_ctx = app_context(ctx)
    source = app_ctx.home.keys_dir / PUBLIC_KEY_FILE
    public = load_public_key(source)
    if out.is_dir():
        raise BadInputError(f"--out: {out} is a directory; give a file name")
    audit_event(app_ctx.home, app_ctx.actor, "keys.export_public", role="compliance", key_id=key_id(public),
                destination=out.name)
    atomic_write(out, source.read_bytes(), mode=0o644)
    info(f"public key {key_id(public)[:16]} written to {out}")


@app.command("rotate")
def rotate(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Rotate the store's data key: re-encrypt the whole store under a new key, then retire the old one."""
    app_ctx = app_context(ctx)
    home = app_ctx.home

    def intent(old_id: str, new_id: str) -> None:
        # Fail closed: without this record the swap does not happen.
        audit_event(home, app_ctx.actor, "keys.rotate", outcome="started", role="it-admin", key="store-data",
                    old_key_id=old_id, new_key_id=new_id)

    try:
        result = rotate_data_key(home.store_path, home.keys_dir, on_point_of_no_return=intent)
    except BaseException as exc:
        with contextlib.suppress(AuditWriteError):
            audit_event(home, app_ctx.actor, "keys.rotate", outcome="failure", role="it-admin", key="store-data",
                        error_type=type(exc).__name__)
        raise
    audit_event(home, app_ctx.actor, "keys.rotate", role="it-admin", key="store-data",
                old_key_id=result.old_key_id, new_key_id=result.new_key_id, tables=len(result.tables),
                rows=sum(result.tables.values()))
    if as_json:
        emit_json(result.model_dump())
    else:
        info(f"store re-encrypted under data key {result.new_key_id} ({sum(result.tables.values())} rows in "
             f"{len(result.tables)} tables); old key {result.old_key_id} retired")


@app.command("recover")
def recover(
    ctx: typer.Context,
    signing_key: bool = typer.Option(False, "--signing-key", help="The signing key is lost: archive the trail it "
                                     "signed (still verifiable with its public key) and start a new trail under a "
                                     "new key, whose first record names the old trail's head."),
    data_key: bool = typer.Option(False, "--data-key", help="The store's data key is lost: set the unreadable "
                                  "store aside (kept, encrypted) and create a new key for a new, empty store."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Replace a LOST key explicitly, audited (init never does). Restoring the key from backup is better."""
    app_ctx = app_context(ctx)
    if signing_key == data_key:
        raise BadInputError("give exactly one of --signing-key or --data-key")
    if signing_key:
        signing = recover_signing_key(app_ctx.home, app_ctx.actor)
        payload = signing.model_dump()
        if not as_json:
            info(f"the old trail ({signing.archived_records} records, key {signing.old_key_fingerprint}) was moved "
                 f"to {signing.archived_trail}; verify it with the old public key ({signing.archived_public_key})")
            info("a new trail was started under a new signing key; its first record names the old trail's head")
            sys.stdout.write(f"audit signing key fingerprint: {signing.new_key_fingerprint}\n")
            info(f"  the compliance officer must re-pin it: {FINGERPRINT_ENV}={signing.new_key_fingerprint}; "
                 "until then `doctor` and `audit verify` report the key as not the pinned one")
    else:
        data = recover_data_key(app_ctx.home, app_ctx.actor)
        payload = data.model_dump()
        if not as_json:
            info(f"the unreadable store was set aside as {data.moved_store}; a new data key ({data.new_key_id}) "
                 "was created and the next registration starts a new, empty store")
    if as_json:
        emit_json(payload)
