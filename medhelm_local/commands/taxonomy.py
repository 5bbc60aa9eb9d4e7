"""``taxonomy``: the MedHELM task taxonomy (5 categories, 22 subcategories, 121 tasks)."""

from __future__ import annotations

import sys

import typer
from rich.tree import Tree

from medhelm_local.console import emit_json, is_tty, stdout_console
from medhelm_local.taxonomy import Taxonomy, load_taxonomy

NAME = "taxonomy"
HELP = "The clinician-validated MedHELM task taxonomy (categories, subcategories, tasks)."
app = typer.Typer(invoke_without_command=True)


def _tree(taxonomy: Taxonomy) -> Tree:
    counts = taxonomy.counts()
    root = Tree(f"[bold]MedHELM taxonomy[/] ({counts['categories']} categories, "
                f"{counts['subcategories']} subcategories, {counts['tasks']} tasks)")
    for category in taxonomy.categories:
        node = root.add(f"[bold cyan]{category.name}[/]")
        node.add(f"[dim]Definition:[/] {category.definition}")
        node.add(f"[dim]Inclusion criteria:[/] {category.inclusion_criteria}")
        node.add(f"[dim]Task performer:[/] {category.task_performer}")
        for sub in category.subcategories:
            sub_node = node.add(f"[green]{sub.name}[/] ({len(sub.tasks)} tasks)")
            for task in sub.tasks:
                sub_node.add(task.task)
    return root


def _plain(taxonomy: Taxonomy) -> None:
    counts = taxonomy.counts()
    title = (f"# MedHELM taxonomy: {counts['categories']} categories, "
             f"{counts['subcategories']} subcategories, {counts['tasks']} tasks")
    lines = [title, "category\tsubcategory\ttask"]
    for category in taxonomy.categories:
        for sub in category.subcategories:
            lines.extend(f"{category.name}\t{sub.name}\t{task.task}" for task in sub.tasks)
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


@app.callback()
def taxonomy(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Show the taxonomy: a tree on a terminal, tab-separated lines when piped, or JSON."""
    data = load_taxonomy()
    if as_json:
        emit_json(data.as_dict())
    elif is_tty():
        stdout_console().print(_tree(data))
    else:
        _plain(data)
