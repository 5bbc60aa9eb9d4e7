"""``models add`` / ``models list``: the endpoints the appliance may query."""

from __future__ import annotations

from typing import Any

import typer

from medhelm_local.audit import audit_event
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import app_context
from medhelm_local.errors import BadInputError, ConfigError
from medhelm_local.home.config import ApplianceConfig, BackendKind, ModelEndpoint
from medhelm_local.inference.egress import check_egress

NAME = "models"
HELP = "Models under test and judges: add and list endpoints."
app = typer.Typer(no_args_is_help=True)


@app.command("add")
def add(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="Name used in `run --model` and in reports."),
    base_url: list[str] = typer.Option(
        [], "--base-url", help="OpenAI-compatible base URL ending in /v1; repeat for replicas."
    ),
    kind: BackendKind = typer.Option(BackendKind.OPENAI_COMPATIBLE, "--kind", help="Backend kind."),
    served_model: str | None = typer.Option(None, "--served-model", help="Model id the server expects."),
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
                                 api_key_env=api_key_env, context_length=context_length)
    except ValueError as exc:
        raise BadInputError(f"models add: {exc}") from None
    for url in endpoint.base_urls:
        try:
            check_egress(url, config.allowlist)
        except Exception:
            audit_event(app_ctx.home, app_ctx.actor, "config.model_add", outcome="denied", model=name,
                        reason="endpoint_not_allowlisted")
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
        emit_json(endpoint.model_dump(mode="json", exclude_none=True))
    else:
        info(f"added model {name} ({kind.value})")


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
