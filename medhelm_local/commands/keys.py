"""``keys``: the appliance's keys: show their ids, export the public key, rotate the store's data key."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from medhelm_local.application.keys import (
    OPENSSH_COMMENT,
    PublicKeyFormat,
    export_public_key,
    recover_lost_data_key,
    recover_lost_signing_key,
    rotate_store_key,
)
from medhelm_local.audit.anchor import FINGERPRINT_ENV, fingerprint
from medhelm_local.audit.trail import key_id
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import app_context
from medhelm_local.errors import BadInputError
from medhelm_local.home.keys import (
    PUBLIC_KEY_FILE,
    VERIFIER_KEY_NAME,
    VERIFIER_OPENSSH_KEY_NAME,
    load_data_key,
    load_public_key,
)
from medhelm_local.store.connection import StoreError
from medhelm_local.store.rekey import check_new_data_key, data_key_id

NAME = "keys"
HELP = "Manage the appliance's keys (rotation re-encrypts the store; recovery replaces a lost key, audited)."
app = typer.Typer(no_args_is_help=True)


@app.command("show")
def show(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Show where the keys live and their public ids (never the keys)."""
    home = app_context(ctx).home
    public = load_public_key(home.keys_dir / PUBLIC_KEY_FILE)
    payload = {"keys_dir": str(home.keys_dir), "store": str(home.store_path),
               "signing_key_fingerprint": fingerprint(public), "signing_key_id": key_id(public),
               "data_key_id": data_key_id(load_data_key(home.keys_dir))}
    if as_json:
        emit_json(payload)
        return
    # signing_key_id (hex) stays in --json for scripts; people compare the fingerprint `init` printed.
    emit_table("keys", ["item", "value"], [[k, v] for k, v in payload.items() if k != "signing_key_id"])


@app.command("export-public")
def export_public(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", help="Where to write the Ed25519 public key for verifiers; the "
                             f"documents call it {VERIFIER_KEY_NAME} (PEM) or {VERIFIER_OPENSSH_KEY_NAME} "
                             "(OpenSSH)."),
    form: PublicKeyFormat = typer.Option(PublicKeyFormat.PEM, "--format", help="pem (-----BEGIN PUBLIC KEY-----) "
                                         f"or openssh (one line: ssh-ed25519 AAAA... {OPENSSH_COMMENT})."),
) -> None:
    """Write the signing public key, for `audit verify --public-key FILE` and `export verify --public-key FILE`
    elsewhere (either format works there)."""
    written = export_public_key(app_context(ctx), out, form)
    # The form `init` printed and FINGERPRINT_ENV pins, so a verifier can check they hold the pinned key.
    info(f"public key {written} written to {out}")


@app.command("rotate")
def rotate(
    ctx: typer.Context,
    new_key_file: Path | None = typer.Option(
        None, "--new-key-file", help="Use this new data key (64 hex characters; '-' or /dev/stdin reads it from "
        "standard input) instead of generating one: store it safely first (a new Secret, the vault), so the "
        "re-encrypted store never depends on a key that exists only in this home."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Rotate the store's data key: re-encrypt the whole store under a new key, then retire the old one."""
    app_ctx = app_context(ctx)
    new_key: str | None = None
    if new_key_file is not None:
        source = "--new-key-file"
        try:
            raw = sys.stdin.read() if str(new_key_file) == "-" else new_key_file.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError):
            raise BadInputError(f"{source}: cannot read {new_key_file}") from None
        try:
            new_key = check_new_data_key(raw, source)
        except StoreError as exc:
            raise BadInputError(str(exc)) from None
    result = rotate_store_key(app_ctx, new_key)
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
        signing = recover_lost_signing_key(app_ctx)
        payload = signing.model_dump()
        if not as_json:
            info(f"the old trail ({signing.archived_records} records, key {signing.old_key_fingerprint}) was moved "
                 f"to {signing.archived_trail}; verify it with the old public key ({signing.archived_public_key})")
            info("a new trail was started under a new signing key; its first record names the old trail's head")
            sys.stdout.write(f"audit signing key fingerprint: {signing.new_key_fingerprint}\n")
            info(f"  the compliance officer must re-pin it: {FINGERPRINT_ENV}={signing.new_key_fingerprint}; "
                 "until then `doctor` and `audit verify` report the key as not the pinned one")
    else:
        data = recover_lost_data_key(app_ctx)
        payload = data.model_dump()
        if not as_json:
            info(f"the unreadable store was set aside as {data.moved_store}; a new data key ({data.new_key_id}) "
                 "was created and the next registration starts a new, empty store")
    if as_json:
        emit_json(payload)
