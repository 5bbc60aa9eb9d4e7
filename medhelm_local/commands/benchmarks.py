"""``benchmarks list`` / ``benchmarks show``: the benchmark specs the appliance ships."""

from __future__ import annotations

from typing import Any

import typer

from medhelm_local.benchmarks.registry import all_specs, get_spec
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.console import emit_json, emit_table, stdout

NAME = "benchmarks"
HELP = "The MedHELM benchmarks this appliance can run."
app = typer.Typer(no_args_is_help=True)


def summary(spec: BenchmarkSpec) -> dict[str, Any]:
    return {
        "id": spec.id, "name": spec.name, "category": spec.category, "subcategory": spec.subcategory,
        "access": spec.access.value, "curation": spec.curation.value, "output_type": spec.output_type.value,
        "metric": spec.metric,
    }


@app.command("list")
def list_benchmarks(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """List every benchmark spec."""
    rows = [summary(s) for s in all_specs()]
    if as_json:
        emit_json(rows)
        return
    emit_table("benchmarks", ["id", "name", "category", "access", "output", "metric"],
               [[r["id"], r["name"], r["category"], r["access"], r["output_type"], r["metric"]] for r in rows])


@app.command("show")
def show(benchmark_id: str = typer.Argument(..., metavar="ID"),
         as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Show one benchmark's full spec."""
    spec = get_spec(benchmark_id)
    data = spec.model_dump(mode="json", exclude_none=True)
    if as_json:
        emit_json(data)
        return
    import yaml

    stdout.print(yaml.safe_dump(data, sort_keys=False), markup=False)
