"""Extracts as the hospital's tools write them (not as the loader would like them): each loads into the right
instances, or fails with one precise error naming file, row and column, never a cell's value."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import openpyxl

from medhelm_local.benchmarks.registry import shipped_spec
from medhelm_local.benchmarks.spec import BenchmarkSpec
from medhelm_local.loaders import load_dataset

OPTIONS = {"id_column": "ref_id", "fields": {"context": "note", "question": "prompt"}, "label_column": "outcome"}


def _ent(**options: object) -> BenchmarkSpec:
    return shipped_spec("ent_referral").model_copy(update={"loader_options": {**OPTIONS, **options}})


def test_a_workbook_whose_recorded_dimension_is_stale_loads_every_row(tmp_path: Path) -> None:
    # Report tools that fill a template (or stream rows) leave the sheet's <dimension> as it was: openpyxl's
    # read-only mode stopped there, and rows 10 to 20 were dropped without a word.
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.append(["ref_id", "note", "prompt", "outcome"])
    for n in range(1, 21):
        sheet.append([n, f"note {n}", "Refer to ENT?", "AB"[n % 2]])
    written = tmp_path / "written.xlsx"
    workbook.save(written)
    path = tmp_path / "referrals.xlsx"
    with zipfile.ZipFile(written) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml":
                data, count = re.subn(rb'<dimension ref="[^"]*"', b'<dimension ref="A1:D10"', data)
                assert count == 1
            target.writestr(item, data)
    instances = load_dataset(_ent(), path).instances
    assert [i.id for i in instances] == [str(n) for n in range(1, 21)]
    assert instances[-1].fields == {"context": "note 20", "question": "Refer to ENT?"} and instances[-1].label == "A"
