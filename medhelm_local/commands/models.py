"""``models add`` / ``models list``: the endpoints the appliance may query."""

from __future__ import annotations

from typing import Any

import typer
from pydantic import ValidationError

from medhelm_local.audit import audit_event
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import app_context
from medhelm_local.errors import BadInputError, ConfigError, EgressDenied, validation_problems
from medhelm_local.home.config import ApplianceConfig, BackendKind, ModelEndpoint

NAME = "models"
HELP = "Models under test and judges: add and list endpoints."
app = typer.Typer(no_args_is_help=True)
_OPTIONS = {"name": "NAME", "kind": "--kind", "base_urls": "--base-url", "served_model": "--served-model",
            "reply_model": "--reply-model", "api_key_env": "--api-key-env", "context_length": "--context-length"}


@app.command("add")
def add(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="Name used in `run --model` and in reports."),
    base_url: list[str] = typer.Option(
        [], "--base-url", help="OpenAI-compatible base URL ending in /v1; repeat for replicas."
    ),
    kind: BackendKind = typer.Option(BackendKind.OPENAI_COMPATIBLE, "--kind", help="Backend kind."),
    served_model: str | None = typer.Option(None, "--served-model", help="Model id the server expects."),
    reply_model: str | None = typer.Option(None, "--reply-model", help="Model name the server's replies carry, "
                                           "where not the one asked for (a reply naming another is a failure)."),
    api_key_env: str | None = typer.Option(None, "--api-key-env", help="Env var holding the API key."),
    context_length: int | None = typer.Option(None, "--context-length", min=256, help="The model's context in "
                                              "tokens (prompts are fitted into it) [default: what the server "
                                              "reports, else 2048]."),
    judge: bool = typer.Option(False, "--judge", help="Also use this model as a jury member."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Add a model endpoint to appliance.yaml. Its URL must be on the endpoint allowlist."""
    app_ctx = app_context(ctx)
    config = app_ctx.home.config
    if any(m.name == name for m in config.models):
        raise BadInputError(f"model {name!r} already exists in {app_ctx.home.config_path}")
    try:
        endpoint = ModelEndpoint(name=name, kind=kind, base_urls=base_url, served_model=served_model,
                                 reply_model=reply_model, api_key_env=api_key_env, context_length=context_length)
    except ValidationError as exc:
        raise BadInputError(f"models add: {validation_problems(exc, _OPTIONS)}") from None
    for url in endpoint.base_urls:
        try:
            app_ctx.egress.check(url)
        except EgressDenied:
            audit_event(app_ctx.home, app_ctx.actor, "config.model_add", outcome="denied", role="it-admin",
                        model=name, reason="endpoint_not_allowlisted")
            raise
    data = config.model_dump()
    data["models"].append(endpoint.model_dump())
    if judge:
        data["judges"].append(name)
    try:
        updated = ApplianceConfig.model_validate(data)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    audit_event(app_ctx.home, app_ctx.actor, "config.model_add", role="it-admin", model=name, kind=kind.value,
                endpoints=endpoint.base_urls, judge=judge)
    app_ctx.home.save_config(updated)
    if as_json:
        emit_json({**endpoint.model_dump(mode="json", exclude_none=True), "judge": judge})
    else:
        info(f"added model {name} ({kind.value}" + (", a jury member" if judge else "") + ")")


@app.command("list")
def list_models(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable.")) -> None:
    """List configured models and judges."""
    config = app_context(ctx).home.config
    rows: list[dict[str, Any]] = [
        {"name": m.name, "kind": m.kind.value, "served_model": m.model_id, "base_urls": m.base_urls,
         "judge": m.name in config.judges}
        for m in config.models
    ]
    if as_json:
        emit_json(rows)
        return
    emit_table("models", ["name", "kind", "served model", "endpoints", "judge"],
               [[r["name"], r["kind"], r["served_model"], ", ".join(r["base_urls"]) or "(embedded)",
                 "yes" if r["judge"] else ""] for r in rows])


@app.command("wait")
def wait(
    ctx: typer.Context,
    names: list[str] = typer.Argument(None, help="Models or judges to wait for [default: every configured "
                                      "model and judge served over HTTP]."),
    timeout: float = typer.Option(900.0, "--timeout", min=0, help="Seconds to wait for all of them."),
    interval: float = typer.Option(5.0, "--interval", min=0.1, help="Seconds between probes of a replica."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Wait until every replica of the models (and judges) answers its health check; exit 1 on timeout.

    Run it before an evaluation (the Helm chart's runner does, in an init container) so a run never starts
    against servers that are still loading: their requests would fail and be recorded as errors.
    """
    from medhelm_local.inference.readiness import probed_endpoints, wait_for_models

    app_ctx = app_context(ctx)
    config = app_ctx.home.config
    # An unknown name exits 2, naming the configured ones.
    selected = [config.model(n) for n in dict.fromkeys(names)] if names else list(config.models)
    probed = probed_endpoints(selected)
    results = wait_for_models(probed, app_ctx.egress, timeout_s=timeout, interval_s=interval)
    ok = all(r.ok for r in results)
    skipped = [e.name for e in selected if e not in probed]
    if as_json:
        emit_json({"ok": ok, "timeout_s": timeout, "replicas": [r.as_dict() for r in results],
                   "skipped_embedded": skipped})
    else:
        emit_table("model servers", ["model", "url", "status", "detail"],
                   [[r.model, r.url, "ready" if r.ok else "NOT READY",
                     f"after {r.ready_after_s}s" if r.ok else (r.error or "no answer")] for r in results])
        for name in skipped:
            info(f"{name}: embedded, started by the runner itself (not probed)")
    if not ok:
        waiting = sorted({r.model for r in results if not r.ok})
        if not as_json:
            info(f"not ready after {timeout:.0f}s: {', '.join(waiting)}")
        raise typer.Exit(1)
