"""``benchmarks list`` / ``show`` / ``add`` / ``remove``: the shipped MedHELM specs and a home's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from medhelm_local.audit import audit_event
from medhelm_local.benchmarks.registry import (
    is_custom,
    remove_custom_spec,
)
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.console import emit_json, emit_table, info, stdout_console
from medhelm_local.context import app_context
from medhelm_local.errors import BadInputError
from medhelm_local.phi_text import recorded_name
from medhelm_local.prompts.styles import parity_status

NAME = "benchmarks"
HELP = "The MedHELM benchmarks this appliance can run, and your own (bring your own extract)."
app = typer.Typer(no_args_is_help=True)


def summary(spec: BenchmarkSpec) -> dict[str, Any]:
    return {
        "id": spec.id,
        "name": spec.name,
        "category": spec.category,
        "subcategory": spec.subcategory,
        "access": spec.access.value,
        "curation": spec.curation.value,
        "input_format": spec.input_format,
        "output_type": spec.output_type.value,
        "metric": spec.metric,
        "max_tokens": spec.max_tokens,
        "medhelm_parity": parity_status(spec),  # identical / unavailable / undefined (run --prompt-style medhelm)
        "custom": is_custom(spec.id),
    }


@app.command("list")
def list_benchmarks(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    category: str | None = typer.Option(None, "--category", help="Only this taxonomy category."),
    access: str | None = typer.Option(None, "--access", help="Only public, gated or private benchmarks."),
) -> None:
    """List every benchmark spec (the 37 MedHELM ones, then this home's custom ones)."""
    rows = [summary(s) for s in app_context(ctx).specs.all()]
    if category:
        rows = [r for r in rows if r["category"].casefold() == category.casefold()]
    if access:
        if access not in ("public", "gated", "private"):
            raise BadInputError("--access must be public, gated or private")
        rows = [r for r in rows if r["access"] == access]
    if as_json:
        emit_json(rows)
        return
    emit_table(
        f"benchmarks ({len(rows)})",
        ["id", "name", "category", "subcategory", "access", "output", "metric", "medhelm parity"],
        [
            [r["id"], r["name"], r["category"], r["subcategory"], r["access"], r["output_type"], r["metric"],
             r["medhelm_parity"]]
            for r in rows
        ],
    )


@app.command("show")
def show(
    ctx: typer.Context,
    benchmark_id: str = typer.Argument(..., metavar="ID"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show one benchmark's full spec (prompt, loader options, metric, judge rubric)."""
    spec = app_context(ctx).specs.get(benchmark_id)
    data = spec.model_dump(mode="json", exclude_none=True)
    if as_json:
        emit_json({**data, "metric": spec.metric})  # the main metric, as scripts read it before ``metrics:``
        return
    import yaml

    stdout_console().print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=110), markup=False)


@app.command("add")
def add(
    ctx: typer.Context,
    spec_file: Path = typer.Argument(..., metavar="SPEC_FILE", help="A benchmark YAML (see `benchmarks show`)."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Validate a custom benchmark YAML and keep it in this home (then `datasets register ID PATH`)."""
    app_ctx = app_context(ctx)
    try:
        spec = app_ctx.specs.register(spec_file)
    except BadInputError:
        audit_event(
            app_ctx.home,
            app_ctx.actor,
            "benchmark.add",
            outcome="rejected",
            role="informatics",
            source_name=recorded_name(spec_file.name),
        )
        raise
    audit_event(app_ctx.home, app_ctx.actor, "benchmark.add", role="informatics", benchmark=spec.id)
    if as_json:
        emit_json(summary(spec))
    else:
        info(
            f"added benchmark {spec.id} ({spec.category} / {spec.subcategory}); "
            f"register its data with `medhelm-local datasets register {spec.id} PATH`"
        )


@app.command("remove")
def remove(ctx: typer.Context, benchmark_id: str = typer.Argument(..., metavar="ID")) -> None:
    """Remove a custom benchmark spec from this home (registered data stays in the store)."""
    app_ctx = app_context(ctx)
    if not is_custom(benchmark_id):
        raise BadInputError(f"{benchmark_id!r} is a built-in MedHELM benchmark and cannot be removed")
    remove_custom_spec(benchmark_id, app_ctx.home.root)
    # The file removed may have been put in the home by hand, its id never checked as a registered one is.
    audit_event(app_ctx.home, app_ctx.actor, "benchmark.remove", role="informatics",
                benchmark=recorded_name(benchmark_id))
    info(f"removed custom benchmark {benchmark_id}")
