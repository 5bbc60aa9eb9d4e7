"""``datasets register`` / ``datasets list``: validated data into the encrypted store."""

from __future__ import annotations

from pathlib import Path

import typer

from medhelm_local.audit import audit_event
from medhelm_local.benchmarks.registry import get_spec
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import app_context
from medhelm_local.errors import BadInputError
from medhelm_local.loaders import load_dataset
from medhelm_local.store import Store

NAME = "datasets"
HELP = "Register benchmark files and hospital extracts into the encrypted store."
app = typer.Typer(no_args_is_help=True)


@app.command("register")
def register(
    ctx: typer.Context,
    benchmark: str = typer.Argument(..., help="Benchmark id (see `benchmarks list`)."),
    path: Path = typer.Argument(..., help="The benchmark's native file or folder, or an extract."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Validate PATH for BENCHMARK and store its instances (all or nothing)."""
    app_ctx = app_context(ctx)
    spec = get_spec(benchmark)
    try:
        result = load_dataset(spec, path)
    except BadInputError:
        audit_event(app_ctx.home, app_ctx.actor, "dataset.register", outcome="rejected", role="informatics",
                    benchmark=benchmark, source_name=path.name)
        raise
    fingerprint = result.fingerprint
    skipped = dict(result.skipped)
    # Audit first: if the trail cannot be written, nothing is registered (fail closed).
    audit_event(app_ctx.home, app_ctx.actor, "dataset.register", role="informatics", benchmark=benchmark,
                fingerprint=fingerprint, instances=len(result.instances), skipped=sum(skipped.values()))
    with Store.open(app_ctx.home) as store:
        new = store.register_dataset(benchmark, fingerprint, path.name, result.instances, skipped)
    payload = {"benchmark": benchmark, "instances": len(result.instances), "skipped": skipped,
               "fingerprint": fingerprint, "new": new}
    if as_json:
        emit_json(payload)
    else:
        info(f"registered {benchmark}: {len(result.instances)} instances, fingerprint {fingerprint[:16]}…"
             + (f", skipped {skipped}" if skipped else "") + ("" if new else " (already registered)"))


@app.command("list")
def list_datasets(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable.")) -> None:
    """List registered datasets (ids and fingerprints only)."""
    with Store.open(app_context(ctx).home) as store:
        rows = store.list_datasets()
    if as_json:
        emit_json([r.model_dump(mode="json") for r in rows])
        return
    emit_table("datasets", ["benchmark", "instances", "fingerprint", "registered (UTC)"],
               [[r.benchmark, r.n_instances, r.fingerprint[:16], r.registered_at.isoformat(timespec="seconds")]
                for r in rows])
