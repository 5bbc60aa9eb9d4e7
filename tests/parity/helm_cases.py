"""The instances behind the HELM golden files, read by this project's own loaders from the same native files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.loaders import load_dataset
from medhelm_local.records import Instance

HERE = Path(__file__).resolve().parent
GOLDEN_HELM = HERE / "golden" / "helm"
FIXTURES = HERE / "fixtures"


def public_data() -> Path:
    from tests.conftest import SHARED_DATA

    return SHARED_DATA


def helm_goldens() -> list[dict[str, Any]]:
    return [json.loads(f.read_text(encoding="utf-8")) for f in sorted(GOLDEN_HELM.glob("*.json"))]


def source_path(golden: dict[str, Any]) -> Path:
    source: str = golden["source"]
    if source.startswith("fixtures/"):
        return FIXTURES / source.split("/")[1]
    return public_data() / Path(source).parent  # the file's folder: what `datasets register` is given


def load_case_instance(golden: dict[str, Any]) -> Instance:
    spec = shipped_spec(golden["benchmark"])
    by_id = {i.id: i for i in load_dataset(spec, source_path(golden)).instances}
    return by_id[golden["instance_id"]]
