"""``datasets register`` / ``datasets list``: validated data into the encrypted store."""

from __future__ import annotations

from pathlib import Path

import typer

from medhelm_local.application.datasets import register_dataset
from medhelm_local.console import emit_json, emit_table, info
from medhelm_local.context import app_context

NAME = "datasets"
HELP = "Register benchmark files and hospital extracts into the encrypted store."
app = typer.Typer(no_args_is_help=True)


@app.command("register")
def register(
    ctx: typer.Context,
    benchmark: str = typer.Argument(..., help="Benchmark id (see `benchmarks list`)."),
    path: Path = typer.Argument(..., help="The benchmark's native file or folder, or an extract."),
    spec_file: Path | None = typer.Option(
        None, "--spec", help="A bring-your-own-extract benchmark YAML defining BENCHMARK; stored in the home."
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Validate PATH for BENCHMARK and store its instances (all or nothing)."""
    registration = register_dataset(app_context(ctx), benchmark, path, spec_file=spec_file)
    if as_json:
        emit_json(registration.model_dump())
        return
    info(f"registered {benchmark}: {registration.instances} instances, "
         f"source sha256 {registration.source_sha256[:16]}…"
         + (", skipped " + ", ".join(f"{n} ({why})" for why, n in registration.skipped.items())
            if registration.skipped else "")
         + ("" if registration.new else " (already registered)"))
    if (change := registration.reading_changed) is not None:
        info(f"registered as new version {registration.fingerprint[:16]}: this release reads {path.name} "
             f"differently from the one that registered version {change.previous[:16]} ({change.differing} of "
             f"{change.compared} instances differ{', and their order' if change.reordered else ''}); new runs use "
             "the new version, earlier runs keep theirs")


@app.command("list")
def list_datasets(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Machine-readable.")) -> None:
    """List registered dataset versions (ids and fingerprints only), newest first; new runs use the current one."""
    with app_context(ctx).open_store(read_only=True) as store:  # works during a run
        rows = store.list_datasets()  # newest first within a benchmark: the first is current
    current = {r.benchmark: r.fingerprint for r in reversed(rows)}
    if as_json:
        emit_json([{**r.model_dump(mode="json"), "current": current[r.benchmark] == r.fingerprint} for r in rows])
        return
    emit_table("datasets", ["benchmark", "version", "current", "instances", "source sha256", "registered (UTC)"],
               [[r.benchmark, r.fingerprint[:16], "yes" if current[r.benchmark] == r.fingerprint else "",
                 r.n_instances, r.source_sha256[:16], r.registered_at.isoformat(timespec="seconds")]
                for r in rows])
