import json

from typer.testing import CliRunner

from medhelm_local.commands import taxonomy as taxonomy_cmd
from medhelm_local.taxonomy import load_taxonomy


def test_counts_are_5_22_121() -> None:
    taxonomy = load_taxonomy()
    assert taxonomy.counts() == {"categories": 5, "subcategories": 22, "tasks": 121}


def test_categories_carry_definition_inclusion_and_performer() -> None:
    taxonomy = load_taxonomy()
    assert [c.name for c in taxonomy.categories] == [
        "Clinical Decision Support",
        "Clinical Note Generation",
        "Patient Communication and Education",
        "Medical Research Assistance",
        "Administration and Workflow",
    ]
    for category in taxonomy.categories:
        assert category.definition and category.inclusion_criteria and category.task_performer


def test_subcategories_per_category_match_appendix_a() -> None:
    taxonomy = load_taxonomy()
    assert [len(c.subcategories) for c in taxonomy.categories] == [4, 4, 5, 5, 4]


def test_tasks_are_unique_within_a_subcategory_and_keep_their_source_line() -> None:
    for sub in load_taxonomy().subcategories:
        names = [t.task for t in sub.tasks]
        assert len(names) == len(set(names)), sub.name
        assert all(t.line for t in sub.tasks)


def test_placement_resolves_aliases() -> None:
    taxonomy = load_taxonomy()
    found = taxonomy.placement("predicting patient risks and outcomes")
    assert found is not None
    category, sub = found
    assert (category.name, sub.name) == ("Clinical Decision Support", "Predicting Risks and Outcomes")
    assert taxonomy.placement("Astrology") is None


def test_cli_json_has_counts() -> None:
    result = CliRunner().invoke(taxonomy_cmd.app, ["--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["counts"] == {"categories": 5, "subcategories": 22, "tasks": 121}
    assert sum(len(s["tasks"]) for c in data["categories"] for s in c["subcategories"]) == 121


def test_cli_plain_lists_one_task_per_line() -> None:
    result = CliRunner().invoke(taxonomy_cmd.app, [])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line and not line.startswith("#")]
    assert rows[0] == "category\tsubcategory\ttask"
    assert len(rows) == 1 + 121
