"""``score``: score predictions produced elsewhere inside the network."""

from __future__ import annotations

from pathlib import Path

import typer

from medhelm_local.commands import NotBuiltYet


def register(app: typer.Typer) -> None:
    app.command("score")(score)


def score(
    benchmark: str = typer.Argument(..., help="Benchmark id."),
    predictions: Path = typer.Option(..., "--predictions", help="JSONL of {\"id\": ..., \"output\": ...}."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Score a predictions file against the registered dataset."""
    raise NotBuiltYet("`score --predictions`", 5)
