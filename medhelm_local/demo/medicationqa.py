"""The demo's MedicationQA sample: real rows of MedicationQA (Ben Abacha et al., MEDINFO 2019; CC BY 4.0).

The rows are bundled as readable JSON (``data/medicationqa_sample.json``, attribution in ``data/ATTRIBUTION.md``)
and written into the demo home as an ``.xlsx`` workbook with the source file's columns, so that the demo
registers them through the same loader as the real ``MedInfo2019-QA-Medications.xlsx``.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

COLUMNS = ("Question", "Focus (Drug)", "Question Type", "Answer", "Section Title", "URL")


def sample_rows() -> list[dict[str, str | None]]:
    text = (resources.files("medhelm_local.demo") / "data" / "medicationqa_sample.json").read_text(encoding="utf-8")
    rows: list[dict[str, str | None]] = json.loads(text)
    return rows


def write_sample_xlsx(path: Path) -> Path:
    """Write the bundled rows as a one-sheet workbook with the source's header; returns ``path``."""
    from openpyxl import Workbook

    workbook = Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(list(COLUMNS))
    for row in sample_rows():
        sheet.append([row.get(column) for column in COLUMNS])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    workbook.save(tmp)
    tmp.replace(path)
    return path
