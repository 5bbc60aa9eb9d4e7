"""``models add`` / ``update`` / ``remove`` / ``list`` / ``wait``: the endpoints the appliance may query."""

from __future__ import annotations

import errno
import re
from enum import StrEnum
from typing import Any

import typer
from pydantic import ValidationError

from medhelm_local.audit import audit_event
from medhelm_local.audit.intents import announce
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import AppContext, app_context
from medhelm_local.deployment import refuse_without_model_egress
from medhelm_local.errors import BadInputError, ConfigError, EgressDenied, MedhelmError, validation_problems
from medhelm_local.home import Home
from medhelm_local.home.config import GIVE_BASE_URL, ApplianceConfig, BackendKind, ModelEndpoint
from medhelm_local.patterns import MODEL_NAME
from medhelm_local.phi_text import recorded_name

NAME = "models"
HELP = "Models under test and judges: add, update, remove and list endpoints."
app = typer.Typer(no_args_is_help=True)
_OPTIONS = {"name": "NAME", "kind": "--kind", "base_urls": "--base-url", "served_model": "--served-model",
            "reply_model": "--reply-model", "api_key_env": "--api-key-env", "context_length": "--context-length"}
# The endpoint settings `models add` and `models update` take alike (for update, one not given keeps the model's).
_SETTING_OPTIONS: dict[str, dict[str, Any]] = {
    "--kind": {"help": "Backend kind."},
    "--served-model": {"help": "Model id the server expects."},
    "--reply-model": {"help": "Model name the server's replies carry, where not the one asked for (a reply naming "
                      "another is a failure)."},
    "--api-key-env": {"help": "Env var holding the API key."},
    "--context-length": {"min": 256, "help": "The model's context in tokens (prompts are fitted into it); without "
                         "one, what the server reports, else 2048."},
}


def _setting_option(option: str, default: Any = None) -> Any:
    return typer.Option(default, option, **_SETTING_OPTIONS[option])


@app.command("add")
def add(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="Name used in `run --model` and in reports."),
    base_url: list[str] = typer.Option(
        [], "--base-url", help="OpenAI-compatible base URL ending in /v1; repeat for replicas."
    ),
    kind: BackendKind = _setting_option("--kind", BackendKind.OPENAI_COMPATIBLE),
    served_model: str | None = _setting_option("--served-model"),
    reply_model: str | None = _setting_option("--reply-model"),
    api_key_env: str | None = _setting_option("--api-key-env"),
    context_length: int | None = _setting_option("--context-length"),
    judge: bool = typer.Option(False, "--judge", help="Also use this model as a jury member."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Add a model endpoint to appliance.yaml. Its URL must be on the endpoint allowlist."""
    app_ctx = app_context(ctx)
    _refuse_unwritable_config(app_ctx, "config.model_add", name)
    config = app_ctx.home.config
    if any(m.name == name for m in config.models):
        raise BadInputError(f"model {name!r} already exists in {app_ctx.home.config_path}; change it with "
                            f"`models update {name}`")
    try:
        endpoint = ModelEndpoint(name=name, kind=kind, base_urls=base_url, served_model=served_model,
                                 reply_model=reply_model, api_key_env=api_key_env, context_length=context_length)
    except ValidationError as exc:
        raise BadInputError(f"models add: {validation_problems(exc, _OPTIONS)}") from None
    _check_allowlisted(app_ctx, endpoint, "config.model_add")
    data = config.model_dump()
    data["models"].append(endpoint.model_dump())
    if judge:
        data["judges"].append(name)
    _save(app_ctx, "config.model_add", _validated(data), model=name, kind=kind.value, endpoints=endpoint.base_urls,
          judge=judge)
    if as_json:
        emit_json({**endpoint.model_dump(mode="json", exclude_none=True), "judge": judge})
    else:
        info(f"added model {name} ({kind.value}" + (", a jury member" if judge else "") + ")")


class Setting(StrEnum):
    """A setting ``models update --unset`` removes (the model then takes its default)."""

    BASE_URL = "base-url"
    SERVED_MODEL = "served-model"
    REPLY_MODEL = "reply-model"
    API_KEY_ENV = "api-key-env"
    CONTEXT_LENGTH = "context-length"


_UNSET_FIELD = {Setting.BASE_URL: "base_urls", Setting.SERVED_MODEL: "served_model", Setting.REPLY_MODEL: "reply_model",
                Setting.API_KEY_ENV: "api_key_env", Setting.CONTEXT_LENGTH: "context_length"}
# What the model's runs are bound to: a run started before such a change resumes only against the same model
# identity (served model, weights, server versions), checked on resume (runner.session.check_identity).
_IDENTITY_FIELDS = {"kind", "base_urls", "served_model"}


@app.command("update")
def update(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The model to change, as `models list` names it."),
    base_url: list[str] = typer.Option(
        [], "--base-url", help="OpenAI-compatible base URL ending in /v1; replaces the model's URLs (repeat for "
        "replicas: give all of them)."
    ),
    kind: BackendKind | None = _setting_option("--kind"),
    served_model: str | None = _setting_option("--served-model"),
    reply_model: str | None = _setting_option("--reply-model"),
    api_key_env: str | None = _setting_option("--api-key-env"),
    context_length: int | None = _setting_option("--context-length"),
    unset: list[Setting] = typer.Option([], "--unset", help="Remove a setting (the default applies again); "
                                        "repeat for several."),
    judge: bool | None = typer.Option(None, "--judge/--no-judge", help="Add the model to the jury, or take it out."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Change a model endpoint in appliance.yaml: the options given replace its settings, the others are kept.
    Its URLs must be on the endpoint allowlist."""
    app_ctx = app_context(ctx)
    _refuse_unwritable_config(app_ctx, "config.model_update", name)
    config = app_ctx.home.config
    before = config.model(name)  # an unknown name exits 2, naming the configured ones
    given: dict[str, Any] = {"base_urls": base_url or None, "kind": kind, "served_model": served_model,
                             "reply_model": reply_model, "api_key_env": api_key_env, "context_length": context_length}
    changes = {field: value for field, value in given.items() if value is not None}
    for setting in dict.fromkeys(unset):
        field = _UNSET_FIELD[setting]
        if field in changes:
            raise BadInputError(f"models update: {_OPTIONS[field]} and --unset {setting.value}: give one of them")
        changes[field] = [] if field == "base_urls" else None
    if not changes and judge is None:
        raise BadInputError("models update: give at least one setting to change (see `models update --help`)")
    try:
        endpoint = ModelEndpoint.model_validate({**before.model_dump(), **changes})
    except ValidationError as exc:
        problems = validation_problems(exc, _OPTIONS).replace(GIVE_BASE_URL, f"`models update {name} --base-url URL`")
        raise BadInputError(f"models update: {problems}") from None
    was_judge = name in config.judges
    is_judge = was_judge if judge is None else judge
    changed = [field for field in changes if getattr(endpoint, field) != getattr(before, field)]
    options = [_OPTIONS[field] for field in changed] + (["--judge" if is_judge else "--no-judge"]
                                                         if is_judge != was_judge else [])
    if options:
        _check_allowlisted(app_ctx, endpoint, "config.model_update")
        data = config.model_dump()
        data["models"] = [endpoint.model_dump() if m.name == name else m.model_dump() for m in config.models]
        if is_judge != was_judge:  # a judge that stays one keeps its place in the jury
            data["judges"] = [j for j in config.judges if j != name] + ([name] if is_judge else [])
        _save(app_ctx, "config.model_update", _validated(data), model=name, changed=options,
              kind=endpoint.kind.value, endpoints=endpoint.base_urls, judge=is_judge)
    if as_json:
        emit_json({**endpoint.model_dump(mode="json", exclude_none=True), "judge": is_judge, "changed": options})
        return
    if not options:
        info(f"model {name} unchanged: it already has those settings")
        return
    info(f"updated model {name}: {', '.join(options)}")
    if _IDENTITY_FIELDS & set(changed):
        info(f"a run of {name} started before resumes only if the model still answers as the same served model, "
             "weights and server version (`run --resume` checks, and refuses otherwise)")


@app.command("remove")
def remove(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The model to remove, as `models list` names it."),
    judge: bool = typer.Option(False, "--judge", help="Also take it out of the jury (a judge is not removed "
                               "without it)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Remove a model endpoint from appliance.yaml. Its runs stay in the store, on the leaderboard and in exports;
    resuming one needs the model configured again."""
    app_ctx = app_context(ctx)
    _refuse_unwritable_config(app_ctx, "config.model_remove", name)
    config = app_ctx.home.config
    endpoint = config.model(name)  # an unknown name exits 2, naming the configured ones
    was_judge = name in config.judges
    if was_judge and not judge:
        raise BadInputError(f"model {name!r} is a judge (`judges` in {app_ctx.home.config_path}): removing it "
                            f"changes the jury; give --judge to take it out of the jury and remove it")
    data = config.model_dump()
    data["models"] = [m.model_dump() for m in config.models if m.name != name]
    data["judges"] = [j for j in config.judges if j != name]
    _save(app_ctx, "config.model_remove", _validated(data), model=name, kind=endpoint.kind.value,
          endpoints=endpoint.base_urls, judge=was_judge)
    if as_json:
        emit_json({**endpoint.model_dump(mode="json", exclude_none=True), "judge": was_judge, "removed": True})
    else:
        info(f"removed model {name}" + (" (and from the jury)" if was_judge else "")
             + "; its runs are kept (resuming one needs the model added again)")


def _check_allowlisted(app_ctx: AppContext, endpoint: ModelEndpoint, action: str) -> None:
    """Every URL of ``endpoint`` must be on the allowlist; a refusal is audited under ``action``."""
    for url in endpoint.base_urls:
        try:
            app_ctx.egress.check(url)
        except EgressDenied:
            audit_event(app_ctx.home, app_ctx.actor, action, outcome="denied", role="it-admin",
                        model=endpoint.name, reason="endpoint_not_allowlisted", intent_seq=None)  # before its intent
            raise


def _recorded_model(home: Home, name: str) -> str:
    """The model a refused command named, as the trail records it: a configured model's name; any other name is
    only what the user typed (anyone may run `models` in the toolbox, where it is refused), recorded where it is a
    model name's shape and reads as no patient data, else withheld (``[withheld:shape]``, ``[withheld:date]``...)."""
    try:
        if any(model.name == name for model in home.config.models):
            return name
    except MedhelmError:
        pass
    return recorded_name(name) if re.fullmatch(MODEL_NAME, name) else "[withheld:shape]"


def _refuse_unwritable_config(app_ctx: AppContext, action: str, name: str) -> None:
    """Refuse (exit 2, audited, before anything is checked or written) where appliance.yaml cannot be written: the
    deployment's read-only file (the chart's ConfigMap, compose's ``:ro`` mount), changed where it is made, or a
    home's file this user may not write."""
    home = app_ctx.home
    if home.config_writable():
        return
    managed = home.config_from_deployment
    audit_event(home, app_ctx.actor, action, outcome="refused", role="it-admin", model=_recorded_model(home, name),
                reason="config_managed_by_deployment" if managed else "config_not_writable", intent_seq=None)
    command = f"`models {action.removeprefix('config.model_')}`"
    if managed:
        raise BadInputError(
            f"{home.config_path} ($MEDHELM_CONFIG) is the deployment's appliance.yaml, read-only here: {command} "
            "cannot change it. Change the models where the deployment makes it: with the Helm chart, in the values "
            "(`models` and `judges` for servers the chart runs, `appliance.extraModels` for an endpoint already "
            "running), then `helm upgrade`; with docker compose, in deploy/appliance.compose.yaml on the host, which "
            "the containers mount")
    raise BadInputError(f"{home.config_path}: this user cannot write it or its folder, so {command} cannot change "
                        "it; run the command as the home's owner")


# Why appliance.yaml could not be written, as the trail records it (an errno's name where none of these).
_WRITE_FAILURES = {errno.ENOSPC: "disk_full", errno.EDQUOT: "disk_full", errno.EROFS: "read_only",
                   errno.EACCES: "permission_denied", errno.EPERM: "permission_denied", errno.EBUSY: "mount_point"}


def _save(app_ctx: AppContext, action: str, updated: ApplianceConfig, **objects: Any) -> None:
    """Write ``updated`` to appliance.yaml, audited: the intent first (fail closed: a trail that refuses it changes
    nothing), then ``success`` once the file is written, or ``failure`` with the reason the write failed. The file
    is replaced whole or left as it was."""
    home = app_ctx.home
    with announce(home, app_ctx.actor, action, role="it-admin", **objects) as attempt:
        try:
            home.save_config(updated)
        except OSError as exc:
            reason = _WRITE_FAILURES.get(exc.errno or 0) or errno.errorcode.get(exc.errno or 0, type(exc).__name__)
            attempt.conclude("failure", reason=reason.lower(), **objects)
            raise MedhelmError(f"{home.config_path}: cannot write it ({exc.strerror or type(exc).__name__}): "
                               f"`models {action.removeprefix('config.model_')}` changed nothing") from None
        attempt.conclude(**objects)


def _validated(data: dict[str, Any]) -> ApplianceConfig:
    try:
        return ApplianceConfig.model_validate(data)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


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
    if probed:
        refuse_without_model_egress(
            "models wait probes the model servers",
            "a Job from the runner CronJob waits for them itself (runner.waitForModels: its wait-for-models init "
            "container, deploy/RUNBOOK.md, Runs); `kubectl get pods -l app.kubernetes.io/component=model-server` "
            "shows whether they are Ready")
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
