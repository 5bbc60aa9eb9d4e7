"""``init`` and ``doctor``: create an appliance home and check it is usable."""

from __future__ import annotations

import os
import stat

import typer

from medhelm_local.audit import audit_event
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import app_context
from medhelm_local.errors import MedhelmError
from medhelm_local.home.keys import DATA_KEY_FILE, SIGNING_KEY_FILE


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("doctor")(doctor)


def init(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Create the appliance home: appliance.yaml, signing key, store data key. Never overwrites keys."""
    app = app_context(ctx)
    result = app.home.init()
    audit_event(app.home, app.actor, "appliance.init", role="it-admin",
                created=sorted(result.created), kept=sorted(result.kept))
    if as_json:
        emit_json({"home": str(result.home), "created": result.created, "kept": result.kept})
        return
    info(f"appliance home: {result.home}")
    for name in result.created:
        info(f"  created {name}")
    for name in result.kept:
        info(f"  kept    {name} (already present)")


def doctor(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Check that the home's config, keys and store are usable (exit 0 only if all are)."""
    from medhelm_local.store import Store

    app = app_context(ctx)
    checks: list[dict[str, str]] = []

    def check(name: str, fn: object) -> None:
        try:
            detail = fn() if callable(fn) else ""
            checks.append({"check": name, "status": "ok", "detail": str(detail or "")})
        except MedhelmError as exc:
            checks.append({"check": name, "status": "fail", "detail": str(exc)})
        except OSError as exc:
            checks.append({"check": name, "status": "fail", "detail": f"{type(exc).__name__}: {exc.strerror}"})

    check("config", lambda: f"{len(app.home.config.models)} model(s), {len(app.home.config.judges)} judge(s)")

    def keys() -> str:
        for name in (SIGNING_KEY_FILE, DATA_KEY_FILE):
            mode = stat.S_IMODE(os.stat(app.home.keys_dir / name).st_mode)
            if mode & 0o077:
                raise MedhelmError(f"{name} has mode {mode:o}; expected 0600 or 0400")
        return str(app.home.keys_dir)

    check("keys", keys)

    from medhelm_local.loaders.sql_sandbox import sandbox_probe

    check("SQL sandbox", sandbox_probe)

    def store() -> str:
        with Store.open(app.home):
            return str(app.home.store_path)

    if all(c["status"] == "ok" for c in checks):
        check("store", store)
    ok = all(c["status"] == "ok" for c in checks)
    if as_json:
        emit_json({"ok": ok, "checks": checks})
    else:
        emit_table("medhelm-local doctor", ["check", "status", "detail"],
                   [[c["check"], c["status"], c["detail"]] for c in checks])
    if not ok:
        raise typer.Exit(1)
