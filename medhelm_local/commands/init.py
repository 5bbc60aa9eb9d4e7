"""``init`` and ``doctor``: create an appliance home and check it is usable."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import typer

from medhelm_local.audit import audit_event
from medhelm_local.audit.anchor import (
    FINGERPRINT_ENV,
    PUBKEY_FILE_ENV,
    AnchorError,
    check_matches,
    fingerprint,
    pinned_anchor,
)
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import app_context
from medhelm_local.errors import MedhelmError
from medhelm_local.home import Home
from medhelm_local.home.keys import (
    DATA_KEY_FILE,
    PUBLIC_KEY_FILE,
    SIGNING_KEY_FILE,
    load_public_key,
    load_signing_key,
)


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("doctor")(doctor)


def init(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Create the appliance home: appliance.yaml, signing key, store data key. Never overwrites keys."""
    app = app_context(ctx)
    result = app.home.init()
    pinned = fingerprint(load_signing_key(app.home.keys_dir).public_key())
    audit_event(app.home, app.actor, "appliance.init", role="it-admin",
                created=sorted(result.created), kept=sorted(result.kept), key_fingerprint=pinned)
    if as_json:
        emit_json({"home": str(result.home), "created": result.created, "kept": result.kept,
                   "audit_key_fingerprint": pinned})
        return
    info(f"appliance home: {result.home}")
    for name in result.created:
        info(f"  created {name}")
    for name in result.kept:
        info(f"  kept    {name} (already present)")
    # Printed on stdout for the compliance officer to record outside the appliance.
    sys.stdout.write(f"audit signing key fingerprint: {pinned}\n")
    info(f"  record it outside the appliance and pin it: {FINGERPRINT_ENV}={pinned} (in Kubernetes, a ConfigMap "
         "or Secret the appliance cannot write); `audit verify` and `doctor` then check the trail against it")


def doctor(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Check that the home's config, keys, pinned audit key, file modes and store are usable (exit 0 only if all
    are). Read only: it never takes the store's write lock, so it works while a run holds the store."""
    app = app_context(ctx)
    checks: list[dict[str, str]] = []

    def check(name: str, fn: Callable[[], tuple[str, str] | str]) -> None:
        try:
            outcome = fn()
            status, detail = outcome if isinstance(outcome, tuple) else ("ok", outcome)
            checks.append({"check": name, "status": status, "detail": detail})
        except MedhelmError as exc:
            checks.append({"check": name, "status": "fail", "detail": str(exc)})
        except OSError as exc:  # named by its file, as every other failure is
            where = f"{exc.filename}: " if exc.filename else ""
            checks.append({"check": name, "status": "fail",
                           "detail": f"{where}{type(exc).__name__}: {exc.strerror}"})

    check("config", lambda: f"{len(app.home.config.models)} model(s), {len(app.home.config.judges)} judge(s)")

    def keys() -> str:
        for name in (SIGNING_KEY_FILE, DATA_KEY_FILE):
            mode = stat.S_IMODE(os.stat(app.home.keys_dir / name).st_mode)
            if mode & 0o077:
                raise MedhelmError(f"{name} has mode {mode:o}; expected 0600 or 0400")
        return str(app.home.keys_dir)

    check("keys", keys)
    check("pinned audit key", lambda: pinned_key_status(app.home))
    check("file modes", lambda: file_modes_status(app.home))

    from medhelm_local.loaders.sql_sandbox import sandbox_probe

    check("SQL sandbox", sandbox_probe)

    def store() -> str:
        from medhelm_local.store import Store

        path = app.home.store_path
        if not path.exists():
            return f"{path} (not created yet: the first registration creates it)"
        # Read only, with the bounded lock wait: a health check never takes the write lock (a run keeps it only
        # for short write transactions), so it does not migrate a store an upgrade left behind either.
        with Store.open_file(app.home, path, read_only=True, migrate=False) as opened:
            opened.probe()
            current = opened.schema_is_current()
        if not current:
            return (f"{path} (opened read-only; last migrated by another release, before an upgrade or a "
                    "rollback: the next command that opens it migrates it, once)")
        return f"{path} (opened read-only)"

    if all(c["status"] != "fail" for c in checks):
        check("store", store)
    ok = all(c["status"] != "fail" for c in checks)
    if as_json:
        emit_json({"ok": ok, "checks": checks})
    else:
        emit_table("medhelm-local doctor", ["check", "status", "detail"],
                   [[c["check"], c["status"], c["detail"]] for c in checks])
    if not ok:
        raise typer.Exit(1)


def pinned_key_status(home: Home) -> tuple[str, str]:
    """The signing private key must be the key pinned outside the home, and the home's public key its own."""
    private = load_signing_key(home.keys_dir)
    own = fingerprint(private.public_key())
    public_file = load_public_key(home.keys_dir / PUBLIC_KEY_FILE)
    if fingerprint(public_file) != own:
        raise AnchorError(f"{PUBLIC_KEY_FILE} ({fingerprint(public_file)}) is not the public half of "
                          f"{SIGNING_KEY_FILE} ({own})")
    anchor = pinned_anchor()
    if anchor is None:
        return "warn", (f"not pinned: record {own} outside the appliance and set {FINGERPRINT_ENV} (or "
                        f"{PUBKEY_FILE_ENV}); until then a replaced key pair goes unnoticed")
    check_matches(private.public_key(), anchor, what=f"the signing key {SIGNING_KEY_FILE}")
    return "ok", f"{own} matches {anchor.describe(private.public_key())}"


def file_modes_status(home: Home) -> tuple[str, str]:
    """Everything the appliance writes is 0600/0700: anything others can reach fails; group access (which a
    Kubernetes fsGroup adds to a volume's files) is reported."""
    roots = {home.root, home.store_path.parent, home.audit_path.parent, home.exports_dir, home.reports_dir}
    if os.environ.get("MEDHELM_KEYS_DIR"):
        mounted = home.keys_dir  # a mounted Secret: its modes are the mount's (the keys item checks the files)
    else:
        mounted = None
        roots.add(home.keys_dir)
    world: list[str] = []
    group: list[str] = []
    seen: set[Path] = set()
    for root in sorted(roots):
        if not root.exists():
            continue
        for folder, dirs, files in os.walk(root):
            here = Path(folder)
            if mounted is not None and (here == mounted or mounted in here.parents):
                dirs[:] = []
                continue
            for entry in [here, *(here / f for f in files)]:
                try:
                    st = entry.lstat()
                except OSError:
                    continue
                if stat.S_ISLNK(st.st_mode) or entry in seen:
                    continue
                seen.add(entry)
                label = f"{entry} {stat.S_IMODE(st.st_mode):o}"
                if st.st_mode & 0o007:
                    world.append(label)
                elif st.st_mode & 0o070:
                    group.append(label)
    if world:
        raise MedhelmError(f"{len(world)} path(s) accessible to other users (expected 0600/0700): "
                           + ", ".join(world[:5]) + (" ..." if len(world) > 5 else ""))
    if group:
        return "warn", (f"{len(group)} path(s) group-accessible (a Kubernetes fsGroup does this; expected "
                        "0600/0700 otherwise): " + ", ".join(group[:5]) + (" ..." if len(group) > 5 else ""))
    return "ok", f"{len(seen)} path(s) 0600/0700"
