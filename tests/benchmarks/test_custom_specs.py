"""Custom benchmark YAML: validation (each problem names the field) and persistence under the home."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from medhelm_local.benchmarks.registry import (
    all_specs,
    custom_specs,
    get_spec,
    load_custom_spec,
    register_custom_spec,
    remove_custom_spec,
)
from medhelm_local.errors import BadInputError, NotFoundError

BASE: dict[str, Any] = {
    "id": "wound_followup",
    "name": "Wound Follow-up",
    "description": "Does the wound need a nurse visit?",
    "subcategory": "Care Coordination and Planning",
    "loader_options": {"fields": {"context": "note", "question": "prompt"}, "label_column": "label"},
    "output_type": "choice_letter",
    "labels": ["A", "B"],
    "metric": "exact_match",
    "max_tokens": 8,
    "prompt": {"template": "{context}\n\n{question}\nAnswer A or B.\nAnswer:"},
}


def _write(tmp_path: Path, **changes: Any) -> Path:
    data = {**BASE, **changes}
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp_path / "custom.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_defaults_and_category_from_the_subcategory(tmp_path: Path) -> None:
    spec = load_custom_spec(_write(tmp_path))
    assert spec.category == "Administration and Workflow"
    assert (spec.access.value, spec.curation.value, spec.input_format) == ("private", "new", "private_table")


def test_alias_subcategory_is_canonicalised(tmp_path: Path) -> None:
    spec = load_custom_spec(_write(tmp_path, subcategory="Predicting Patient Risks and Outcomes"))
    assert (spec.category, spec.subcategory) == ("Clinical Decision Support", "Predicting Risks and Outcomes")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"subcategory": "Astrology"}, "field subcategory must be one of"),
        ({"category": "Clinical Note Generation"}, "field category must be 'Administration and Workflow'"),
        ({"id": "pubmedqa"}, "built-in MedHELM benchmark"),
        ({"id": "Bad Id"}, "field id"),
        ({"input_format": "telepathy"}, "field input_format must be one of"),
        ({"metric": "vibes"}, "field metric must be one of"),
        ({"max_tokens": 0}, "field max_tokens"),
        ({"prompt": {"template": "{context"}}, "field prompt.template is not a valid template"),
        ({"prompt": {"template": "{note[0]}"}}, "template fields must be plain names"),
        ({"labels": ["A", "B"], "label_map": {"1": "C"}}, "label_map maps to labels not in labels"),
        ({"colour": "blue"}, "field colour"),
        ({"output_type": "free_text", "metric": "jury"}, "needs a judge rubric"),
    ],
)
def test_invalid_custom_specs_name_the_field(tmp_path: Path, changes: dict[str, Any], message: str) -> None:
    with pytest.raises(BadInputError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load_custom_spec(_write(tmp_path, **changes))


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "custom.yaml"
    path.write_text("id: x\nname: [unclosed\n", encoding="utf-8")
    with pytest.raises(BadInputError, match="invalid YAML at line"):
        load_custom_spec(path)


def test_register_persists_under_the_home_and_joins_the_registry(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert custom_specs(home) == {}
    spec = register_custom_spec(_write(tmp_path), home)
    stored = home / "benchmarks" / "wound_followup.yaml"
    assert stored.is_file() and (stored.stat().st_mode & 0o777) == 0o600
    assert get_spec("wound_followup", home) == spec
    ids = [s.id for s in all_specs(home)]
    assert len(ids) == 38 and ids[-1] == "wound_followup"
    assert "wound_followup" not in [s.id for s in all_specs()]
    with pytest.raises(NotFoundError):
        get_spec("wound_followup")
    register_custom_spec(_write(tmp_path, name="Wound Follow-up v2"), home)
    assert get_spec("wound_followup", home).name == "Wound Follow-up v2"
    remove_custom_spec("wound_followup", home)
    with pytest.raises(NotFoundError):
        get_spec("wound_followup", home)


def test_active_home_makes_custom_specs_visible_everywhere(tmp_path: Path) -> None:
    from medhelm_local.benchmarks.registry import active_home, set_active_home

    home = tmp_path / "home"
    register_custom_spec(_write(tmp_path), home)
    assert active_home() is None
    set_active_home(home)
    try:
        assert get_spec("wound_followup").id == "wound_followup"
        assert len(all_specs()) == 38
    finally:
        set_active_home(None)
    assert len(all_specs()) == 37
